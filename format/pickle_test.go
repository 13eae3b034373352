package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pickleFixtures are the pickles testdata/gen.py wrote with CPython's
// pickle, protocols 0 to 5.
func pickleFixtures(t testing.TB) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob("testdata/*")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]byte)
	for _, name := range names {
		if ext := filepath.Ext(name); ext != ".pkl" && ext != ".pdparams" && ext != ".pdopt" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(name)] = b
	}
	if len(out) < 10 {
		t.Fatalf("found %d pickle fixtures in testdata; run testdata/gen.py", len(out))
	}
	return out
}

// streamCheck feeds b to a new pickle stream in pieces of the given sizes
// (repeated; the rest in one piece when sizes is empty) and returns Close's
// verdict.
func streamCheck(b []byte, sizes ...int) error {
	s := new(pickleStream)
	for k := 0; len(b) > 0; k++ {
		n := len(b)
		if len(sizes) > 0 {
			n = min(n, sizes[k%len(sizes)])
		}
		if w, err := s.Write(b[:n]); w != n || err != nil {
			return errors.New("Write returned short or failed")
		}
		b = b[n:]
	}
	return s.Close()
}

// randomSplit feeds b in random pieces, mostly short ones so that headers
// and lines are split, with some long ones.
func randomSplit(b []byte, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 7))
	s := new(pickleStream)
	for len(b) > 0 {
		n := 1 + r.IntN(12)
		if r.IntN(8) == 0 {
			n = 1 + r.IntN(4096)
		}
		n = min(n, len(b))
		s.Write(b[:n])
		b = b[n:]
	}
	return s.Close()
}

func TestPickleWholeFilesPass(t *testing.T) {
	for name, b := range pickleFixtures(t) {
		t.Run(name, func(t *testing.T) {
			if err := streamCheck(b); err != nil {
				t.Errorf("one Write: %v", err)
			}
			if err := streamCheck(b, 1); err != nil {
				t.Errorf("one byte a Write: %v", err)
			}
			for seed := range uint64(20) {
				if err := randomSplit(b, seed); err != nil {
					t.Fatalf("random split %d: %v", seed, err)
				}
			}
			if err := CheckFile(filepath.Join("testdata", name)); err != nil {
				t.Errorf("CheckFile: %v", err)
			}
		})
	}
}

// TestPickleEveryCutFails cuts every fixture at every byte: no prefix is a
// whole pickle, however the bytes are split across Writes.
func TestPickleEveryCutFails(t *testing.T) {
	for name, b := range pickleFixtures(t) {
		t.Run(name, func(t *testing.T) {
			insidePayloadAfterDot := 0
			for cut := range len(b) {
				err := streamCheck(b[:cut])
				if !errors.Is(err, ErrTorn) {
					t.Fatalf("cut at %d of %d: got %v, want ErrTorn", cut, len(b), err)
				}
				if cut > 0 && b[cut-1] == '.' && strings.Contains(err.Error(), "inside") {
					insidePayloadAfterDot++
				}
				if cut%31 == 0 {
					if err := randomSplit(b[:cut], uint64(cut)); !errors.Is(err, ErrTorn) {
						t.Fatalf("cut at %d, random split: got %v, want ErrTorn", cut, err)
					}
				}
			}
			// One byte a Write, judging a copy of the stream's state after
			// each: every cut, with the state carried across Writes.
			var s pickleStream
			for cut := range len(b) {
				judged := s
				if err := judged.Close(); !errors.Is(err, ErrTorn) {
					t.Fatalf("cut at %d, one byte a Write: got %v, want ErrTorn", cut, err)
				}
				s.Write(b[cut : cut+1])
			}
			if err := s.Close(); err != nil {
				t.Fatalf("whole, one byte a Write: %v", err)
			}
			t.Logf("%d cuts, %d of them right after a 0x2e byte inside an argument", len(b), insidePayloadAfterDot)
		})
	}
}

// TestPickleCutAfterDotInPayload is the case a tail check gets wrong: the
// file is cut right after a 0x2e byte ('.', STOP's value) inside a payload.
func TestPickleCutAfterDotInPayload(t *testing.T) {
	whole := []byte("\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00C\x03a.b\x8c\x02..\x86.")
	if err := streamCheck(whole); err != nil {
		t.Fatalf("whole: %v", err)
	}
	for _, tc := range []struct {
		name string
		cut  int
		want string
	}{
		{"SHORT_BINBYTES", bytes.Index(whole, []byte("a.")) + 2, "inside SHORT_BINBYTES (needs 1 more bytes)"},
		{"SHORT_BINUNICODE first", bytes.Index(whole, []byte("..")) + 1, "inside SHORT_BINUNICODE (needs 1 more bytes)"},
		{"SHORT_BINUNICODE last", bytes.Index(whole, []byte("..")) + 2, "cut at byte 20 before STOP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cut := whole[:tc.cut]
			if cut[len(cut)-1] != '.' {
				t.Fatalf("cut does not end in '.': %q", cut)
			}
			for _, sizes := range [][]int{nil, {1}, {3}} {
				err := streamCheck(cut, sizes...)
				if !errors.Is(err, ErrTorn) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("split %v: got %v, want ErrTorn saying %q", sizes, err, tc.want)
				}
			}
		})
	}
}

func le32(n uint32) string { return string(binary.LittleEndian.AppendUint32(nil, n)) }
func le64(n uint64) string { return string(binary.LittleEndian.AppendUint64(nil, n)) }

func TestPickleVerdicts(t *testing.T) {
	long := strings.Repeat("7", maxLine+1)
	for _, tc := range []struct {
		name string
		in   string
		want string // "" for a whole pickle
	}{
		{"none", "N.", ""},
		{"protocol 0 int", "I12\n.", ""},
		{"protocol 0 global", "cmod\nname\n.", ""},
		{"protocol 5 empty dict", "\x80\x05}\x94.", ""},
		{"long UNICODE line", "V" + strings.Repeat("a", 2*maxLine) + "\n.", ""},
		{"BINBYTES8 zero", "\x80\x04\x8e" + le64(0) + ".", ""},
		{"empty", "", "empty file"},
		{"two pickles", "N.N.", ""},
		{"three pickles", "\x80\x04N.\x80\x02K\x01.N.", ""},
		{"bytes after STOP", "N." + strings.Repeat("x", 12), "unknown opcode 0x78 at byte 2 (after a whole pickle that ends at byte 2)"},
		{"cut second pickle", "N.\x80\x04N", "cut at byte 5 before STOP (after a whole pickle that ends at byte 2)"},
		{"unknown opcode", "\x80\x04\xff.", "unknown opcode 0xff at byte 2"},
		{"NUL opcode", "\x00.", "unknown opcode 0x00 at byte 0"},
		{"protocol 6", "\x80\x06N.", "names protocol 6"},
		{"negative BINSTRING", "T" + le32(0xffffffff) + ".", "BINSTRING at byte 0 has a negative length -1"},
		{"negative LONG4", "\x80\x02\x8b" + le32(0x80000000) + ".", "LONG4 at byte 2 has a negative length"},
		{"huge BINBYTES8", "\x80\x04\x8e" + le64(1<<63) + ".", "has a length of 9223372036854775808 bytes"},
		{"INT line too long", "I" + long + "\n.", "argument line of INT at byte 0 is over"},
		{"cut in BINBYTES", "\x80\x03B" + le32(4096) + strings.Repeat(".", 100), "cut at byte 107 inside BINBYTES (needs 3996 more bytes)"},
		{"cut in BINBYTES8 length", "\x80\x04\x8e\x01\x02", "cut at byte 5 inside the argument of BINBYTES8 (needs 6 more bytes)"},
		{"cut in BININT", "J\x01\x02", "cut at byte 3 inside the argument of BININT (needs 2 more bytes)"},
		{"cut in PROTO", "\x80", "inside the argument of PROTO (needs 1 more bytes)"},
		{"cut in GLOBAL's second line", "cmod\nna", "cut at byte 7 inside the argument line of GLOBAL"},
		{"cut before STOP", "\x80\x04N", "cut at byte 3 before STOP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, sizes := range [][]int{nil, {1}, {2, 5}, {1 << 16}} {
				err := streamCheck([]byte(tc.in), sizes...)
				if tc.want == "" {
					if err != nil {
						t.Errorf("split %v: %v", sizes, err)
					}
					continue
				}
				if !errors.Is(err, ErrTorn) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("split %v: got %v, want ErrTorn saying %q", sizes, err, tc.want)
				}
				if err != nil && !strings.HasPrefix(err.Error(), "format: pickle: ") {
					t.Errorf("error %q does not start with \"format: pickle: \"", err)
				}
			}
		})
	}
}

func TestPickleCloseTwice(t *testing.T) {
	s := new(pickleStream)
	s.Write([]byte("N"))
	first := s.Close()
	if !errors.Is(first, ErrTorn) {
		t.Fatalf("got %v, want ErrTorn", first)
	}
	s.Write([]byte("."))
	if second := s.Close(); second != first {
		t.Errorf("second Close: got %v, want %v", second, first)
	}
}

// TestPickleGarbage: random bytes under a pickle name never pass, and
// walking them allocates nothing whatever length fields they hold.
func TestPickleGarbage(t *testing.T) {
	src := rand.NewChaCha8([32]byte{1})
	r := rand.New(src)
	buf := make([]byte, 1<<20)
	src.Read(buf)
	for i := range 300 {
		b := buf[:1+r.IntN(64<<10)]
		src.Read(b)
		if i%2 == 0 {
			b[0] = 0x80 // PROTO, so that the walk goes past the first byte
			b[1] = byte(r.IntN(6))
		}
		if err := randomSplit(b, uint64(i)); !errors.Is(err, ErrTorn) {
			t.Fatalf("garbage %d (%d bytes): got %v, want ErrTorn", i, len(b), err)
		}
	}
	// Lengths of 2^62 bytes and unending lines cost no memory.
	huge := []byte("\x80\x05\x96" + le64(1<<62) + strings.Repeat("\xee", 1000))
	line := []byte("V" + strings.Repeat("x", 1000))
	for _, b := range [][]byte{buf, huge, line} {
		s := new(pickleStream)
		allocs := testing.AllocsPerRun(10, func() {
			for k := 0; k < len(b); k += 333 {
				s.Write(b[k:min(k+333, len(b))])
			}
		})
		if allocs != 0 {
			t.Errorf("Write allocated %.0f times", allocs)
		}
		if err := s.Close(); !errors.Is(err, ErrTorn) {
			t.Errorf("got %v, want ErrTorn", err)
		}
	}
}

// TestPickleWriteDoesNotAllocate: a whole pickle, in any split, is walked
// without allocating.
func TestPickleWriteDoesNotAllocate(t *testing.T) {
	b := pickleFixtures(t)["mixed_p0.pkl"]
	allocs := testing.AllocsPerRun(20, func() {
		s := pickleStream{}
		for k := 0; k < len(b); k += 7 {
			s.Write(b[k:min(k+7, len(b))])
		}
		if s.Close() != nil {
			panic("fixture failed")
		}
	})
	if allocs != 0 {
		t.Errorf("walking a whole pickle allocated %.0f times", allocs)
	}
}

// FuzzPickleStream: the stream never panics; its verdict does not depend
// on how the bytes are split across Writes; and a strict prefix of bytes it
// passes passes only where a whole pickle ends, the rest being whole pickles
// too (several pickles back to back are whole; a truncated pickle is always
// torn).
func FuzzPickleStream(f *testing.F) {
	for _, b := range pickleFixtures(f) {
		if len(b) < 10000 {
			f.Add(b)
		}
	}
	f.Add([]byte("N."))
	f.Add([]byte("\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00C\x03a.b\x8c\x02..\x86."))
	f.Fuzz(func(t *testing.T, b []byte) {
		whole := streamCheck(b)
		if whole != nil && !errors.Is(whole, ErrTorn) {
			t.Fatalf("error does not wrap ErrTorn: %v", whole)
		}
		for _, err := range []error{streamCheck(b, 1), randomSplit(b, uint64(len(b)))} {
			if (err == nil) != (whole == nil) || (err != nil && err.Error() != whole.Error()) {
				t.Fatalf("split changed the verdict: %v, one Write: %v", err, whole)
			}
		}
		if whole != nil {
			return
		}
		step := max(1, len(b)/512)
		for cut := len(b) - 1; cut >= 0; cut -= step {
			err := streamCheck(b[:cut])
			if err == nil && cut > 0 && streamCheck(b[cut:]) == nil {
				continue // a boundary between whole pickles
			}
			if !errors.Is(err, ErrTorn) {
				t.Fatalf("%d of %d bytes passed, and the rest is not whole pickles: %v", cut, len(b), err)
			}
		}
	})
}

// writeSegments feeds a stream the segments of a pickle, each payload in
// 1 MiB Writes of the same zero buffer, as the upload's reading pass hands
// the stream its buffers.
func writeSegments(s Stream, segs [][]byte, payloads []int64, zeros []byte) {
	for k, seg := range segs {
		s.Write(seg)
		if k < len(payloads) {
			for n := payloads[k]; n > 0; {
				m := min(n, int64(len(zeros)))
				s.Write(zeros[:m])
				n -= m
			}
		}
	}
}

// smallObjects returns a pickle of n small dicts in a list, with the opcodes
// CPython's protocol 4 writes for them: frames of about 64 KiB, memoized
// keys, BININT, BINFLOAT and short strings, in batches of 1000 SETITEMS.
func smallObjects(n int) []byte {
	var out, frame []byte
	flush := func() {
		out = append(out, 0x95)
		out = binary.LittleEndian.AppendUint64(out, uint64(len(frame)))
		out = append(out, frame...)
		frame = frame[:0]
	}
	out = append(out, 0x80, 4)
	frame = append(frame, ']', 0x94, '(')
	for i := range n {
		frame = append(frame, '}', 0x94, '(')
		frame = append(frame, 0x8c, 4, 's', 't', 'e', 'p', 0x94, 'J')
		frame = binary.LittleEndian.AppendUint32(frame, uint32(i))
		frame = append(frame, 0x8c, 2, 'l', 'r', 0x94, 'G')
		frame = binary.LittleEndian.AppendUint64(frame, uint64(i)*0x9e3779b97f4a7c15)
		frame = append(frame, 0x8c, 4, 'n', 'a', 'm', 'e', 0x94, 0x8c, 8)
		frame = append(frame, "layer.00"...)
		frame = append(frame, 0x94, 'u')
		if i%1000 == 999 {
			frame = append(frame, 'e', '(')
		}
		if len(frame) >= 64<<10 {
			flush()
		}
	}
	frame = append(frame, 'e', '.')
	flush()
	return out
}

// protocol0 returns a text pickle: a list of n small ints, floats and
// strings, each memoized with PUT, as protocol 0 writes them.
func protocol0(n int) []byte {
	out := []byte("(lp0\n")
	for range n {
		out = append(out, "I123456\naF0.25\naVlayer.weight\np1\na"...)
	}
	return append(out, '.')
}

// BenchmarkPickleStream measures the walk of the shapes checkpoints have:
// a state_dict of few large tensors (payloads are skipped by counting, so
// 1 GiB costs a few thousand Writes), and pickles of many small objects.
func BenchmarkPickleStream(b *testing.B) {
	b.Run("large-payloads-1GiB", func(b *testing.B) {
		// {"w0": <256 MiB>, ..., "w3": <256 MiB>} at protocol 4.
		const payload = 256 << 20
		var segs [][]byte
		var payloads []int64
		seg := []byte("\x80\x04\x95\x08\x00\x00\x00\x00\x00\x00\x00}\x94(")
		for k := range 4 {
			seg = append(seg, 0x8c, 2, 'w', byte('0'+k), 0x94, 0x8e)
			seg = binary.LittleEndian.AppendUint64(seg, payload)
			segs = append(segs, seg)
			payloads = append(payloads, payload)
			seg = []byte{0x94}
		}
		segs = append(segs, append(seg, 'u', '.'))
		zeros := make([]byte, 1<<20)
		b.SetBytes(4*payload + 64)
		b.ReportAllocs()
		for b.Loop() {
			s := new(pickleStream)
			writeSegments(s, segs, payloads, zeros)
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, shape := range []struct {
		name string
		data []byte
	}{
		{"small-objects-protocol4", smallObjects(200000)},
		{"small-objects-protocol0", protocol0(300000)},
	} {
		b.Run(shape.name, func(b *testing.B) {
			if err := streamCheck(shape.data); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(shape.data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := streamCheck(shape.data, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// skipCheck is streamCheck feeding through Skip every byte the stream
// says it would not look at, in Writes of up to step bytes otherwise.
func skipCheck(b []byte, step int) (err error, skipped int) {
	s := new(pickleStream)
	var sk Skipper = s
	for len(b) > 0 {
		if n := min(sk.Skippable(), int64(len(b))); n > 0 {
			sk.Skip(n)
			b = b[n:]
			skipped += int(n)
			continue
		}
		n := min(step, len(b))
		s.Write(b[:n])
		b = b[n:]
	}
	return s.Close(), skipped
}

// TestPickleSkipIsWrite: feeding a pickle through Skip wherever Skippable
// allows gives the verdict of Writes, for every fixture whole and cut at
// every byte, and skips the payloads.
func TestPickleSkipIsWrite(t *testing.T) {
	total := 0
	for name, b := range pickleFixtures(t) {
		t.Run(name, func(t *testing.T) {
			for _, step := range []int{1, 7, 4096} {
				err, skipped := skipCheck(b, step)
				if err != nil {
					t.Fatalf("whole, steps of %d: %v", step, err)
				}
				total += skipped
				for cut := range len(b) {
					if err, _ := skipCheck(b[:cut], step); !errors.Is(err, ErrTorn) {
						t.Fatalf("cut at %d, steps of %d: got %v, want ErrTorn", cut, step, err)
					}
				}
			}
		})
	}
	if total == 0 {
		t.Error("no payload byte of any fixture was skipped")
	}
}
