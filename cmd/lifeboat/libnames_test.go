package main

import (
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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
