package axtest_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// No test helper is copied between packages: two test files of different
// directories that declare a function (or a method, whatever its receiver)
// of the same name, signature and body of more than one statement hold a
// copy, which belongs here once. Test, benchmark, fuzz and example
// functions are the tests themselves, not helpers.
func TestNoTestHelperIsCopied(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	found := map[string][]string{} // name, signature and body -> where
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || len(fn.Body.List) < 2 || isTest(fn.Name.Name) {
				continue
			}
			var key bytes.Buffer
			key.WriteString(fn.Name.Name)
			_ = printer.Fprint(&key, token.NewFileSet(), fn.Type)
			_ = printer.Fprint(&key, token.NewFileSet(), fn.Body)
			found[key.String()] = append(found[key.String()], fset.Position(fn.Pos()).String())
		}
		return nil
	})
	require.NoError(t, err)
	for key, where := range found {
		dirs := map[string]bool{}
		for _, w := range where {
			dirs[filepath.Dir(w)] = true
		}
		if len(dirs) > 1 {
			name, _, _ := strings.Cut(key, "func")
			t.Errorf("test helper %s is copied in %v: keep one in internal/axtest (or internal/natstest)", name, where)
		}
	}
}

// isTest reports whether a function of that name is run by go test.
func isTest(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
