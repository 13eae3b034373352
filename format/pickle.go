package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// A pickle is a sequence of opcodes, each one byte followed by its argument,
// ending with STOP. pickleStream walks them without executing anything: it
// only needs to know, per opcode, how long the argument is. Payloads
// (bytes, strings, big ints) are skipped by counting; newline-terminated
// arguments are scanned for their newline without being kept.

// Argument shapes of the opcodes of pickle protocols 0 to 5.
const (
	argBad    = iota // not an opcode: the stream is garbled
	argNone          // no argument
	argFixed         // n bytes (FRAME's length is one: its contents are opcodes)
	argProto         // PROTO's one byte, the protocol (0..5)
	argLen           // an n-byte little-endian unsigned length, then that many bytes
	argLenI32        // a 4-byte signed length (BINSTRING, LONG4); negative is garbled
	argLine          // n newline-terminated lines, each at most maxLine bytes
	argText          // one newline-terminated line of any length (STRING, UNICODE)
	argStop          // STOP
)

// maxLine bounds the argument lines of protocol 0's numbers, names and memo
// keys, which are short in any pickle: a longer line is garbled. STRING and
// UNICODE lines carry data (protocol 0 writes a numpy array's bytes as one
// UNICODE line) and are unbounded; no line is ever held in memory.
const maxLine = 1 << 20

// highestProtocol is the newest pickle protocol (Python 3.8+).
const highestProtocol = 5

type opcode struct {
	arg  uint8
	n    uint8 // argument bytes, length bytes, or lines
	name string
}

var opcodes = [256]opcode{
	// Protocol 0 and 1.
	'(': {argNone, 0, "MARK"},
	'.': {argStop, 0, "STOP"},
	'0': {argNone, 0, "POP"},
	'1': {argNone, 0, "POP_MARK"},
	'2': {argNone, 0, "DUP"},
	'F': {argLine, 1, "FLOAT"},
	'I': {argLine, 1, "INT"},
	'J': {argFixed, 4, "BININT"},
	'K': {argFixed, 1, "BININT1"},
	'L': {argLine, 1, "LONG"},
	'M': {argFixed, 2, "BININT2"},
	'N': {argNone, 0, "NONE"},
	'P': {argLine, 1, "PERSID"},
	'Q': {argNone, 0, "BINPERSID"},
	'R': {argNone, 0, "REDUCE"},
	'S': {argText, 1, "STRING"},
	'T': {argLenI32, 4, "BINSTRING"},
	'U': {argLen, 1, "SHORT_BINSTRING"},
	'V': {argText, 1, "UNICODE"},
	'X': {argLen, 4, "BINUNICODE"},
	'a': {argNone, 0, "APPEND"},
	'b': {argNone, 0, "BUILD"},
	'c': {argLine, 2, "GLOBAL"},
	'd': {argNone, 0, "DICT"},
	'}': {argNone, 0, "EMPTY_DICT"},
	'e': {argNone, 0, "APPENDS"},
	'g': {argLine, 1, "GET"},
	'h': {argFixed, 1, "BINGET"},
	'i': {argLine, 2, "INST"},
	'j': {argFixed, 4, "LONG_BINGET"},
	'l': {argNone, 0, "LIST"},
	']': {argNone, 0, "EMPTY_LIST"},
	'o': {argNone, 0, "OBJ"},
	'p': {argLine, 1, "PUT"},
	'q': {argFixed, 1, "BINPUT"},
	'r': {argFixed, 4, "LONG_BINPUT"},
	's': {argNone, 0, "SETITEM"},
	't': {argNone, 0, "TUPLE"},
	')': {argNone, 0, "EMPTY_TUPLE"},
	'u': {argNone, 0, "SETITEMS"},
	'G': {argFixed, 8, "BINFLOAT"},
	// Protocol 2.
	0x80: {argProto, 1, "PROTO"},
	0x81: {argNone, 0, "NEWOBJ"},
	0x82: {argFixed, 1, "EXT1"},
	0x83: {argFixed, 2, "EXT2"},
	0x84: {argFixed, 4, "EXT4"},
	0x85: {argNone, 0, "TUPLE1"},
	0x86: {argNone, 0, "TUPLE2"},
	0x87: {argNone, 0, "TUPLE3"},
	0x88: {argNone, 0, "NEWTRUE"},
	0x89: {argNone, 0, "NEWFALSE"},
	0x8a: {argLen, 1, "LONG1"},
	0x8b: {argLenI32, 4, "LONG4"},
	// Protocol 3.
	'B': {argLen, 4, "BINBYTES"},
	'C': {argLen, 1, "SHORT_BINBYTES"},
	// Protocol 4.
	0x8c: {argLen, 1, "SHORT_BINUNICODE"},
	0x8d: {argLen, 8, "BINUNICODE8"},
	0x8e: {argLen, 8, "BINBYTES8"},
	0x8f: {argNone, 0, "EMPTY_SET"},
	0x90: {argNone, 0, "ADDITEMS"},
	0x91: {argNone, 0, "FROZENSET"},
	0x92: {argNone, 0, "NEWOBJ_EX"},
	0x93: {argNone, 0, "STACK_GLOBAL"},
	0x94: {argNone, 0, "MEMOIZE"},
	0x95: {argFixed, 8, "FRAME"},
	// Protocol 5.
	0x96: {argLen, 8, "BYTEARRAY8"},
	0x97: {argNone, 0, "NEXT_BUFFER"},
	0x98: {argNone, 0, "READONLY_BUFFER"},
}

// pickleStream is the Stream of pickle files. Between Writes it remembers
// one of: a payload still to skip, a line still to find the end of, or the
// first bytes of an opcode whose argument header was split (at most 9
// bytes). Its size is fixed; Write never allocates.
type pickleStream struct {
	off int64 // bytes written before the current Write

	skip   uint64 // payload bytes still to skip
	skipOp byte   // the opcode whose payload is being skipped

	lines   int   // argument lines still to end (0 when not in a line)
	lineOp  byte  // the opcode whose line is being scanned
	lineLen int64 // bytes of the current line so far
	lineAt  int64 // offset of lineOp

	head     [9]byte // a split opcode and the start of its argument header
	headN    int     // bytes in head (0 when none is split)
	headNeed int     // bytes the opcode and its header take

	pickles int   // whole pickles seen (STOP opcodes)
	stopEnd int64 // offset just after the last STOP

	garbled error // the first garbled opcode or argument, if any
	closed  bool
	verdict error
}

// Write walks p. It never fails; the verdict comes from Close.
func (s *pickleStream) Write(p []byte) (int, error) {
	if s.closed || s.garbled != nil {
		return len(p), nil
	}
	i := 0
	for i < len(p) && s.garbled == nil {
		switch {
		case s.skip > 0:
			if rest := uint64(len(p) - i); s.skip >= rest {
				s.skip -= rest
				i = len(p)
			} else {
				i += int(s.skip)
				s.skip = 0
			}
		case s.lines > 0:
			i = s.scanLines(p, i)
		case s.headN > 0:
			i = s.fillHead(p, i)
		default:
			i = s.walk(p, i)
		}
	}
	s.off += int64(len(p))
	return len(p), nil
}

// walk steps over whole opcodes from p[i:]. It returns where it stopped:
// at the end of p, or where a payload or a line continues past it (for the
// state machine in Write to carry on).
func (s *pickleStream) walk(p []byte, i int) int {
	for i < len(p) {
		op := p[i]
		c := &opcodes[op]
		switch c.arg {
		case argNone:
			i++
		case argFixed:
			if len(p)-i <= int(c.n) {
				return s.hold(p, i, c)
			}
			i += 1 + int(c.n)
		case argLen, argLenI32:
			if len(p)-i <= int(c.n) {
				return s.hold(p, i, c)
			}
			n, ok := s.length(op, c, p[i+1:], s.off+int64(i))
			if !ok {
				return len(p)
			}
			i += 1 + int(c.n)
			if rest := uint64(len(p) - i); n > rest {
				s.skip, s.skipOp = n-rest, op
				return len(p)
			}
			i += int(n)
		case argLine, argText:
			s.lines, s.lineOp, s.lineLen, s.lineAt = int(c.n), op, 0, s.off+int64(i)
			return s.scanLines(p, i+1)
		case argProto:
			if len(p)-i <= 1 {
				return s.hold(p, i, c)
			}
			if !s.proto(p[i+1], s.off+int64(i)) {
				return len(p)
			}
			i += 2
		case argStop:
			// Another pickle may follow: pickle.dump called again on
			// the same file.
			i++
			s.pickles++
			s.stopEnd = s.off + int64(i)
		default:
			s.garbled = torn("pickle", "unknown opcode 0x%02x at byte %d%s", op, s.off+int64(i), s.which())
			return len(p)
		}
	}
	return i
}

// hold keeps the opcode at p[i] and the part of its argument header that
// p holds, to finish in the next Write.
func (s *pickleStream) hold(p []byte, i int, c *opcode) int {
	s.headN = copy(s.head[:], p[i:])
	s.headNeed = 1 + int(c.n)
	return len(p)
}

// fillHead completes a held opcode header from p[i:] and acts on it.
func (s *pickleStream) fillHead(p []byte, i int) int {
	m := copy(s.head[s.headN:s.headNeed], p[i:])
	s.headN += m
	i += m
	if s.headN < s.headNeed {
		return i
	}
	s.headN = 0
	op := s.head[0]
	c := &opcodes[op]
	at := s.off + int64(i) - int64(s.headNeed)
	switch c.arg {
	case argProto:
		s.proto(s.head[1], at)
	case argLen, argLenI32:
		if n, ok := s.length(op, c, s.head[1:s.headNeed], at); ok {
			s.skip, s.skipOp = n, op
		}
	}
	return i
}

// length decodes a payload length from b and reports whether it is valid.
func (s *pickleStream) length(op byte, c *opcode, b []byte, at int64) (uint64, bool) {
	var n uint64
	switch c.n {
	case 1:
		n = uint64(b[0])
	case 4:
		v := binary.LittleEndian.Uint32(b)
		if c.arg == argLenI32 && int32(v) < 0 {
			s.garbled = torn("pickle", "%s at byte %d has a negative length %d", c.name, at, int32(v))
			return 0, false
		}
		n = uint64(v)
	case 8:
		n = binary.LittleEndian.Uint64(b)
		if n > math.MaxInt64 {
			s.garbled = torn("pickle", "%s at byte %d has a length of %d bytes", c.name, at, n)
			return 0, false
		}
	}
	return n, true
}

func (s *pickleStream) proto(v byte, at int64) bool {
	if v > highestProtocol {
		s.garbled = torn("pickle", "PROTO at byte %d names protocol %d (the newest is %d)", at, v, highestProtocol)
		return false
	}
	return true
}

// scanLines finds the ends of the current opcode's argument lines in p[i:].
func (s *pickleStream) scanLines(p []byte, i int) int {
	for s.lines > 0 {
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			s.lineLen += int64(len(p) - i)
			s.checkLine()
			return len(p)
		}
		s.lineLen += int64(j)
		if !s.checkLine() {
			return len(p)
		}
		i += j + 1
		s.lines--
		s.lineLen = 0
	}
	return i
}

func (s *pickleStream) checkLine() bool {
	if s.lineLen > maxLine && opcodes[s.lineOp].arg == argLine {
		s.garbled = torn("pickle", "the argument line of %s at byte %d is over %d bytes long",
			opcodes[s.lineOp].name, s.lineAt, maxLine)
		return false
	}
	return true
}

// Close says whether the bytes written are one or more whole pickles: they
// end exactly after a STOP opcode.
// Skippable is the payload still to skip, or every byte once the verdict
// is known (Skipper).
func (s *pickleStream) Skippable() int64 {
	if s.closed || s.garbled != nil {
		return math.MaxInt64
	}
	return int64(min(s.skip, math.MaxInt64))
}

// Skip is Write of n bytes that Skippable allows, without them.
func (s *pickleStream) Skip(n int64) {
	if !s.closed && s.garbled == nil {
		s.skip -= uint64(n)
	}
	s.off += n
}

func (s *pickleStream) Close() error {
	if s.closed {
		return s.verdict
	}
	s.closed = true
	s.verdict = s.judge()
	return s.verdict
}

func (s *pickleStream) judge() error {
	switch {
	case s.garbled != nil:
		return s.garbled
	case s.pickles > 0 && s.stopEnd == s.off:
		return nil
	case s.skip > 0:
		return torn("pickle", "cut at byte %d inside %s (needs %d more bytes)%s", s.off, opcodes[s.skipOp].name, s.skip, s.which())
	case s.lines > 0:
		return torn("pickle", "cut at byte %d inside the argument line of %s%s", s.off, opcodes[s.lineOp].name, s.which())
	case s.headN > 0:
		return torn("pickle", "cut at byte %d inside the argument of %s (needs %d more bytes)%s",
			s.off, opcodes[s.head[0]].name, s.headNeed-s.headN, s.which())
	case s.off == 0:
		return torn("pickle", "empty file")
	}
	return torn("pickle", "cut at byte %d before STOP%s", s.off, s.which())
}

// which says, for an error, how many whole pickles came before.
func (s *pickleStream) which() string {
	switch s.pickles {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(" (after a whole pickle that ends at byte %d)", s.stopEnd)
	}
	return fmt.Sprintf(" (after %d whole pickles, the last ending at byte %d)", s.pickles, s.stopEnd)
}
