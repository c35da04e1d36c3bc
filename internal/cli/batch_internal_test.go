package cli

import (
	"strings"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/stretchr/testify/require"
)

// A batch file is JSON lines; every bad line is named by its number (up
// to ten, then counted), and a file with none is refused.
func TestReadBatch(t *testing.T) {
	t.Parallel()
	tasks, err := readBatch([]byte("{\"id\":\"a\",\"type\":\"echo\"}\n\n  {\"type\":\"echo\",\"tenant\":\"acme\"}  \n"), "f")
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	require.Equal(t, 1, tasks[0].line)
	require.Equal(t, 3, tasks[1].line)
	require.Equal(t, "acme", tasks[1].spec.Tenant)

	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"an array", `[{"type":"echo"}]`, []string{"f:1: a JSON array"}},
		{"an unknown field", "{\"type\":\"echo\"}\n{\"type\":\"echo\",\"pyload\":\"x\"}", []string{`f:2: json: unknown field "pyload"`, "1 bad lines"}},
		{"two values", `{"type":"echo"} {"type":"echo"}`, []string{"f:1: more than one JSON value"}},
		{"not JSON", "echo hello", []string{"f:1: not a JSON object"}},
		{"broken JSON", `{"type": "echo"`, []string{"f:1: unexpected EOF"}},
		{"empty", "\n\n", []string{"no task in the file"}},
		{"many bad", strings.Repeat("x\n", 12), []string{"12 bad lines", "f:10: not", "(and 2 more bad lines)"}},
	} {
		_, err := readBatch([]byte(c.text), "f")
		require.ErrorIs(t, err, ax.ErrInvalidTask, c.name)
		for _, want := range c.want {
			require.Contains(t, err.Error(), want, c.name)
		}
		require.NotContains(t, err.Error(), "f:11:", c.name)
	}
}
