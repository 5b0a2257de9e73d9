package checkpointd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestSentinelsWhole: Sentinels holds as many distinct errors as the
// package declares with errors.New, so no layer mistakes a new domain
// error for the store being unavailable.
func TestSentinelsWhole(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range spec.Names {
				if i >= len(spec.Values) || !ast.IsExported(name.Name) {
					continue
				}
				if call, ok := spec.Values[i].(*ast.CallExpr); ok {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "New" {
						if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "errors" {
							declared = append(declared, name.Name)
						}
					}
				}
			}
			return true
		})
	}
	distinct := map[error]bool{}
	for _, e := range Sentinels {
		distinct[e] = true
	}
	if len(declared) != len(distinct) || len(distinct) != len(Sentinels) {
		t.Errorf("the package declares %d sentinel errors %v; Sentinels holds %d distinct of %d", len(declared), declared,
			len(distinct), len(Sentinels))
	}
}
