// Command funclen fails when a Go function is longer than a limit (60 lines, counted from
// the func line to the closing brace), so the house rule of small functions with one job
// holds in the benchmark and the tools as it does in the product. `make test-unit` runs it
// over the product's module (its tests aside) and over bench/ and the tools' modules (their
// tests included).
//
//	go run ./tools/funclen [-max 60] [-tests] root...
//
// Each root is a module's folder; funclen reads every .go file below it, except in folders
// that are modules of their own (a go.mod: they are roots of their own), testdata, vendor and
// folders whose names start with "." or "_", and except generated files ("Code generated
// ... DO NOT EDIT."). A function literal counts towards the function that holds it.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	maxLines := flag.Int("max", 60, "the most lines a function may have, from its func line to its closing brace")
	tests := flag.Bool("tests", false, "check the _test.go files too")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "funclen: name at least one module folder")
		os.Exit(2)
	}
	var long []function
	for _, root := range flag.Args() {
		found, err := longFunctions(root, *maxLines, *tests)
		if err != nil {
			fmt.Fprintln(os.Stderr, "funclen:", err)
			os.Exit(2)
		}
		long = append(long, found...)
	}
	for _, f := range long {
		fmt.Fprintf(os.Stderr, "%s:%d: %s is %d lines (at most %d)\n", f.file, f.line, f.name, f.lines, *maxLines)
	}
	if len(long) > 0 {
		fmt.Fprintf(os.Stderr, "funclen: %d function(s) over %d lines; split each into well-named steps\n", len(long), *maxLines)
		os.Exit(1)
	}
}

// function is one function declaration that is too long.
type function struct {
	file  string
	line  int
	name  string
	lines int
}

// longFunctions lists the functions longer than maxLines in the module at root.
func longFunctions(root string, maxLines int, tests bool) ([]function, error) {
	var long []function
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return skipDir(root, path, d.Name())
		}
		if !strings.HasSuffix(path, ".go") || !tests && strings.HasSuffix(path, "_test.go") {
			return nil
		}
		found, err := longInFile(path, maxLines)
		long = append(long, found...)
		return err
	})
	return long, err
}

// skipDir returns filepath.SkipDir for a folder that is not part of root's module or holds
// no code of it.
func skipDir(root, path, name string) error {
	if path == root {
		return nil
	}
	if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return filepath.SkipDir
	}
	if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
		return filepath.SkipDir // another module
	}
	return nil
}

// longInFile lists the function declarations of one file longer than maxLines; none for a
// generated file.
func longInFile(path string, maxLines int) ([]function, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var long []function
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
		if n := end.Line - start.Line + 1; n > maxLines {
			long = append(long, function{file: path, line: start.Line, name: funcName(fd), lines: n})
		}
	}
	return long, nil
}

// funcName is the declaration's name as a reader looks for it: "run", or "(*fleet).drive" for
// a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	return "(" + typeName(fd.Recv.List[0].Type) + ")." + fd.Name.Name
}

// typeName renders a receiver's type: T, *T, T[K] as T.
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "*" + typeName(t.X)
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.IndexListExpr:
		return typeName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
