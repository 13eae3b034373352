package docs

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
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

// eventName is the one form of an event name: area.event, lower case.
var eventName = regexp.MustCompile(`^[a-z0-9]+\.[a-z0-9_]+$`)

// looksLikeEvent picks out the messages of calls on receivers that are not
// named like a logger (log, l.cfg.Log, slog): only these count as events,
// and they are then held to eventName.
var looksLikeEvent = regexp.MustCompile(`^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$`)

// msgArg is the index of the message argument of each slog.Logger (and
// package slog) logging method.
var msgArg = map[string]int{
	"Debug": 0, "Info": 0, "Warn": 0, "Error": 0,
	"DebugContext": 1, "InfoContext": 1, "WarnContext": 1, "ErrorContext": 1,
	"Log": 2, "LogAttrs": 2,
}

// site is where an event is logged.
type site struct {
	name   string
	pos    string   // file:line, relative to the module root
	keys   []string // the attribute keys the call logs, sorted, once each
	keysOK bool     // keys is all of them: none was left unread
}

// TestLogEventsDocumented fails when an event the code logs is missing
// from LOGS.md, or LOGS.md lists an event the code no longer logs.
func TestLogEventsDocumented(t *testing.T) {
	sites, unnamed, _ := codeEvents(t, "..")
	for _, u := range unnamed {
		t.Errorf("%s", u)
	}
	docs, problems := docEvents(t, "LOGS.md")
	for _, p := range problems {
		t.Errorf("%s", p)
	}

	code := map[string][]string{}
	for _, s := range sites {
		if !slices.Contains(code[s.name], s.pos) {
			code[s.name] = append(code[s.name], s.pos)
		}
	}
	var add, remove []string
	for name, pos := range code {
		if _, ok := docs[name]; !ok {
			add = append(add, fmt.Sprintf("  %s (logged at %s)", name, strings.Join(pos, ", ")))
		}
	}
	for name, line := range docs {
		if _, ok := code[name]; !ok {
			remove = append(remove, fmt.Sprintf("  %s (LOGS.md:%d)", name, line))
		}
	}
	slices.Sort(add)
	slices.Sort(remove)
	if len(add) > 0 {
		t.Errorf("events the code logs that docs/LOGS.md does not list; add them to their area's table:\n%s", strings.Join(add, "\n"))
	}
	if len(remove) > 0 {
		t.Errorf("events docs/LOGS.md lists that the code no longer logs; remove them:\n%s", strings.Join(remove, "\n"))
	}
	if len(code) < 50 {
		t.Errorf("found only %d events in the code; the extractor has stopped seeing them", len(code))
	}
}

// TestLogEventNames fails when an event name is not of the form
// area.event, in the code or in LOGS.md.
func TestLogEventNames(t *testing.T) {
	sites, _, _ := codeEvents(t, "..")
	var bad []string
	logged := map[string]bool{}
	for _, s := range sites {
		logged[s.name] = true
		if !eventName.MatchString(s.name) {
			bad = append(bad, fmt.Sprintf("  %q at %s", s.name, s.pos))
		}
	}
	docs, _ := docEvents(t, "LOGS.md")
	for name, line := range docs {
		if !eventName.MatchString(name) {
			bad = append(bad, fmt.Sprintf("  %q at docs/LOGS.md:%d", name, line))
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Errorf("event names must match %s (area.event: lower case, digits, and _ after the dot); rename:\n%s", eventName, strings.Join(bad, "\n"))
	}
}

// docEvents reads the event tables of a LOGS.md: every table whose header's
// first cell is "event". It returns each event's line, and a line for each
// row that is not one `event`, each event listed twice, and each listed
// under another area's "## area" heading.
func docEvents(t *testing.T, path string) (events map[string]int, problems []string) {
	t.Helper()
	events = map[string]int{}
	for _, r := range eventRows(t, path) {
		name, ok := strings.CutPrefix(r.first, "`")
		if ok {
			name, ok = strings.CutSuffix(name, "`")
		}
		if !ok || name == "" {
			problems = append(problems, fmt.Sprintf("docs/LOGS.md:%d: the first cell of an event row must be one `area.event`, got %q", r.line, r.first))
			continue
		}
		if a, _, ok := strings.Cut(name, "."); ok && eventName.MatchString(name) && a != r.area {
			problems = append(problems, fmt.Sprintf("docs/LOGS.md:%d: %s is listed under \"## %s\"; move it to the table under \"## %s\"", r.line, name, r.area, a))
		}
		if prev, dup := events[name]; dup {
			problems = append(problems, fmt.Sprintf("docs/LOGS.md:%d: %s is already listed at line %d; list each event once", r.line, name, prev))
			continue
		}
		events[name] = r.line
	}
	if len(events) == 0 {
		t.Fatalf("%s has no event table (a table whose first column is headed \"event\")", path)
	}
	return events, problems
}

// docRow is one row of an event table of LOGS.md.
type docRow struct {
	line  int
	area  string   // the "## area" heading it is under
	first string   // its first cell, trimmed: "`area.event`"
	cells []string // all its cells, trimmed
	head  []string // the cells of its table's header, trimmed
}

// cell is the row's cell under the header named name, and whether the
// table has that column and the row that cell.
func (r docRow) cell(name string) (string, bool) {
	i := slices.IndexFunc(r.head, func(h string) bool { return strings.EqualFold(h, name) })
	if i < 0 || len(r.cells) != len(r.head) {
		return "", false
	}
	return r.cells[i], true
}

// eventRows reads the rows of the event tables of a LOGS.md: every table
// whose header's first cell is "event", less its separator row.
func eventRows(t *testing.T, path string) []docRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []docRow
	var head []string // the current event table's header; nil outside one
	area := ""        // the current "## area" heading
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if h, ok := strings.CutPrefix(line, "## "); ok {
			area = strings.TrimSpace(h)
		}
		if !strings.HasPrefix(line, "|") {
			head = nil
			continue
		}
		cells := tableCells(line)
		switch {
		case strings.EqualFold(cells[0], "event"):
			head = cells
			continue
		case head == nil || strings.Trim(cells[0], "-: ") == "":
			continue
		}
		rows = append(rows, docRow{line: n, area: area, first: cells[0], cells: cells, head: head})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// tableCells splits a Markdown table row into its cells, trimmed.
func tableCells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	cells := strings.Split(line, "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(c)
	}
	return cells
}

// pkg is one directory's Go files, parsed.
type pkg struct {
	fset   *token.FileSet
	root   string
	files  []*ast.File
	funcs  map[string][]*ast.FuncDecl // functions and methods by name
	consts map[string]ast.Expr        // package-level constants
}

// codeEvents parses the non-test Go files of the module at root and
// returns every event logged, a line for each logging call whose message
// cannot be named without running the code, and a line for each logging
// call (or logger made with With) whose keys cannot be read without
// running it.
func codeEvents(t *testing.T, root string) (sites []site, unnamed, unkeyed []string) {
	t.Helper()
	fset := token.NewFileSet()
	dirs := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if p != root && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dirs[filepath.Dir(p)] = append(dirs[filepath.Dir(p)], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, paths := range dirs {
		pk := &pkg{fset: fset, root: root, funcs: map[string][]*ast.FuncDecl{}, consts: map[string]ast.Expr{}}
		for _, p := range paths {
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			pk.files = append(pk.files, f)
		}
		pk.index()
		s, u, k := pk.events()
		sites = append(sites, s...)
		unnamed = append(unnamed, u...)
		unkeyed = append(unkeyed, k...)
	}
	slices.SortFunc(sites, func(a, b site) int { return strings.Compare(a.pos, b.pos) })
	slices.Sort(unnamed)
	slices.Sort(unkeyed)
	return sites, unnamed, unkeyed
}

func (pk *pkg) index() {
	for _, f := range pk.files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				pk.funcs[d.Name.Name] = append(pk.funcs[d.Name.Name], d)
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							pk.consts[n.Name] = vs.Values[i]
						}
					}
				}
			}
		}
	}
}

func (pk *pkg) pos(p token.Pos) string {
	position := pk.fset.Position(p)
	rel, err := filepath.Rel(pk.root, position.Filename)
	if err != nil {
		rel = position.Filename
	}
	return fmt.Sprintf("%s:%d", filepath.ToSlash(rel), position.Line)
}

// events finds the logging calls of the package and names their events
// and keys.
func (pk *pkg) events() (sites []site, unnamed, unkeyed []string) {
	kr := &keyReader{pk: pk, reading: map[readKey]bool{}}
	// named adds the sites of call's events, with its keys.
	named := func(call *ast.CallExpr, i int, fn *ast.FuncDecl, names ...string) {
		keys, err := kr.callKeys(call, i, &keyScope{fn: fn})
		if err != nil {
			unkeyed = append(unkeyed, fmt.Sprintf("%s: %s logs %s with keys that cannot be read without running the code: %v; log literal \"key\", value pairs or slog attributes, or a slice built in that function from []any{...} and append",
				pk.pos(call.Pos()), exprString(call.Fun), strings.Join(names, ", "), err))
		}
		for _, name := range names {
			sites = append(sites, site{name: name, pos: pk.pos(call.Pos()), keys: keys, keysOK: err == nil})
		}
	}
	for _, f := range pk.files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				i, ok := msgArg[sel.Sel.Name]
				if !ok || len(call.Args) <= i {
					return true
				}
				msg := call.Args[i]
				if !strings.Contains(strings.ToLower(exprString(sel.X)), "log") {
					// Not a logger by its name (t.Error, a metric's Log):
					// an event only when its literal message looks like one.
					if s, ok := stringLit(msg); ok && looksLikeEvent.MatchString(s) {
						named(call, i, fn, s)
					}
					return true
				}
				names, ok := pk.resolve(msg, fn, 0)
				if !ok {
					unnamed = append(unnamed, fmt.Sprintf("%s: %s.%s logs a message that is not a string constant (or a variable, parameter or result set only from constants); log a literal area.event",
						pk.pos(call.Pos()), exprString(sel.X), sel.Sel.Name))
					return true
				}
				if len(names) > 0 {
					named(call, i, fn, names...)
				}
				return true
			})
		}
	}
	unkeyed = append(unkeyed, kr.lostWiths()...)
	return sites, unnamed, unkeyed
}

// resolve names the string values e can take in fn: a literal, a constant,
// a variable assigned only such values, a parameter every caller in the
// package passes such a value, or a result of a function of the package
// that returns only such values. The empty string (no event) is dropped.
func (pk *pkg) resolve(e ast.Expr, fn *ast.FuncDecl, depth int) ([]string, bool) {
	if depth > 8 {
		return nil, false
	}
	switch e := e.(type) {
	case *ast.ParenExpr:
		return pk.resolve(e.X, fn, depth+1)
	case *ast.BasicLit:
		s, ok := stringLit(e)
		if !ok {
			return nil, false
		}
		if s == "" {
			return nil, true
		}
		return []string{s}, true
	case *ast.Ident:
		return pk.resolveIdent(e, fn, depth)
	}
	return nil, false
}

func (pk *pkg) resolveIdent(id *ast.Ident, fn *ast.FuncDecl, depth int) ([]string, bool) {
	// Declared in fn: a local constant or variable, a parameter, a result.
	if fn != nil {
		var values []ast.Expr // what the name is given in fn
		var calls []callResult
		declared := false
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if name.Name != id.Name {
						continue
					}
					declared = true
					switch {
					case len(n.Values) == len(n.Names):
						values = append(values, n.Values[i])
					case len(n.Values) == 1:
						if c, ok := n.Values[0].(*ast.CallExpr); ok {
							calls = append(calls, callResult{c, i})
						} else {
							values = append(values, nil)
						}
					}
				}
			case *ast.AssignStmt:
				for i, l := range n.Lhs {
					if l, ok := l.(*ast.Ident); !ok || l.Name != id.Name {
						continue
					}
					declared = true
					switch {
					case n.Tok != token.ASSIGN && n.Tok != token.DEFINE:
						values = append(values, nil) // +=: computed
					case len(n.Rhs) == len(n.Lhs):
						values = append(values, n.Rhs[i])
					case len(n.Rhs) == 1:
						if c, ok := n.Rhs[0].(*ast.CallExpr); ok {
							calls = append(calls, callResult{c, i})
						} else {
							values = append(values, nil) // v, ok := m[k]
						}
					}
				}
			}
			return true
		})
		if k := paramIndex(fn, id.Name); k >= 0 {
			return pk.resolveParam(fn, k, depth)
		}
		if declared || resultIndex(fn, id.Name) >= 0 {
			var names []string
			for _, v := range values {
				if v == nil {
					return nil, false
				}
				n, ok := pk.resolve(v, fn, depth+1)
				if !ok {
					return nil, false
				}
				names = append(names, n...)
			}
			for _, c := range calls {
				n, ok := pk.resolveResult(c, depth)
				if !ok {
					return nil, false
				}
				names = append(names, n...)
			}
			return names, true
		}
	}
	if v, ok := pk.consts[id.Name]; ok {
		return pk.resolve(v, nil, depth+1)
	}
	return nil, false
}

// callResult is result i of a call.
type callResult struct {
	call *ast.CallExpr
	i    int
}

// resolveResult names what result r.i of the package's function r.call
// calls can be, from its return statements.
func (pk *pkg) resolveResult(r callResult, depth int) ([]string, bool) {
	decls := pk.funcs[funcName(r.call.Fun)]
	if len(decls) == 0 {
		return nil, false
	}
	var names []string
	for _, fn := range decls {
		if fn.Body == nil {
			return nil, false
		}
		ok := true
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				return false // its returns are its own
			case *ast.ReturnStmt:
				if len(n.Results) == 0 {
					ok = false // a bare return of a named result: not followed
					return false
				}
				if r.i >= len(n.Results) {
					ok = false
					return false
				}
				got, rok := pk.resolve(n.Results[r.i], fn, depth+1)
				if !rok {
					ok = false
				}
				names = append(names, got...)
			}
			return ok
		})
		if !ok {
			return nil, false
		}
	}
	return names, true
}

// resolveParam names what every call of fn in the package passes as its
// parameter k.
func (pk *pkg) resolveParam(fn *ast.FuncDecl, k int, depth int) ([]string, bool) {
	var names []string
	found, ok := false, true
	for _, f := range pk.files {
		for _, d := range f.Decls {
			caller, isFn := d.(*ast.FuncDecl)
			if !isFn || caller.Body == nil {
				continue
			}
			ast.Inspect(caller.Body, func(n ast.Node) bool {
				c, isCall := n.(*ast.CallExpr)
				if !isCall || funcName(c.Fun) != fn.Name.Name {
					return true
				}
				if c.Ellipsis.IsValid() || k >= len(c.Args) {
					ok = false
					return true
				}
				found = true
				got, rok := pk.resolve(c.Args[k], caller, depth+1)
				if !rok {
					ok = false
				}
				names = append(names, got...)
				return true
			})
		}
	}
	return names, found && ok
}

// paramIndex is the index of fn's parameter named name, or -1.
func paramIndex(fn *ast.FuncDecl, name string) int {
	return fieldIndex(fn.Type.Params, name)
}

// resultIndex is the index of fn's named result name, or -1.
func resultIndex(fn *ast.FuncDecl, name string) int {
	return fieldIndex(fn.Type.Results, name)
}

func fieldIndex(fl *ast.FieldList, name string) int {
	if fl == nil {
		return -1
	}
	i := 0
	for _, f := range fl.List {
		if len(f.Names) == 0 {
			i++
			continue
		}
		for _, n := range f.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// funcName is the name a call calls: f in f(...) and x.f(...).
func funcName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// exprString renders a receiver such as a.cfg.Log or l.log().
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.CallExpr:
		return exprString(e.Fun) + "()"
	case *ast.ParenExpr:
		return exprString(e.X)
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.IndexExpr:
		return exprString(e.X) + "[]"
	}
	return "?"
}

// source renders e as the code spells it, shortened for a message.
func (pk *pkg) source(n ast.Node) string {
	var b strings.Builder
	if err := printer.Fprint(&b, pk.fset, n); err != nil {
		return "?"
	}
	s := strings.Join(strings.Fields(b.String()), " ")
	if len(s) > 70 {
		s = s[:67] + "..."
	}
	return s
}

// TestCodeEventsFindsEveryForm runs the extractor on a small module that
// logs in each way the code does, and in ways it must refuse.
func TestCodeEventsFindsEveryForm(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("a/a.go", `package a

import (
	"context"
	"log/slog"
	"testing"
)

const eventB = "area.from_const"

type W struct{ log *slog.Logger }

func (w *W) line(log *slog.Logger, msg string) { log.Info(msg, "k", 1) }

func pick(x int) (event, why string) {
	if x > 0 {
		return eventB, "positive"
	}
	if x < 0 {
		return "area.from_result", "negative"
	}
	return "", ""
}

func f(ctx context.Context, log *slog.Logger, w *W, lvl slog.Level, t *testing.T, x int) {
	log.Info("area.literal")
	w.log.WarnContext(ctx, "area.context")
	log.Log(ctx, lvl, "area.with_level")
	const local = "area.local_const"
	log.Debug(local)
	w.line(log, "area.through_param")
	if ev, _ := pick(x); ev != "" {
		log.Error(ev)
	}
	t.Error("not a log line")
	log.Info("Area.BadName")
	log.Info("area: not an event")
	log.Info("area." + "computed")
}
`)
	write("a/a_test.go", "package a\n\nimport \"log/slog\"\n\nfunc g(log *slog.Logger) { log.Info(\"area.in_a_test\") }\n")
	write("a/testdata/x.go", "package x\n\nimport \"log/slog\"\n\nfunc g(log *slog.Logger) { log.Info(\"area.in_testdata\") }\n")
	write("sub/go.mod", "module example.com/sub\n")
	write("sub/s.go", "package sub\n\nimport \"log/slog\"\n\nfunc g(log *slog.Logger) { log.Info(\"area.other_module\") }\n")

	sites, unnamed, _ := codeEvents(t, root)
	var got []string
	for _, s := range sites {
		if !slices.Contains(got, s.name) {
			got = append(got, s.name)
		}
	}
	slices.Sort(got)
	want := []string{"Area.BadName", "area.context", "area.from_const", "area.from_result", "area.literal",
		"area.local_const", "area.through_param", "area.with_level", "area: not an event"}
	if !slices.Equal(got, want) {
		t.Errorf("events found:\n %q\nwant\n %q", got, want)
	}
	if len(unnamed) != 1 || !strings.Contains(unnamed[0], "a/a.go:") {
		t.Errorf("want the one computed message reported, got %q", unnamed)
	}
}
