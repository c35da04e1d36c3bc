package ax_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// publicPackages returns the directories of the module's importable
// packages that are not internal: the public API.
func publicPackages(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		switch {
		case path != "." && strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", d.Name() == "internal",
			path == "integration", path == "cmd", path == "examples", path == "docs":
			return filepath.SkipDir
		}
		dirs = append(dirs, path)
		return nil
	})
	require.NoError(t, err)
	return dirs
}

// internalUse is a type of an internal package named in a public package.
type internalUse struct{ path, name string }

// A user can name every type the public API hands out: a type of an
// internal package (internal/kv, internal/streams, …) that appears in an
// exported declaration of a public package (a function's signature, an
// exported field, a variable's type) has an exported alias in a public
// package (ax.Record for the record, ax.Names for the names, …).
func TestPublicAPINamesNoInternalOnlyType(t *testing.T) {
	t.Parallel()
	aliased := map[internalUse]bool{}
	uses := map[internalUse][]string{}
	for _, dir := range publicPackages(t) {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			if f.Name.Name == "main" {
				continue
			}
			internal := map[string]string{} // local name -> import path
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !strings.Contains(path, "/internal/") {
					continue
				}
				local := path[strings.LastIndex(path, "/")+1:]
				if imp.Name != nil {
					local = imp.Name.Name
				}
				internal[local] = path
			}
			if len(internal) == 0 {
				continue
			}
			var record func(where string, n ast.Node)
			record = func(where string, n ast.Node) {
				ast.Inspect(n, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.ArrayType: // a length is a constant, not a type to name
						record(where, n.Elt)
						return false
					case *ast.SelectorExpr:
						if id, ok := n.X.(*ast.Ident); ok && internal[id.Name] != "" {
							use := internalUse{internal[id.Name], n.Sel.Name}
							uses[use] = append(uses[use], where)
						}
						return false
					}
					return true
				})
			}
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() || (d.Recv != nil && !exportedReceiver(d.Recv)) {
						continue
					}
					record(fset.Position(d.Pos()).String()+" "+d.Name.Name, d.Type)
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							if s.Assign.IsValid() {
								if sel, ok := s.Type.(*ast.SelectorExpr); ok {
									if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] != "" {
										aliased[internalUse{internal[id.Name], sel.Sel.Name}] = true
										continue
									}
								}
							}
							recordExported(record, fset.Position(s.Pos()).String()+" "+s.Name.Name, s.Type)
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() && s.Type != nil {
									record(fset.Position(n.Pos()).String()+" "+n.Name, s.Type)
								}
							}
						}
					}
				}
			}
		}
	}
	for use, where := range uses {
		if !aliased[use] {
			t.Errorf("%s.%s is in the public API (%s) but no public package names it with an alias", use.path, use.name, strings.Join(where, "; "))
		}
	}
}

// recordExported records the internal types an exported type shows: the
// types of its exported and embedded fields, or of its methods, or itself.
func recordExported(record func(string, ast.Node), where string, typ ast.Expr) {
	switch tt := typ.(type) {
	case *ast.StructType:
		for _, field := range tt.Fields.List {
			exported := len(field.Names) == 0 // embedded
			for _, n := range field.Names {
				exported = exported || n.IsExported()
			}
			if exported {
				record(where, field.Type)
			}
		}
	default:
		record(where, typ)
	}
}

// exportedReceiver reports whether a method's receiver type is exported.
func exportedReceiver(recv *ast.FieldList) bool {
	typ := recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if index, ok := typ.(*ast.IndexExpr); ok {
		typ = index.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
