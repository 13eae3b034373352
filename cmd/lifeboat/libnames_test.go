package main

import (
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// varRef finds the environment variables of lifeboat and of AWS that a
// text names.
var varRef = regexp.MustCompile(`\b(?:LIFEBOAT|AWS)_[A-Z0-9_]+`)

// notLibrary are the folders of the module whose packages are programs,
// their tests' helpers or deployment files; every other package is a
// library, whose errors name its fields, never a flag or a variable.
var notLibrary = []string{"cmd/", "bench/", "deploy/", "docs/", "examples/", "images/", "scripts/", "internal/cmd/", "internal/testenv/"}

// libraryFiles calls f with each Go source file (not a test) of the
// module's library packages, by its path from the module's root.
func libraryFiles(t *testing.T, f func(rel, path string)) {
	t.Helper()
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || slices.Contains(notLibrary, rel+"/")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") && strings.Contains(rel, "/") {
			f(rel, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// stringLiterals calls fn with the line and the literal (quotes and all)
// of every string literal in the Go file at path; comments are not read.
func stringLiterals(t *testing.T, path string, fn func(line int, lit string)) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile(path, -1, len(src)), src, nil, 0)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return
		}
		if tok == token.STRING {
			fn(fset.Position(pos).Line, lit)
		}
	}
}

// errorStrings returns the string constants of file that can reach an
// error's text: in the arguments of errors.New and fmt.Errorf, in an Error
// method, and in what a function returns as its error. A named constant
// declared in the file counts as its value.
func errorStrings(t *testing.T, path string) (fset *token.FileSet, found map[token.Pos]string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset = token.NewFileSet()
	file, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	ast.Inspect(file, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil {
							consts[name.Name] = s
						}
					}
				}
			}
		}
		return true
	})
	found = map[token.Pos]string{}
	collect := func(n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.BasicLit:
				if x.Kind == token.STRING {
					if s, err := strconv.Unquote(x.Value); err == nil {
						found[x.Pos()] = s
					}
				}
			case *ast.Ident:
				if s, ok := consts[x.Name]; ok {
					found[x.Pos()] = s
				}
			}
			return true
		})
	}
	returnsError := func(ft *ast.FuncType) (results int, ok bool) {
		if ft.Results == nil {
			return 0, false
		}
		for _, f := range ft.Results.List {
			results += max(1, len(f.Names))
		}
		last := ft.Results.List[len(ft.Results.List)-1].Type
		id, isIdent := last.(*ast.Ident)
		return results, isIdent && id.Name == "error"
	}
	// returns collects what the return statements of body give as the
	// error, not descending into the function literals in it (they are
	// visited on their own).
	returns := func(ft *ast.FuncType, body *ast.BlockStmt) {
		n, ok := returnsError(ft)
		if !ok || body == nil {
			return
		}
		ast.Inspect(body, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.FuncLit:
				return false
			case *ast.ReturnStmt:
				switch len(x.Results) {
				case n:
					collect(x.Results[n-1])
				case 1:
					collect(x.Results[0]) // a call that returns them all
				}
			}
			return true
		})
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncDecl:
			if x.Recv != nil && x.Name.Name == "Error" && len(x.Type.Params.List) == 0 {
				collect(x.Body)
			}
			returns(x.Type, x.Body)
		case *ast.FuncLit:
			returns(x.Type, x.Body)
		case *ast.CallExpr:
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && (pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf") {
					for _, a := range x.Args {
						collect(a)
					}
				}
			}
		}
		return true
	})
	return fset, found
}

// TestLibrariesNameNoFlags: no error a library package returns names a flag
// (--settle) or an environment variable (LIFEBOAT_*, AWS_*). A library
// returns field errors (s3.FieldError, supervisor.FieldError, ...), and
// cmd names the flags and variables of their fields (fields.go and the
// commands' own mappings), so that the names users type live in one
// layer. Every library package is scanned, so a new package or a new
// message is held to it.
func TestLibrariesNameNoFlags(t *testing.T) {
	var bad []string
	files := 0
	libraryFiles(t, func(rel, path string) {
		files++
		fset, found := errorStrings(t, path)
		for pos, s := range found {
			var names []string
			for _, m := range flagRef.FindAllStringSubmatch(s, -1) {
				names = append(names, "--"+m[1])
			}
			for _, v := range varRef.FindAllString(s, -1) {
				if !slices.Contains(libraryVarsAllowed[rel], v) {
					names = append(names, v)
				}
			}
			if len(names) > 0 {
				p := fset.Position(pos)
				bad = append(bad, rel+":"+strconv.Itoa(p.Line)+": "+strings.Join(names, ", "))
			}
		}
	})
	if files < 100 {
		t.Fatalf("only %d library files found: the walk is wrong", files)
	}
	slices.Sort(bad)
	bad = slices.Compact(bad)
	for _, b := range bad {
		t.Errorf("%s: a library's error names this; return a field error and name it in cmd", b)
	}
}

// lifeboatVar finds the variables of lifeboat that a text names.
var lifeboatVar = regexp.MustCompile(`\bLIFEBOAT_[A-Z0-9_]+`)

// libraryVarsAllowed are the variables that a library's string literals
// and errors may name, by file: the trainer's environment (the product's
// interface with the trainer, not a setting of lifeboat), the variables a
// library reads itself (as their own SDKs do), and those only a test sets.
var libraryVarsAllowed = map[string][]string{
	// The trainer's environment.
	"pipeline/pipeline.go": {"LIFEBOAT_DIR", "LIFEBOAT_MARKER", "LIFEBOAT_RANK", "LIFEBOAT_WORLD_SIZE"},
	"pipeline/job.go":      {"LIFEBOAT_STOP_FILE"},
	"resume/resume.go":     {"LIFEBOAT_RESUME_DIR", "LIFEBOAT_RESUME_STEP", "LIFEBOAT_RESUME_ID", "LIFEBOAT_RESUME_SOURCE", "LIFEBOAT_RESUME_REASON"},
	// kube.Discover reads the downward API's variables, and the reporter's
	// hint for a pod the API server does not know names them.
	"kube/discover.go": {"LIFEBOAT_POD_NAME", "LIFEBOAT_POD_NAMESPACE", "LIFEBOAT_POD_UID"},
	"kube/reporter.go": {"LIFEBOAT_POD_NAME", "LIFEBOAT_POD_NAMESPACE"},
	// notice.Config.ReadEnv reads the AWS SDKs' metadata variables.
	"notice/config.go": {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "AWS_EC2_METADATA_DISABLED"},
	// The supervisor's re-exec marks its own child's environment.
	"supervisor/mask.go": {"LIFEBOAT_INTERNAL_MASK_CLEARED"},
	// A fault only the end-to-end tests set.
	"checkpoint/faults.go": {"LIFEBOAT_FAULT_STOP_AT_MOVE"},
}

// TestLibrariesTextNamesNoFlags: no string in a library's code (a log
// line's hint, effect or reason, a verdict, a help text) names a flag or a
// variable of lifeboat, beyond the few of libraryVarsAllowed. A library
// names a setting with setting.Name in a setting.Text, and cmd renders it
// as the flag (settingFlags). Comments are not looked at.
func TestLibrariesTextNamesNoFlags(t *testing.T) {
	var bad []string
	libraryFiles(t, func(rel, path string) {
		stringLiterals(t, path, func(line int, lit string) {
			var names []string
			for _, m := range flagRef.FindAllStringSubmatch(lit, -1) {
				names = append(names, "--"+m[1])
			}
			for _, v := range lifeboatVar.FindAllString(lit, -1) {
				if !slices.Contains(libraryVarsAllowed[rel], v) {
					names = append(names, v)
				}
			}
			if len(names) > 0 {
				bad = append(bad, rel+":"+strconv.Itoa(line)+": "+strings.Join(names, ", "))
			}
		})
	})
	for _, b := range bad {
		t.Errorf("%s: a library's text names this; name the setting (setting.Text) and let cmd name its flag", b)
	}
}
