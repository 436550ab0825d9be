package writeguard

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The library's size rules: no function over maxFuncLines lines (from
// func to its closing brace, comments inside counted, as a funlen linter
// with statements off counts) and no file over maxFileLines lines, in
// the non-test Go files of the library's packages.
const (
	maxFuncLines = 60
	maxFileLines = 650
)

// libraryDirs are the library's package trees (the root package alone,
// the others with their subpackages).
var libraryDirs = []string{".", "internal", "policy", "envelope", "dlq", "hooks", "otelhook", "replay"}

func TestLayoutSizes(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	for _, dir := range libraryDirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if dir == "." && path != "." || strings.HasPrefix(d.Name(), "testdata") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			files++
			if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
				t.Errorf("%s: %d lines (at most %d)", path, n, maxFileLines)
			}
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: func %s: %d lines (at most %d)", path, fd.Name.Name, n, maxFuncLines)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", dir, err)
		}
	}
	if files < 50 {
		t.Fatalf("read %d library files: the walk missed the library", files)
	}
}
