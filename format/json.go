package format

// jsonStream is the Stream of JSON files. It accepts what Python's json
// module writes and reads: one or more values separated by white space (a
// JSON Lines file is several), NaN, Infinity and -Infinity as numbers, and
// a UTF-8 byte-order mark before the first value. A file is whole when it
// ends after a complete value (white space may follow). It keeps one byte
// per open array or object and never holds a string.
type jsonStream struct {
	off    int64
	state  jsonState
	stack  []byte // '{' or '[' per open container
	lit    string // the rest of the literal being matched
	num    numState
	hex    int  // hex digits still due in a \u escape
	values int  // complete top-level values
	bom    int  // byte-order-mark bytes matched at the start
	keyed  bool // in an object, the string being read is a key
	bad    error
	closed bool
	result error
}

type jsonState uint8

const (
	jsValue      jsonState = iota // a value is due (or, at the top, white space)
	jsValueOrEnd                  // after '[': a value or ']'
	jsKeyOrEnd                    // after '{': a key or '}'
	jsKey                         // after ',' in an object: a key
	jsColon                       // after a key: ':'
	jsAfter                       // after a value inside a container: ',' or its end
	jsString                      // inside a string
	jsEscape                      // after a backslash in a string
	jsHex                         // inside \uXXXX
	jsNumber                      // inside a number
	jsLiteral                     // inside true, false, null, NaN, Infinity
	jsTop                         // after a complete top-level value
)

// numState is where a number is in -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
type numState uint8

const (
	nMinus   numState = iota // after '-': a digit (or Infinity)
	nZero                    // after a leading 0: '.', 'e' or the end
	nInt                     // in the integer digits
	nDot                     // after '.': a digit
	nFrac                    // in the fraction
	nExp                     // after 'e': a sign or a digit
	nExpSign                 // after the exponent's sign: a digit
	nExpDig                  // in the exponent
)

// maxJSONDepth bounds the nesting kept in memory; Python's json cannot
// write a deeper value (it recurses once per level).
const maxJSONDepth = 1 << 16

func (s *jsonStream) Write(p []byte) (int, error) {
	if s.closed || s.bad != nil {
		return len(p), nil
	}
	i := 0
	// A byte-order mark, only at the very start (possibly split).
	for s.off < 3 && int64(s.bom) == s.off+int64(i) && i < len(p) && s.bom < 3 {
		if p[i] != utf8BOM[s.bom] {
			if s.bom > 0 {
				s.fail(s.off+int64(i), "a byte-order mark cut short")
			}
			s.bom = 3 // no mark, or a broken one: stop looking
			break
		}
		s.bom++
		i++
	}
	for ; i < len(p) && s.bad == nil; i++ {
		c := p[i]
		at := s.off + int64(i)
		switch s.state {
		case jsString:
			// Skip plain string bytes quickly.
			j := i
			for j < len(p) && p[j] != '"' && p[j] != '\\' && p[j] >= 0x20 {
				j++
			}
			if j == len(p) {
				i = j
				continue
			}
			i = j
			switch c = p[i]; {
			case c == '"':
				s.endString()
			case c == '\\':
				s.state = jsEscape
			default:
				s.fail(s.off+int64(i), "a control character (0x%02x) inside a string", c)
			}
		case jsEscape:
			switch c {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.state = jsString
			case 'u':
				s.state, s.hex = jsHex, 4
			default:
				s.fail(at, "an unknown escape \\%c", c)
			}
		case jsHex:
			if !isHex(c) {
				s.fail(at, "%q in a \\u escape", c)
				break
			}
			if s.hex--; s.hex == 0 {
				s.state = jsString
			}
		case jsNumber:
			if !s.numByte(c, at) {
				s.afterValue()
				i-- // the byte ends the number; look at it again
			}
		case jsLiteral:
			if c != s.lit[0] {
				s.fail(at, "%q where %q was expected", c, s.lit[0])
				break
			}
			if s.lit = s.lit[1:]; s.lit == "" {
				s.afterValue()
			}
		default:
			s.structural(c, at)
		}
	}
	s.off += int64(len(p))
	return len(p), nil
}

// structural handles a byte outside strings, numbers and literals.
func (s *jsonStream) structural(c byte, at int64) {
	if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
		return
	}
	switch s.state {
	case jsKeyOrEnd, jsKey:
		switch {
		case c == '"':
			s.state, s.keyed = jsString, true
		case c == '}' && s.state == jsKeyOrEnd:
			s.pop()
		default:
			s.fail(at, "%q where an object key was expected", c)
		}
	case jsColon:
		if c != ':' {
			s.fail(at, "%q where ':' was expected", c)
			return
		}
		s.state = jsValue
	case jsAfter:
		top := s.stack[len(s.stack)-1]
		switch {
		case c == ',' && top == '{':
			s.state = jsKey
		case c == ',':
			s.state = jsValue
		case c == '}' && top == '{', c == ']' && top == '[':
			s.pop()
		default:
			s.fail(at, "%q after a value", c)
		}
	case jsValue, jsValueOrEnd, jsTop:
		if c == ']' && s.state == jsValueOrEnd {
			s.pop()
			return
		}
		s.value(c, at)
	}
}

// value starts a value at c.
func (s *jsonStream) value(c byte, at int64) {
	switch c {
	case '{', '[':
		if len(s.stack) >= maxJSONDepth {
			s.fail(at, "nesting deeper than %d levels", maxJSONDepth)
			return
		}
		s.stack = append(s.stack, c)
		s.state = jsValueOrEnd
		if c == '{' {
			s.state = jsKeyOrEnd
		}
	case '"':
		s.state, s.keyed = jsString, false
	case '-':
		s.state, s.num = jsNumber, nMinus
	case '0':
		s.state, s.num = jsNumber, nZero
	case 't':
		s.state, s.lit = jsLiteral, "rue"
	case 'f':
		s.state, s.lit = jsLiteral, "alse"
	case 'n':
		s.state, s.lit = jsLiteral, "ull"
	case 'N':
		s.state, s.lit = jsLiteral, "aN"
	case 'I':
		s.state, s.lit = jsLiteral, "nfinity"
	default:
		if c >= '1' && c <= '9' {
			s.state, s.num = jsNumber, nInt
			return
		}
		s.fail(at, "%q where a value was expected", c)
	}
}

// numByte takes c as the next byte of a number, and reports false when c
// cannot continue it (a number that can end there is then complete).
func (s *jsonStream) numByte(c byte, at int64) bool {
	digit := c >= '0' && c <= '9'
	switch s.num {
	case nMinus:
		switch {
		case c == '0':
			s.num = nZero
		case digit:
			s.num = nInt
		case c == 'I':
			s.state, s.lit = jsLiteral, "nfinity"
		default:
			s.fail(at, "%q after '-'", c)
		}
		return true
	case nZero, nInt:
		switch {
		case digit && s.num == nInt:
		case c == '.':
			s.num = nDot
		case c == 'e' || c == 'E':
			s.num = nExp
		default:
			return false
		}
	case nDot:
		if !digit {
			s.fail(at, "%q after a decimal point", c)
		}
		s.num = nFrac
	case nFrac:
		switch {
		case digit:
		case c == 'e' || c == 'E':
			s.num = nExp
		default:
			return false
		}
	case nExp:
		switch {
		case digit:
			s.num = nExpDig
		case c == '+' || c == '-':
			s.num = nExpSign
		default:
			s.fail(at, "%q in an exponent", c)
		}
	case nExpSign:
		if !digit {
			s.fail(at, "%q in an exponent", c)
		}
		s.num = nExpDig
	case nExpDig:
		if !digit {
			return false
		}
	}
	return true
}

// numberComplete reports whether the number read so far can end here.
func (s *jsonStream) numberComplete() bool {
	return s.num == nZero || s.num == nInt || s.num == nFrac || s.num == nExpDig
}

func (s *jsonStream) endString() {
	if s.keyed {
		s.state, s.keyed = jsColon, false
		return
	}
	s.afterValue()
}

// afterValue is called when a value ends.
func (s *jsonStream) afterValue() {
	if s.state == jsNumber && !s.numberComplete() {
		s.fail(s.off, "a number cut short")
		return
	}
	if len(s.stack) == 0 {
		s.state = jsTop
		s.values++
		return
	}
	s.state = jsAfter
}

func (s *jsonStream) pop() {
	s.stack = s.stack[:len(s.stack)-1]
	s.afterValue()
}

func (s *jsonStream) fail(at int64, what string, args ...any) {
	if s.bad == nil {
		s.bad = torn("json", "at byte %d: "+what, append([]any{at}, args...)...)
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// Close says whether the bytes written are whole: one or more complete
// values and nothing else.
func (s *jsonStream) Close() error {
	if s.closed {
		return s.result
	}
	s.closed = true
	if s.bad == nil && s.state == jsNumber && s.numberComplete() && len(s.stack) == 0 {
		s.afterValue()
	}
	switch {
	case s.bad != nil:
		s.result = s.bad
	case s.state == jsTop && len(s.stack) == 0:
		s.result = nil
	case s.values == 0 && len(s.stack) == 0 && s.state == jsValue:
		s.result = torn("json", "no value in %d bytes", s.off)
	default:
		s.result = torn("json", "cut at byte %d (%d levels open)", s.off, len(s.stack))
	}
	return s.result
}
