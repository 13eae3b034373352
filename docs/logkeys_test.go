package docs

import (
	"fmt"
	"go/ast"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLogKeysDocumented fails when an event is logged with a key its row
// in LOGS.md does not list, or its row lists a key none of its logging
// calls logs: the keys of an event are the union over all the calls that
// log it, and those of the logger's With.
func TestLogKeysDocumented(t *testing.T) {
	sites, _, unkeyed := codeEvents(t, "..")
	for _, u := range unkeyed {
		t.Errorf("%s", u)
	}
	docs, problems := docKeys(t, "LOGS.md")
	for _, p := range problems {
		t.Errorf("%s", p)
	}

	add, remove := keyMismatches(sites, docs)
	if len(add) > 0 {
		t.Errorf("keys the code logs that the event's row in docs/LOGS.md does not list; add them to its keys column (with a note in parentheses when only some lines have them), or stop logging them:\n%s", strings.Join(add, "\n"))
	}
	if len(remove) > 0 {
		t.Errorf("keys the event's row in docs/LOGS.md lists that no call logging the event logs; remove them from its keys column, or log them:\n%s", strings.Join(remove, "\n"))
	}
	pairs := map[string]bool{}
	for _, s := range sites {
		for _, k := range s.keys {
			pairs[s.name+" "+k] = true
		}
	}
	if len(pairs) < 200 {
		t.Errorf("found only %d keys of events in the code; the key extractor has stopped seeing them", len(pairs))
	}
}

// keyMismatches compares the keys each event is logged with (the union
// over its sites) with those its row lists, and returns a line for each
// key only the code has and one for each key only the row has. Events
// without a row are left to TestLogEventsDocumented; an event with a site
// whose keys were not all read gets no line for a key only the row has,
// since that site may log it.
func keyMismatches(sites []site, docs map[string]docKeyRow) (add, remove []string) {
	code := map[string]map[string][]string{} // event, key: where it is logged
	at := map[string][]string{}              // event: where it is logged
	complete := map[string]bool{}            // event: every site's keys were read
	for _, s := range sites {
		if code[s.name] == nil {
			code[s.name], complete[s.name] = map[string][]string{}, true
		}
		complete[s.name] = complete[s.name] && s.keysOK
		at[s.name] = appendOnce(at[s.name], s.pos)
		for _, k := range s.keys {
			code[s.name][k] = appendOnce(code[s.name][k], s.pos)
		}
	}
	for name, keys := range code {
		row, ok := docs[name]
		if !ok {
			continue
		}
		for k, pos := range keys {
			if !slices.Contains(row.keys, k) {
				add = append(add, fmt.Sprintf("  %s: `%s` (logged at %s; docs/LOGS.md:%d)", name, k, strings.Join(pos, ", "), row.line))
			}
		}
		if !complete[name] {
			continue
		}
		for _, k := range row.keys {
			if _, ok := keys[k]; !ok {
				remove = append(remove, fmt.Sprintf("  %s: `%s` (docs/LOGS.md:%d; logged at %s)", name, k, row.line, strings.Join(at[name], ", ")))
			}
		}
	}
	slices.Sort(add)
	slices.Sort(remove)
	return add, remove
}

func appendOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// docKeyRow is the keys LOGS.md lists for an event.
type docKeyRow struct {
	line int
	keys []string
}

// keyNote is a note in parentheses in a keys cell: "(when a process
// died)", "(`term` or `kill`)". What it has in backticks are values, not
// keys.
var keyNote = regexp.MustCompile(`\([^()]*\)`)

// backticked is text in backticks.
var backticked = regexp.MustCompile("`([^`]*)`")

// keyName is the form of a key in a keys cell.
var keyName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// docKeys reads the keys column of the event tables of a LOGS.md: every
// key in backticks outside a note in parentheses. It returns each event's
// keys, and a line for each table without a keys column and each text in
// backticks that is not a key.
func docKeys(t *testing.T, path string) (events map[string]docKeyRow, problems []string) {
	t.Helper()
	events = map[string]docKeyRow{}
	for _, r := range eventRows(t, path) {
		name := strings.Trim(r.first, "`")
		if _, dup := events[name]; dup {
			continue // docEvents reports it
		}
		cell, ok := r.cell("keys")
		if !ok {
			problems = append(problems, fmt.Sprintf("docs/LOGS.md:%d: the row of %s has no cell under a \"keys\" header; give its table the columns | event | level | when | keys | alert |", r.line, name))
			continue
		}
		row := docKeyRow{line: r.line}
		for _, m := range backticked.FindAllStringSubmatch(keyNote.ReplaceAllString(cell, ""), -1) {
			if !keyName.MatchString(m[1]) {
				problems = append(problems, fmt.Sprintf("docs/LOGS.md:%d: the keys of %s list `%s`, which is not a key; put values and notes in parentheses after the key", r.line, name, m[1]))
				continue
			}
			row.keys = appendOnce(row.keys, m[1])
		}
		events[name] = row
	}
	return events, problems
}

// keyScope is a function whose code is read for keys. When it is a helper
// that builds a logging call's arguments (withDeadline(args, t, rest...)),
// call is the call of it being followed and caller where that call's
// arguments are read; in the logging call's own function call is nil, and
// a parameter is read from every call of the function in the package.
type keyScope struct {
	fn     *ast.FuncDecl
	call   *ast.CallExpr
	caller *keyScope
}

// readKey is a slice variable (or logger) being read: an assignment such
// as args = append(args, "k", v) reads args again, and must not loop.
type readKey struct {
	owner ast.Node // the function body the variable belongs to, or a With call
	name  string
	sc    *keyScope
}

// keyReader reads the attribute keys of the logging calls of one package.
type keyReader struct {
	pk      *pkg
	reading map[readKey]bool
	depth   int
	withs   *withIndex // built on first use
}

// withCall is a logger made with With, and the function it is made in.
type withCall struct {
	call *ast.CallExpr
	fn   *ast.FuncDecl
}

// withIndex is where the package stores the loggers it makes with With:
// a field (w.log = cfg.Log.With("source", name)) or a local variable. A
// logging call through such a field or variable logs the With's keys too.
// Fields are known by name only: every x.log of the package counts.
type withIndex struct {
	fields map[string][]withCall
	locals map[*ast.FuncDecl]map[string][]withCall
	lost   []string // With loggers whose lines cannot be found
}

// callKeys names the attribute keys of the logging call whose message is
// its argument i: the arguments after the message, and the keys the
// logger was made With.
func (kr *keyReader) callKeys(call *ast.CallExpr, i int, sc *keyScope) ([]string, error) {
	keys, err := kr.argsKeys(call.Args[i+1:], call.Ellipsis.IsValid(), sc)
	if err != nil {
		return nil, err
	}
	with, err := kr.loggerKeys(call.Fun.(*ast.SelectorExpr).X, sc)
	if err != nil {
		return nil, err
	}
	return sortedSet(append(keys, with...)), nil
}

// argsKeys names the keys of the variadic arguments of a call: pairs and
// attributes, or one slice spread with "...".
func (kr *keyReader) argsKeys(args []ast.Expr, spread bool, sc *keyScope) ([]string, error) {
	if !spread {
		return kr.pairKeys(args, sc)
	}
	if len(args) != 1 {
		return nil, fmt.Errorf("a spread slice after other arguments")
	}
	return kr.sliceKeys(args[0], sc)
}

// pairKeys names the keys of args in slog's alternating form: a string
// key and its value, or a slog.Attr made in place.
func (kr *keyReader) pairKeys(args []ast.Expr, sc *keyScope) ([]string, error) {
	var keys []string
	for j := 0; j < len(args); {
		k, isAttr := attrKey(args[j])
		if !isAttr {
			k = args[j]
		}
		names, ok := kr.pk.resolve(k, sc.fn, 0)
		if !ok || len(names) == 0 {
			return nil, fmt.Errorf("%s is neither a string constant key nor a slog attribute made in place", kr.pk.source(args[j]))
		}
		keys = append(keys, names...)
		if isAttr {
			j++
			continue
		}
		if j+1 == len(args) {
			return nil, fmt.Errorf("key %s has no value", kr.pk.source(args[j]))
		}
		j += 2
	}
	return keys, nil
}

// attrFuncs are slog's functions that make an Attr from a key.
var attrFuncs = map[string]bool{
	"String": true, "Int": true, "Int64": true, "Uint64": true, "Float64": true,
	"Bool": true, "Time": true, "Duration": true, "Any": true, "Group": true,
}

// attrKey is the key of a slog.Attr made in place: the first argument of
// slog.String("k", v) and the other constructors, or slog.Attr{Key: "k"}.
func attrKey(e ast.Expr) (ast.Expr, bool) {
	switch e := e.(type) {
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		if ok && exprString(sel.X) == "slog" && attrFuncs[sel.Sel.Name] && len(e.Args) > 0 {
			return e.Args[0], true
		}
	case *ast.CompositeLit:
		if exprString(e.Type) != "slog.Attr" || len(e.Elts) == 0 {
			return nil, false
		}
		for _, el := range e.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok && exprString(kv.Key) == "Key" {
				return kv.Value, true
			}
		}
		if _, ok := e.Elts[0].(*ast.KeyValueExpr); !ok {
			return e.Elts[0], true
		}
	}
	return nil, false
}

// sliceKeys names the keys of a slice of arguments spread into a call:
// []any{...}, an append to a slice, a variable of the function built from
// those, or what a function of the package returns.
func (kr *keyReader) sliceKeys(e ast.Expr, sc *keyScope) ([]string, error) {
	if kr.depth > 16 {
		return nil, fmt.Errorf("%s is built too many calls away", kr.pk.source(e))
	}
	kr.depth++
	defer func() { kr.depth-- }()
	switch e := e.(type) {
	case *ast.ParenExpr:
		return kr.sliceKeys(e.X, sc)
	case *ast.CompositeLit:
		return kr.pairKeys(e.Elts, sc)
	case *ast.Ident:
		if e.Name == "nil" {
			return nil, nil
		}
		return kr.identKeys(e, sc)
	case *ast.CallExpr:
		if id, ok := e.Fun.(*ast.Ident); ok && id.Name == "append" && len(e.Args) > 0 {
			keys, err := kr.sliceKeys(e.Args[0], sc)
			if err != nil {
				return nil, err
			}
			more, err := kr.argsKeys(e.Args[1:], e.Ellipsis.IsValid(), sc)
			return append(keys, more...), err
		}
		if decls := kr.pk.funcs[funcName(e.Fun)]; len(decls) > 0 {
			return kr.resultKeys(e, decls, sc)
		}
	}
	return nil, fmt.Errorf("%s is not a []any{...}, an append, a variable or parameter of the function, or a call of a function of the package", kr.pk.source(e))
}

// identKeys names the keys of the slice variable id: what each assignment
// in its function gives it, whatever branch the assignment is in, and for
// a parameter what the calls of the function pass.
func (kr *keyReader) identKeys(id *ast.Ident, sc *keyScope) ([]string, error) {
	var owner ast.Node = sc.fn.Body
	lit := paramLit(sc.fn, id)
	if lit != nil {
		owner = lit.Body
	}
	key := readKey{owner, id.Name, sc}
	if kr.reading[key] {
		return nil, nil // read already, from its other assignments
	}
	kr.reading[key] = true
	defer delete(kr.reading, key)
	var keys []string
	declared := false
	var err error
	switch k := paramIndex(sc.fn, id.Name); {
	case lit != nil:
		declared = true
		keys, err = kr.litParamKeys(lit, fieldIndex(lit.Type.Params, id.Name), sc)
	case k >= 0:
		declared = true
		keys, err = kr.paramKeys(k, sc)
	}
	if err != nil {
		return nil, err
	}
	add := func(v ast.Expr) {
		if err == nil {
			var more []string
			more, err = kr.sliceKeys(v, sc)
			keys = append(keys, more...)
		}
	}
	ast.Inspect(owner, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, name := range n.Names {
				if name.Name != id.Name {
					continue
				}
				declared = true
				switch len(n.Values) {
				case 0: // var args []any: nil
				case len(n.Names):
					add(n.Values[i])
				default:
					err = fmt.Errorf("%s is one of several results of a call", id.Name)
				}
			}
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				if l, ok := l.(*ast.Ident); !ok || l.Name != id.Name {
					continue
				}
				declared = true
				if (n.Tok != token.ASSIGN && n.Tok != token.DEFINE) || len(n.Rhs) != len(n.Lhs) {
					err = fmt.Errorf("%s is set by %s", id.Name, kr.pk.source(n))
					continue
				}
				add(n.Rhs[i])
			}
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	if !declared {
		return nil, fmt.Errorf("%s is not a variable or parameter of %s", id.Name, sc.fn.Name.Name)
	}
	return keys, nil
}

// paramLit is the innermost function literal in fn around id that has a
// parameter named like id, or nil.
func paramLit(fn *ast.FuncDecl, id *ast.Ident) *ast.FuncLit {
	var found *ast.FuncLit
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if n == nil || id.Pos() < n.Pos() || id.Pos() >= n.End() {
			return false // id is not inside n
		}
		if lit, ok := n.(*ast.FuncLit); ok && fieldIndex(lit.Type.Params, id.Name) >= 0 {
			found = lit
		}
		return true
	})
	return found
}

// paramKeys names the keys of parameter k of sc's function: from the call
// being followed, or from every call of the function in the package.
func (kr *keyReader) paramKeys(k int, sc *keyScope) ([]string, error) {
	if sc.call != nil {
		return kr.argKeys(sc.fn.Type, k, sc.call, sc.caller)
	}
	var keys []string
	found := false
	for _, f := range kr.pk.files {
		for _, d := range f.Decls {
			caller, ok := d.(*ast.FuncDecl)
			if !ok || caller.Body == nil {
				continue
			}
			var err error
			ast.Inspect(caller.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok || err != nil || funcName(c.Fun) != sc.fn.Name.Name {
					return err == nil
				}
				found = true
				var more []string
				more, err = kr.argKeys(sc.fn.Type, k, c, &keyScope{fn: caller})
				keys = append(keys, more...)
				return true
			})
			if err != nil {
				return nil, err
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("%s is a parameter of %s, which the package does not call", fieldName(sc.fn.Type.Params, k), sc.fn.Name.Name)
	}
	return keys, nil
}

// litParamKeys names the keys of parameter k of the function literal lit
// in sc's function: from the calls of the variable it is assigned to there
// (warn := func(why string, args ...any) {...}; warn("...", "k", v)).
func (kr *keyReader) litParamKeys(lit *ast.FuncLit, k int, sc *keyScope) ([]string, error) {
	name := ""
	ast.Inspect(sc.fn.Body, func(n ast.Node) bool {
		if a, ok := n.(*ast.AssignStmt); ok && len(a.Lhs) == len(a.Rhs) {
			for i, r := range a.Rhs {
				if id, ok := a.Lhs[i].(*ast.Ident); ok && r == lit {
					name = id.Name
				}
			}
		}
		return name == ""
	})
	if name == "" {
		return nil, fmt.Errorf("%s is a parameter of a function literal that is not assigned to a variable", fieldName(lit.Type.Params, k))
	}
	var keys []string
	var err error
	found := false
	ast.Inspect(sc.fn.Body, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok || err != nil {
			return err == nil
		}
		if id, ok := c.Fun.(*ast.Ident); ok && id.Name == name {
			found = true
			var more []string
			more, err = kr.argKeys(lit.Type, k, c, sc)
			keys = append(keys, more...)
		}
		return true
	})
	if err == nil && !found {
		err = fmt.Errorf("%s is a parameter of %s, which is never called", fieldName(lit.Type.Params, k), name)
	}
	return keys, err
}

// argKeys names the keys of what call passes as parameter k of a function
// of type ft: its argument k, or for a final ...any parameter the
// arguments from k on (or the slice spread there).
func (kr *keyReader) argKeys(ft *ast.FuncType, k int, call *ast.CallExpr, caller *keyScope) ([]string, error) {
	if k == ft.Params.NumFields()-1 && isEllipsis(ft.Params.List[len(ft.Params.List)-1].Type) {
		if k > len(call.Args) {
			return nil, fmt.Errorf("%s has too few arguments", kr.pk.source(call))
		}
		return kr.argsKeys(call.Args[k:], call.Ellipsis.IsValid(), caller)
	}
	if k >= len(call.Args) || call.Ellipsis.IsValid() && k == len(call.Args)-1 {
		return nil, fmt.Errorf("%s passes parameter %d in a spread", kr.pk.source(call), k)
	}
	return kr.sliceKeys(call.Args[k], caller)
}

func isEllipsis(e ast.Expr) bool {
	_, ok := e.(*ast.Ellipsis)
	return ok
}

// fieldName is the name of parameter k in fl, for messages.
func fieldName(fl *ast.FieldList, k int) string {
	i := 0
	for _, f := range fl.List {
		for _, n := range f.Names {
			if i == k {
				return n.Name
			}
			i++
		}
		if len(f.Names) == 0 {
			i++
		}
	}
	return fmt.Sprintf("parameter %d", k)
}

// resultKeys names the keys of the slice a call of a function of the
// package returns, reading each of its return statements with its
// parameters bound to the call's arguments.
func (kr *keyReader) resultKeys(call *ast.CallExpr, decls []*ast.FuncDecl, sc *keyScope) ([]string, error) {
	var keys []string
	for _, fn := range decls {
		if fn.Body == nil || fn.Type.Results.NumFields() != 1 {
			return nil, fmt.Errorf("%s does not return one slice", fn.Name.Name)
		}
		callee := &keyScope{fn: fn, call: call, caller: sc}
		var err error
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				return false // its returns are its own
			case *ast.ReturnStmt:
				if len(n.Results) != 1 {
					err = fmt.Errorf("%s has a bare return", fn.Name.Name)
					return false
				}
				var more []string
				more, err = kr.sliceKeys(n.Results[0], callee)
				keys = append(keys, more...)
			}
			return err == nil
		})
		if err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// loggerKeys names the keys the logger e adds to every line it logs: those
// of the With calls that made it, in place or stored in the field or
// variable e reads.
func (kr *keyReader) loggerKeys(e ast.Expr, sc *keyScope) ([]string, error) {
	var made []withCall
	switch e := e.(type) {
	case *ast.ParenExpr:
		return kr.loggerKeys(e.X, sc)
	case *ast.CallExpr:
		if isWith(e) {
			made = []withCall{{e, sc.fn}}
		}
	case *ast.Ident:
		made = kr.withIndex().locals[sc.fn][e.Name]
	case *ast.SelectorExpr:
		made = kr.withIndex().fields[e.Sel.Name]
	}
	var keys []string
	for _, w := range made {
		key := readKey{w.call, "With", nil}
		if kr.reading[key] {
			continue // c.log = c.log.With(...): read already
		}
		kr.reading[key] = true
		wsc := sc
		if w.fn != sc.fn {
			wsc = &keyScope{fn: w.fn}
		}
		more, err := kr.argsKeys(w.call.Args, w.call.Ellipsis.IsValid(), wsc)
		if err == nil {
			var from []string
			from, err = kr.loggerKeys(w.call.Fun.(*ast.SelectorExpr).X, wsc)
			more = append(more, from...)
		}
		delete(kr.reading, key)
		if err != nil {
			return nil, fmt.Errorf("the logger's With at %s: %v", kr.pk.pos(w.call.Pos()), err)
		}
		keys = append(keys, more...)
	}
	return keys, nil
}

// isWith reports whether call is x.With(...) on what is named like a
// logger.
func isWith(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "With" && strings.Contains(strings.ToLower(exprString(sel.X)), "log")
}

// withIndex finds the package's loggers made with With: those stored in a
// field or a local variable, which the logging calls through them read,
// and those that go anywhere else (passed on, returned, stored where a
// logging call through it is not seen as one): lost.
func (kr *keyReader) withIndex() *withIndex {
	if kr.withs != nil {
		return kr.withs
	}
	wi := &withIndex{fields: map[string][]withCall{}, locals: map[*ast.FuncDecl]map[string][]withCall{}}
	kr.withs = wi
	for _, f := range kr.pk.files {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
				kr.indexWiths(fn)
			}
		}
	}
	for _, f := range kr.pk.files {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
				kr.findPassedOn(fn)
			}
		}
	}
	return wi
}

// indexWiths records fn's With loggers by where they are stored; one that
// is not stored, and is not the receiver of a call, is lost.
func (kr *keyReader) indexWiths(fn *ast.FuncDecl) {
	wi := kr.withs
	stored := map[*ast.CallExpr]bool{}
	store := func(to ast.Expr, v ast.Expr) {
		c, ok := v.(*ast.CallExpr)
		if !ok || !isWith(c) {
			return
		}
		switch to := to.(type) {
		case *ast.Ident:
			if wi.locals[fn] == nil {
				wi.locals[fn] = map[string][]withCall{}
			}
			wi.locals[fn][to.Name] = append(wi.locals[fn][to.Name], withCall{c, fn})
			stored[c] = true
		case *ast.SelectorExpr:
			wi.fields[to.Sel.Name] = append(wi.fields[to.Sel.Name], withCall{c, fn})
			stored[c] = true
		}
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if len(n.Lhs) == len(n.Rhs) {
				for i := range n.Lhs {
					store(n.Lhs[i], n.Rhs[i])
				}
			}
		case *ast.ValueSpec:
			if len(n.Names) == len(n.Values) {
				for i := range n.Names {
					store(n.Names[i], n.Values[i])
				}
			}
		case *ast.KeyValueExpr:
			store(n.Key, n.Value) // &watcher{log: cfg.Log.With(...)}
		case *ast.SelectorExpr:
			if c, ok := n.X.(*ast.CallExpr); ok && isWith(c) {
				stored[c] = true // log.With("k", v).Info(...): read in place
			}
		}
		return true
	})
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && isWith(c) && !stored[c] {
			wi.lost = append(wi.lost, fmt.Sprintf("%s: %s makes a logger whose lines cannot be found, so its keys cannot be given to their events; store it in a field or variable of the package that it logs through",
				kr.pk.pos(c.Pos()), kr.pk.source(c)))
		}
		return true
	})
}

// findPassedOn reports each use in fn of a With logger's field or variable
// other than a call on it or an assignment to it: the logger is passed on
// (to another package, a function) where its lines are not found.
func (kr *keyReader) findPassedOn(fn *ast.FuncDecl) {
	wi := kr.withs
	used := map[ast.Expr]bool{} // receivers, names being assigned, selected names
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			used[n.X], used[n.Sel] = true, true
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				used[l] = true
			}
		case *ast.ValueSpec:
			for _, name := range n.Names {
				used[name] = true
			}
		case *ast.KeyValueExpr:
			used[n.Key] = true
		}
		return true
	})
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		var made []withCall
		switch n := n.(type) {
		case *ast.SelectorExpr:
			made = wi.fields[n.Sel.Name]
		case *ast.Ident:
			made = wi.locals[fn][n.Name]
		}
		if len(made) == 0 || used[n.(ast.Expr)] {
			return true
		}
		wi.lost = append(wi.lost, fmt.Sprintf("%s: %s, a logger made with With at %s, is passed on here, where the events it logs cannot be found; log through it in the package, or put its keys on each logging call",
			kr.pk.pos(n.Pos()), kr.pk.source(n.(ast.Expr)), kr.pk.pos(made[0].call.Pos())))
		return true
	})
}

// lostWiths is a line for each logger made with With whose events cannot
// be found.
func (kr *keyReader) lostWiths() []string {
	return kr.withIndex().lost
}

// sortedSet is keys sorted, each once.
func sortedSet(keys []string) []string {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// TestCodeKeysFindsEveryForm runs the key extractor on testdata/logkeys,
// which logs in each form the code does and in forms that must be
// refused, and compares what it finds with that fixture's LOGS.md.
func TestCodeKeysFindsEveryForm(t *testing.T) {
	sites, _, unkeyed := codeEvents(t, filepath.Join("testdata", "logkeys"))
	got := map[string][]string{} // event: keys, for the sites read whole
	var refused []string
	for _, s := range sites {
		if !s.keysOK {
			refused = appendOnce(refused, s.name)
			continue
		}
		got[s.name] = sortedSet(append(got[s.name], s.keys...))
	}
	want := map[string][]string{
		"keys.literal":       {"a", "b"},
		"keys.const":         {"c"},
		"keys.attrs":         {"any", "g", "i", "p", "s"},
		"keys.log_attrs":     {"attr_lit", "b"},
		"keys.spread":        {"a", "b", "c", "first"},
		"keys.inline_append": {"a", "b", "c", "effect", "first"},
		"keys.var_nil":       {"late"},
		"keys.helper":        {"deadline", "h1", "h3"},
		"keys.closure":       {"e1", "e2", "e3", "why"},
		"keys.param":         {"component", "p1", "p2"},
		"keys.with_field":    {"component", "k"},
		"keys.with_local":    {"local"},
		"keys.with_inline":   {"inline", "k"},
		"keys.by_var":        {"v"},
		"keys.context":       {"ctx_key", "local_key"},
		"keys.passed_on":     {"passed"},
	}
	for name, keys := range want {
		if !slices.Equal(got[name], keys) {
			t.Errorf("%s: keys %q, want %q", name, got[name], keys)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: keys %q found, want the event refused or not found", name, got[name])
		}
	}
	slices.Sort(refused)
	wantRefused := []string{"keys.bad_attr_var", "keys.bad_computed", "keys.bad_field", "keys.bad_foreign", "keys.bad_no_value"}
	if !slices.Equal(refused, wantRefused) {
		t.Errorf("events refused:\n %q\nwant\n %q", refused, wantRefused)
	}
	// A line for each refused site, and for each With logger whose lines
	// cannot all be found: one not stored, one stored and passed on.
	lines := strings.Join(unkeyed, "\n")
	if len(unkeyed) != len(wantRefused)+2 || !strings.Contains(lines, `log.With("lost", 1) makes a logger`) || !strings.Contains(lines, "lg, a logger made with With") {
		t.Errorf("want a line for each refused site and each lost With, got:\n%s", lines)
	}

	docs, problems := docKeys(t, filepath.Join("testdata", "logkeys", "LOGS.md"))
	wantProblems := []string{"keys.no_column", "`exited with code 1`"}
	if len(problems) != len(wantProblems) {
		t.Errorf("LOGS.md problems %q, want one naming each of %q", problems, wantProblems)
	}
	for _, w := range wantProblems {
		if !strings.Contains(strings.Join(problems, "\n"), w) {
			t.Errorf("no LOGS.md problem names %s, got %q", w, problems)
		}
	}
	if k := docs["keys.kill_failed"].keys; !slices.Equal(k, []string{"pgid", "pid", "err"}) {
		t.Errorf("keys.kill_failed lists %q, want pgid, pid, err", k)
	}
	add, remove := keyMismatches(sites, docs)
	if len(add) != 1 || !strings.HasPrefix(add[0], "  keys.spread: `c` (logged at keys.go:") {
		t.Errorf("keys only the code has: %q, want keys.spread's c alone", add)
	}
	if len(remove) != 1 || !strings.HasPrefix(remove[0], "  keys.const: `gone` (docs/LOGS.md:8;") {
		t.Errorf("keys only LOGS.md has: %q, want keys.const's gone alone", remove)
	}
}
