package axtype_test

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ax-mesh/ax/axtype"
	"github.com/stretchr/testify/require"
)

// The leaf imports nothing of ax: every package may import it.
func TestLeafImportsNothingOfAx(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			require.NotContains(t, path, "github.com/ax-mesh/ax", "%s imports %s", name, path)
			require.NotContains(t, path, ".", "%s imports %s: the leaf uses the standard library only", name, path)
		}
	}
}

// Priority's two forms: the name on the wire and the bucket number.
func TestPriorityForms(t *testing.T) {
	t.Parallel()
	for level := range axtype.Priorities {
		p := axtype.PriorityOf(level)
		got, err := p.Level()
		require.NoError(t, err)
		require.Equal(t, level, got)
		parsed, err := axtype.ParsePriority(string(p))
		require.NoError(t, err)
		require.Equal(t, level, parsed)
	}
	zero, err := axtype.Priority("").Level()
	require.NoError(t, err)
	require.Equal(t, 2, zero, "the zero Priority is DefaultPriority's")
	for _, bad := range []string{"", "p5", "P1", "1", "p-1", "p10"} {
		_, err := axtype.ParsePriority(bad)
		require.ErrorIs(t, err, axtype.ErrBadPriority, bad)
	}
	_, err = axtype.Priority("p9").Level()
	require.ErrorIs(t, err, axtype.ErrBadPriority)

	var p axtype.Priority
	require.NoError(t, json.Unmarshal([]byte(`"p3"`), &p))
	require.Equal(t, axtype.P3, p)
	require.NoError(t, json.Unmarshal([]byte(`0`), &p), "a number as cron jobs stored it")
	require.Equal(t, axtype.P0, p)
	out, err := json.Marshal(axtype.TaskInfo{Priority: axtype.P1})
	require.NoError(t, err)
	require.Contains(t, string(out), `"priority":"p1"`)
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	out, err := json.Marshal(axtype.Duration(1500e6))
	require.NoError(t, err)
	require.JSONEq(t, `"1.5s"`, string(out))
	var d axtype.Duration
	require.NoError(t, json.Unmarshal([]byte(`"2m"`), &d))
	require.Equal(t, "2m0s", d.String())
	require.NoError(t, json.Unmarshal([]byte(`7`), &d))
	require.Equal(t, axtype.Duration(7), d)
	require.Error(t, json.Unmarshal([]byte(`"soon"`), &d))
}
