package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// pickleVM interprets a pickle held in memory without executing it: it
// builds the strings, small integers, globals, tuples and lists the checks
// need to read (a legacy torch save's persistent ids and storage keys) and
// stands an opaque value for everything else. It never calls anything.
type pickleVM struct {
	stack  []*pval
	memo   map[uint64]*pval
	pids   []*pval // the arguments of BINPERSID, in order
	states []*pval // the dict states BUILD set, in order
	values int     // values made, bounded by maxPickleValues
}

type pkind uint8

const (
	pOther pkind = iota
	pMark
	pStr
	pInt
	pGlobal // s is "module name"
	pTuple
	pList
	pDict // items holds keys and values alternately
)

type pval struct {
	kind  pkind
	s     string
	i     int64
	items []*pval
}

// maxPickleValues bounds the values one interpretation makes.
const maxPickleValues = 1 << 21

var (
	// errPickleCut: the bytes end before the pickle's STOP.
	errPickleCut = errors.New("cut before STOP")
	// errPickleOdd: the opcodes are well formed but the interpreter
	// cannot follow them (its stack runs dry, a memo key is missing, or
	// there are too many values): not evidence of a torn file.
	errPickleOdd = errors.New("the pickle is beyond what the check interprets")
)

// run interprets the pickle at the start of b and returns the offset just
// after its STOP and the value STOP returns. Errors: errPickleCut, a
// *tornError for a garbled opcode, or one wrapping errPickleOdd.
func (vm *pickleVM) run(b []byte) (int, *pval, error) {
	vm.stack = vm.stack[:0]
	vm.memo = map[uint64]*pval{}
	i := 0
	for i < len(b) {
		op := b[i]
		c := &opcodes[op]
		at := i
		i++
		var arg []byte
		var lines []string
		switch c.arg {
		case argBad:
			return 0, nil, torn("pickle", "unknown opcode 0x%02x at byte %d", op, at)
		case argFixed, argProto:
			if len(b)-i < int(c.n) {
				return 0, nil, errPickleCut
			}
			arg = b[i : i+int(c.n)]
			i += int(c.n)
		case argLen, argLenI32:
			if len(b)-i < int(c.n) {
				return 0, nil, errPickleCut
			}
			var n uint64
			switch c.n {
			case 1:
				n = uint64(b[i])
			case 4:
				v := binary.LittleEndian.Uint32(b[i:])
				if c.arg == argLenI32 && int32(v) < 0 {
					return 0, nil, torn("pickle", "%s at byte %d has a negative length %d", c.name, at, int32(v))
				}
				n = uint64(v)
			case 8:
				n = binary.LittleEndian.Uint64(b[i:])
			}
			i += int(c.n)
			if n > uint64(len(b)-i) {
				return 0, nil, errPickleCut
			}
			arg = b[i : i+int(n)]
			i += int(n)
		case argLine, argText:
			for range int(c.n) {
				j := bytes.IndexByte(b[i:min(len(b), i+maxLine+1)], '\n')
				if j < 0 {
					if len(b)-i > maxLine && c.arg == argLine {
						return 0, nil, torn("pickle", "the argument line of %s at byte %d is over %d bytes long", c.name, at, maxLine)
					}
					return 0, nil, errPickleCut
				}
				lines = append(lines, string(b[i:i+j]))
				i += j + 1
			}
		}
		if c.arg == argStop {
			v, err := vm.pop()
			return i, v, err
		}
		if err := vm.step(op, arg, lines); err != nil {
			return 0, nil, fmt.Errorf("%s at byte %d: %w", c.name, at, err)
		}
	}
	return 0, nil, errPickleCut
}

func (vm *pickleVM) push(v *pval) error {
	if vm.values++; vm.values > maxPickleValues {
		return fmt.Errorf("over %d values: %w", maxPickleValues, errPickleOdd)
	}
	vm.stack = append(vm.stack, v)
	return nil
}

func (vm *pickleVM) pop() (*pval, error) {
	if len(vm.stack) == 0 {
		return nil, fmt.Errorf("the stack is empty: %w", errPickleOdd)
	}
	v := vm.stack[len(vm.stack)-1]
	vm.stack = vm.stack[:len(vm.stack)-1]
	return v, nil
}

// popMark pops the values above the topmost mark, and the mark.
func (vm *pickleVM) popMark() ([]*pval, error) {
	for k := len(vm.stack) - 1; k >= 0; k-- {
		if vm.stack[k].kind == pMark {
			items := append([]*pval(nil), vm.stack[k+1:]...)
			vm.stack = vm.stack[:k]
			return items, nil
		}
	}
	return nil, fmt.Errorf("no mark on the stack: %w", errPickleOdd)
}

func (vm *pickleVM) popN(n int) ([]*pval, error) {
	if len(vm.stack) < n {
		return nil, fmt.Errorf("the stack holds %d values, not %d: %w", len(vm.stack), n, errPickleOdd)
	}
	items := append([]*pval(nil), vm.stack[len(vm.stack)-n:]...)
	vm.stack = vm.stack[:len(vm.stack)-n]
	return items, nil
}

func (vm *pickleVM) top() (*pval, error) {
	if len(vm.stack) == 0 {
		return nil, fmt.Errorf("the stack is empty: %w", errPickleOdd)
	}
	return vm.stack[len(vm.stack)-1], nil
}

var other = &pval{kind: pOther}

func (vm *pickleVM) step(op byte, arg []byte, lines []string) error {
	switch op {
	case 0x80, 0x95, 0x98: // PROTO, FRAME, READONLY_BUFFER
		return nil
	case 'J':
		return vm.push(&pval{kind: pInt, i: int64(int32(binary.LittleEndian.Uint32(arg)))})
	case 'K':
		return vm.push(&pval{kind: pInt, i: int64(arg[0])})
	case 'M':
		return vm.push(&pval{kind: pInt, i: int64(binary.LittleEndian.Uint16(arg))})
	case 0x8a: // LONG1
		if len(arg) == 0 || len(arg) > 8 {
			return vm.push(other)
		}
		var u uint64
		for k := len(arg) - 1; k >= 0; k-- {
			u = u<<8 | uint64(arg[k])
		}
		shift := 64 - 8*uint(len(arg))
		return vm.push(&pval{kind: pInt, i: int64(u<<shift) >> shift})
	case 'I', 'L':
		n, err := strconv.ParseInt(strings.TrimSuffix(lines[0], "L"), 10, 64)
		if err != nil {
			return vm.push(other)
		}
		return vm.push(&pval{kind: pInt, i: n})
	case 0x8c, 'X', 0x8d, 'U', 'T':
		return vm.push(&pval{kind: pStr, s: string(arg)})
	case 'V':
		return vm.push(&pval{kind: pStr, s: lines[0]})
	case 'S':
		return vm.push(&pval{kind: pStr, s: strings.Trim(lines[0], `'"`)})
	case 'c':
		return vm.push(&pval{kind: pGlobal, s: lines[0] + " " + lines[1]})
	case 0x93: // STACK_GLOBAL
		mn, err := vm.popN(2)
		if err != nil {
			return err
		}
		return vm.push(&pval{kind: pGlobal, s: mn[0].s + " " + mn[1].s})
	case '(':
		return vm.push(&pval{kind: pMark})
	case ')':
		return vm.push(&pval{kind: pTuple})
	case ']':
		return vm.push(&pval{kind: pList})
	case '}':
		return vm.push(&pval{kind: pDict})
	case 't', 'l':
		items, err := vm.popMark()
		if err != nil {
			return err
		}
		kind := pTuple
		if op == 'l' {
			kind = pList
		}
		return vm.push(&pval{kind: kind, items: items})
	case 0x85, 0x86, 0x87: // TUPLE1..3
		items, err := vm.popN(int(op - 0x84))
		if err != nil {
			return err
		}
		return vm.push(&pval{kind: pTuple, items: items})
	case 'd': // DICT
		items, err := vm.popMark()
		if err != nil {
			return err
		}
		return vm.push(&pval{kind: pDict, items: items})
	case 0x91, 'i', 'o': // FROZENSET, INST, OBJ
		if _, err := vm.popMark(); err != nil {
			return err
		}
		return vm.push(other)
	case 'a': // APPEND
		v, err := vm.pop()
		if err != nil {
			return err
		}
		l, err := vm.top()
		if err == nil && l.kind == pList {
			l.items = append(l.items, v)
		}
		return err
	case 'e': // APPENDS
		items, err := vm.popMark()
		if err != nil {
			return err
		}
		l, err := vm.top()
		if err == nil && l.kind == pList {
			l.items = append(l.items, items...)
		}
		return err
	case 'u', 's': // SETITEMS, SETITEM
		var items []*pval
		var err error
		if op == 'u' {
			items, err = vm.popMark()
		} else {
			items, err = vm.popN(2)
		}
		if err != nil {
			return err
		}
		d, err := vm.top()
		if err == nil && d.kind == pDict {
			d.items = append(d.items, items...)
		}
		return err
	case 0x90, '1': // ADDITEMS, POP_MARK
		_, err := vm.popMark()
		return err
	case 'b': // BUILD
		state, err := vm.pop()
		if err != nil {
			return err
		}
		if state.kind == pDict {
			vm.states = append(vm.states, state)
		}
		_, err = vm.top()
		return err
	case '0': // POP
		_, err := vm.pop()
		return err
	case 'R', 0x81: // REDUCE, NEWOBJ
		if _, err := vm.popN(2); err != nil {
			return err
		}
		return vm.push(other)
	case 0x92: // NEWOBJ_EX
		if _, err := vm.popN(3); err != nil {
			return err
		}
		return vm.push(other)
	case '2': // DUP
		v, err := vm.top()
		if err != nil {
			return err
		}
		return vm.push(v)
	case 'p', 'q', 'r', 0x94: // PUT, BINPUT, LONG_BINPUT, MEMOIZE
		v, err := vm.top()
		if err != nil {
			return err
		}
		var k uint64
		switch op {
		case 'p':
			n, perr := strconv.ParseUint(lines[0], 10, 64)
			if perr != nil {
				return fmt.Errorf("memo key %q: %w", lines[0], errPickleOdd)
			}
			k = n
		case 'q':
			k = uint64(arg[0])
		case 'r':
			k = uint64(binary.LittleEndian.Uint32(arg))
		default:
			k = uint64(len(vm.memo))
		}
		vm.memo[k] = v
		return nil
	case 'g', 'h', 'j': // GET, BINGET, LONG_BINGET
		var k uint64
		switch op {
		case 'g':
			n, perr := strconv.ParseUint(lines[0], 10, 64)
			if perr != nil {
				return fmt.Errorf("memo key %q: %w", lines[0], errPickleOdd)
			}
			k = n
		case 'h':
			k = uint64(arg[0])
		default:
			k = uint64(binary.LittleEndian.Uint32(arg))
		}
		v, ok := vm.memo[k]
		if !ok {
			return fmt.Errorf("memo key %d was never stored: %w", k, errPickleOdd)
		}
		return vm.push(v)
	case 'Q': // BINPERSID
		v, err := vm.pop()
		if err != nil {
			return err
		}
		vm.pids = append(vm.pids, v)
		return vm.push(other)
	}
	// Everything else pushes one value the checks do not read: NONE,
	// NEWTRUE, NEWFALSE, floats, bytes, LONG4, EMPTY_SET,
	// PERSID, EXT1/2/4, NEXT_BUFFER.
	return vm.push(other)
}

// field returns the value of key in a dict, or nil.
func (v *pval) field(key string) *pval {
	if v == nil || v.kind != pDict {
		return nil
	}
	for i := 0; i+1 < len(v.items); i += 2 {
		if k := v.items[i]; k.kind == pStr && k.s == key {
			return v.items[i+1]
		}
	}
	return nil
}
