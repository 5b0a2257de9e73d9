package reconcile_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Calls reconcile's code must not make: it runs no program, and it looks
// at the host's files only through the os.Root of an operator's worktree
// root (gitdir.Open is the one place that opens those roots).
var (
	forbiddenImports = map[string]string{"os/exec": "runs programs", "plugin": "loads code"}
	forbiddenCalls   = map[string]string{
		"os.StartProcess": "runs programs", "syscall.Exec": "runs programs",
		"syscall.ForkExec": "runs programs", "syscall.StartProcess": "runs programs",
	}
	hostFileCalls = map[string]bool{
		"os.Stat": true, "os.Lstat": true, "os.Open": true, "os.OpenFile": true, "os.ReadFile": true,
		"os.ReadDir": true, "os.Readlink": true, "os.DirFS": true, "os.OpenRoot": true, "os.OpenInRoot": true,
		"os.Chdir": true, "filepath.EvalSymlinks": true, "filepath.Walk": true, "filepath.WalkDir": true,
		"filepath.Glob": true, "filepath.Abs": true, "syscall.Open": true, "syscall.Openat": true, "syscall.Stat": true,
		"golang.org/x/sys/unix.Open": true, "golang.org/x/sys/unix.Openat": true, "golang.org/x/sys/unix.Openat2": true,
		"golang.org/x/sys/unix.Stat": true, "golang.org/x/sys/unix.Lstat": true, "golang.org/x/sys/unix.Fstatat": true,
	}
	// reopen opens /proc/self/fd/N of a descriptor already resolved inside
	// a root: the descriptor, not a host path, names the file.
	hostFileCallers = map[string]bool{"gitdir/roots.go:Open": true, "gitdir/open_linux.go:reopen": true}
)

// TestReconcileRunsNoProgram reads the source of reconcile and the
// packages below it (not their tests, which build fixtures with git) for
// the imports and calls above.
func TestReconcileRunsNoProgram(t *testing.T) {
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && d.Name() == "testdata" {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		checkSource(t, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 5 {
		t.Fatalf("read %d files: the walk missed the package", files)
	}
}

func checkSource(t *testing.T, path string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // local name → import path
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if why, bad := forbiddenImports[p]; bad {
			t.Errorf("%s imports %s, which %s", fset.Position(imp.Pos()), p, why)
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = p
	}
	for _, decl := range f.Decls {
		fn, _ := decl.(*ast.FuncDecl)
		caller := ""
		if fn != nil {
			caller = filepath.ToSlash(path) + ":" + fn.Name.Name
		}
		ast.Inspect(decl, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok || names[x.Name] == "" {
				return true
			}
			call := names[x.Name] + "." + sel.Sel.Name
			if p := names[x.Name]; p == "path/filepath" {
				call = "filepath." + sel.Sel.Name
			}
			if why, bad := forbiddenCalls[call]; bad {
				t.Errorf("%s: %s %s", fset.Position(sel.Pos()), call, why)
			}
			if hostFileCalls[call] && !hostFileCallers[caller] {
				t.Errorf("%s: %s looks at a host path outside an os.Root (only %v may)", fset.Position(sel.Pos()), call, hostFileCallers)
			}
			return true
		})
	}
}
