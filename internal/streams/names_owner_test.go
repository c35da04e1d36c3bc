package streams_test

import (
	"testing"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// The message filter matches a producer's stored message of its tenant and
// type on any shard and key, and no control-plane copy.
func TestStoredMessageFilter(t *testing.T) {
	t.Parallel()
	n := streams.Names{}
	f := n.StoredMessageFilter(2, "acme", "email")
	require.Equal(t, "ax.p2.*.acme.email.*", f)
	require.True(t, matches(f, n.StoredSubject(2, 7, "acme", "email", "k1")))
	require.False(t, matches(f, n.StoredSubject(2, 7, "globex", "email", "k1")))
	require.False(t, matches(f, n.CopySubject(2, "acme", "email", "k1")))
	require.Equal(t, "ax.p0.*.*.*.*", n.StoredMessageFilter(0, "*", "*"))
}

// matches reports whether subject matches a filter of whole-token wildcards.
func matches(filter, subject string) bool {
	f, s := splitTokens(filter), splitTokens(subject)
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || tok != "*" && tok != s[i] {
			return false
		}
	}
	return len(f) == len(s)
}

func splitTokens(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
