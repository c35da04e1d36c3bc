package kv_test

import (
	"fmt"
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

// bindingFields are the fields of kv.Record that only Record.Bind writes.
var bindingFields = map[string]bool{"Gen": true, "Stream": true, "StreamSeq": true}

// TestOnlyBindWritesTheBinding reads every Go file of the module outside kv
// (tests included) that imports kv, and fails on a write of a record's
// binding that does not go through [kv.Record.Bind]: an assignment (=, op=,
// ++, --) to a field named Gen, Stream or StreamSeq, a kv.Record literal
// that sets one, or a pointer taken to one. The check is syntactic (no type
// information): in such a file a field of another type with one of these
// names is reported too; name it otherwise or fill it in a literal of its
// own type.
func TestOnlyBindWritesTheBinding(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || path == filepath.Join(root, "kv")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		found = append(found, bindingWrites(t, path, rel)...)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "a record's binding (Gen, Stream, StreamSeq) is written only by kv.Record.Bind")
}

func TestBindingWritesAreFound(t *testing.T) {
	t.Parallel()
	const src = `package p

import k "github.com/ax-mesh/ax/internal/kv"

func f(r *k.Record, s *struct{ Gen uint64 }) {
	r.Gen = 2
	r.Stream, r.StreamSeq = "AX_P1", 3
	r.Gen++
	r.StreamSeq += 1
	p := &r.Gen
	_ = p
	_ = &k.Record{ID: "a", Gen: 1}
	_ = []k.Record{{Stream: "x"}}
	r.Bind(r.Gen+1, "AX_P2", 4) // the one writer
	_ = r.Gen == 2              // a read
}
`
	path := filepath.Join(t.TempDir(), "p.go")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
	require.Len(t, bindingWrites(t, path, "p.go"), 8)
}

// bindingWrites returns the writes of a record's binding in one file, or
// none if the file does not import kv.
func bindingWrites(t *testing.T, path, rel string) []string {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	require.NoError(t, err, "parse %s", rel)
	kvName := ""
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/ax-mesh/ax/internal/kv" {
			kvName = "kv"
			if imp.Name != nil {
				kvName = imp.Name.Name
			}
		}
	}
	if kvName == "" {
		return nil
	}
	var out []string
	report := func(n ast.Node, what string) {
		out = append(out, fmt.Sprintf("%s:%d: %s", rel, fset.Position(n.Pos()).Line, what))
	}
	binding := func(e ast.Expr) (string, bool) {
		if sel, ok := ast.Unparen(e).(*ast.SelectorExpr); ok && bindingFields[sel.Sel.Name] {
			return sel.Sel.Name, true
		}
		return "", false
	}
	isRecord := func(e ast.Expr) bool {
		if star, ok := e.(*ast.StarExpr); ok {
			e = star.X
		}
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == kvName && sel.Sel.Name == "Record"
	}
	// recordLits are the element literals of a []kv.Record or map of them,
	// whose type is elided.
	recordLits := map[*ast.CompositeLit]bool{}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				return true
			}
			for _, lhs := range n.Lhs {
				if name, ok := binding(lhs); ok {
					report(n, "assigns "+name)
				}
			}
		case *ast.IncDecStmt:
			if name, ok := binding(n.X); ok {
				report(n, "assigns "+name)
			}
		case *ast.UnaryExpr:
			if name, ok := binding(n.X); ok && n.Op == token.AND {
				report(n, "takes a pointer to "+name)
			}
		case *ast.CompositeLit:
			elem := n.Type
			switch typ := n.Type.(type) {
			case *ast.ArrayType:
				elem = typ.Elt
			case *ast.MapType:
				elem = typ.Value
			}
			if elem != n.Type && isRecord(elem) {
				for _, e := range n.Elts {
					if kvExpr, ok := e.(*ast.KeyValueExpr); ok {
						e = kvExpr.Value
					}
					if lit, ok := ast.Unparen(e).(*ast.CompositeLit); ok && lit.Type == nil {
						recordLits[lit] = true
					}
				}
			}
			if !isRecord(n.Type) && !recordLits[n] {
				return true
			}
			for _, e := range n.Elts {
				if kvExpr, ok := e.(*ast.KeyValueExpr); ok {
					if key, ok := kvExpr.Key.(*ast.Ident); ok && bindingFields[key.Name] {
						report(kvExpr, "sets "+key.Name+" in a kv.Record literal")
					}
				}
			}
		}
		return true
	})
	return out
}
