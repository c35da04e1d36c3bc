package streams_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The watch subjects receive every mistyped submit of the shapes they
// cover, each once, and no valid submit: watching them costs the hot path
// nothing. A stream over the whole submit root, the alternative, is refused
// by JetStream because it overlaps the priority buckets.
func TestRejectWatchSeesOnlyRejectedSubjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nc, js := natstest.RunServer(t)
	names := streams.DefaultNames()
	require.Equal(t, names.RejectWatchSubjects(), streams.Names{}.RejectWatchSubjects(), "the zero Names are the default's")
	natstest.Provision(t, js, &streams.Config{})

	got := make(chan string, 256)
	for _, s := range names.RejectWatchSubjects() {
		sub, err := nc.Subscribe(s, func(m *nats.Msg) { got <- m.Subject })
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, nc.Flush())

	for p := range streams.Priorities {
		_, err := js.Publish(ctx, names.SubmitSubject(p, "acme", "echo", "k1"), nil)
		require.NoError(t, err, "a valid submit is stored")
	}
	bad := map[string]string{
		"ax.submit.p9.acme.echo.k1":    streams.RejectPriority,
		"ax.submit.P0.acme.echo.k1":    streams.RejectPriority,
		"ax.submit.2.acme.echo.k1":     streams.RejectPriority,
		"ax.submit.p2.acme.echo":       streams.RejectTokens,
		"ax.submit.p2.acme.echo.k.1":   streams.RejectTokens, // a dot in the key
		"ax.submit.p2.acme.echo.k.1.2": streams.RejectTokens,
		"ax.submit.p2":                 streams.RejectTokens,
		"ax.submit":                    streams.RejectTokens,
		"ax.core.p7.acme.echo.k1":      streams.RejectPriority,
		"ax.core.p1.acme":              streams.RejectTokens,
	}
	for subject, reason := range bad {
		have, detail := names.SubmitRejection(subject)
		require.Equal(t, reason, have, subject)
		require.NotEmpty(t, detail)
		require.NoError(t, nc.Publish(subject, []byte("x")))
	}
	require.NoError(t, nc.Flush())
	seen := map[string]int{}
	for range bad {
		select {
		case s := <-got:
			seen[s]++
		case <-time.After(5 * time.Second):
			t.Fatalf("the watch saw only %v", seen)
		}
	}
	for subject := range bad {
		require.Equal(t, 1, seen[subject], subject)
	}
	select {
	case s := <-got:
		t.Fatalf("the watch saw %q more than once or a valid submit", s)
	case <-time.After(200 * time.Millisecond):
	}
	for p := range streams.Priorities {
		reason, _ := names.SubmitRejection(names.SubmitSubject(p, "acme", "echo", "k1"))
		require.Empty(t, reason)
	}

	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CATCH_ALL", Subjects: []string{"ax.submit.>"}})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "overlap"), err.Error())
}

func TestMatchesAny(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, filter, subject string
		want                  bool
	}{
		{"literal", "a.b", "a.b", true},
		{"star", "a.*.c", "a.x.c", true},
		{"star is one token", "a.*", "a.b.c", false},
		{"tail", "a.>", "a.b.c", true},
		{"tail needs a token", "a.>", "a", false},
		{"shorter", "a.b.c", "a.b", false},
		{"longer", "a.b", "a.b.c", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, streams.MatchesAny([]string{tc.filter}, tc.subject))
		})
	}
}
