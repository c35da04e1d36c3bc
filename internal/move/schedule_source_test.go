package move_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// scheduleOwners may build a schedule's message or name a schedule's
// subject beside a publish: the owner (this package's schedule.go) and
// the package that names the subjects.
var scheduleOwners = map[string]bool{"internal/move/schedule.go": true, "internal/streams/delayed.go": true}

// publishMethods are the calls that store a message.
var publishMethods = map[string]bool{"Publish": true, "PublishMsg": true, "PublishAsync": true, "PublishMsgAsync": true}

// Nothing but move.Schedule puts a task into AX_DELAYED: outside its
// owner, no file builds a schedule's message (Names.DelayedMsg), and no
// file that names a schedule's subject (DelayedSubject, DueSubject: the
// readers, the purge of a cancel) publishes anything.
func TestOnlyMoveSchedules(t *testing.T) {
	t.Parallel()
	var found []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", path)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || scheduleOwners[filepath.ToSlash(rel)] {
			return nil
		}
		found = append(found, schedules(t, path, rel)...)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "only internal/move/schedule.go writes to AX_DELAYED")
}

// schedules lists what in the Go file path builds a schedule, or names a
// schedule's subject in a file that also publishes.
func schedules(t *testing.T, path, rel string) []string {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, 0)
	require.NoError(t, err)
	var builds, names, publishes []string
	ast.Inspect(file, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		at := rel + ":" + strconv.Itoa(fset.Position(sel.Pos()).Line)
		switch name := sel.Sel.Name; {
		case name == "DelayedMsg":
			builds = append(builds, at+" builds a schedule (DelayedMsg)")
		case name == "DelayedSubject" || name == "DueSubject":
			names = append(names, at+" names a schedule's subject ("+name+")")
		case publishMethods[name]:
			publishes = append(publishes, at+" publishes ("+name+")")
		}
		return true
	})
	if len(names) > 0 && len(publishes) > 0 {
		builds = append(builds, names...)
		builds = append(builds, publishes...)
	}
	return builds
}

// The check finds a schedule built outside the owner, and a subject named
// beside a publish.
func TestSchedulesAreFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, src string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
		return path
	}
	built := write("built.go", `package p

func f() { _, _ = js.PublishMsg(ctx, names.DelayedMsg("t", "id", msg, at)) }
`)
	require.Len(t, schedules(t, built, "built.go"), 1)
	named := write("named.go", `package p

func f() { _, _ = js.PublishMsg(ctx, nats.NewMsg(names.DelayedSubject("t", "id"))) }
`)
	require.Len(t, schedules(t, named, "named.go"), 2)
	read := write("read.go", `package p

func f() { _, _ = stream.GetLastMsgForSubject(ctx, names.DueSubject("t", "id")) }
`)
	require.Empty(t, schedules(t, read, "read.go"))
}
