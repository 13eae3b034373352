package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestTorchLegacy checks a save torch 1.13 wrote (testdata/legacy_small.pt:
// three storages of 6 floats, 2 longs and 3 halves): whole passes; every
// cut, a storage's count changed, and bytes after it fail or are left to
// the death rule.
func TestTorchLegacy(t *testing.T) {
	b, err := os.ReadFile("testdata/legacy_small.pt")
	if err != nil {
		t.Fatal(err)
	}
	check := func(b []byte) error {
		kind, s, err := Begin(bytes.NewReader(b), int64(len(b)))
		if kind != TorchLegacy || s != nil {
			t.Fatalf("Begin: kind %v, stream %v; want TorchLegacy and no stream", kind, s)
		}
		return err
	}
	if err := check(b); err != nil {
		t.Fatalf("whole: %v", err)
	}
	for n := len(torchMagic) + 2; n < len(b); n++ {
		if err := check(b[:n]); !errors.Is(err, ErrTorn) {
			t.Fatalf("cut at %d of %d: got %v, want ErrTorn", n, len(b), err)
		}
	}
	// A storage's element count one higher: the storages no longer end
	// at the end of the file. The storages hold 70 bytes: 8+3*2 (h),
	// 8+2*8 (b), 8+6*4 (w), in the order of their keys.
	first := len(b) - 70
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint64(c[first:], binary.LittleEndian.Uint64(c[first:])+1)
	if err := check(c); !errors.Is(err, ErrTorn) || !strings.Contains(err.Error(), "inside storage") {
		t.Errorf("count grown: got %v", err)
	}
	// Two saves back to back (torch.save twice into one file) are whole;
	// other bytes after the storages are not recognised.
	if err := check(slices.Concat(b, b)); err != nil {
		t.Errorf("two saves: %v", err)
	}
	if err := check(slices.Concat(b, []byte("trailing"))); !errors.Is(err, ErrUnchecked) || errors.Is(err, ErrTorn) {
		t.Errorf("bytes after the storages: got %v, want ErrUnchecked", err)
	}
}

// TestNPY checks np.save's layout built by hand: the shape and dtype give
// the size.
func TestNPY(t *testing.T) {
	npy := func(descr, shape string, data int) []byte {
		h := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }"
		h += strings.Repeat(" ", 63-(10+len(h))%64) + "\n"
		b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
		return append(append(b, h...), make([]byte, data)...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want error // nil, ErrTorn or ErrUnchecked
	}{
		{"float32 3x4", npy("<f4", "(3, 4)", 48), nil},
		{"scalar", npy("<i8", "()", 8), nil},
		{"empty", npy("<f8", "(0, 5)", 0), nil},
		{"unicode", npy("<U3", "(2,)", 24), nil},
		{"datetime", npy("<M8[ns]", "(2,)", 16), nil},
		{"bool", npy("|b1", "(5,)", 5), nil},
		{"cut data", npy("<f4", "(3, 4)", 47), ErrTorn},
		{"cut header", npy("<f4", "(3, 4)", 48)[:20], ErrTorn},
		{"two arrays", slices.Concat(npy("<f4", "(2,)", 8), npy("|u1", "(3,)", 3)), nil},
		{"second cut", slices.Concat(npy("<f4", "(2,)", 8), npy("|u1", "(3,)", 2)), ErrTorn},
		{"trailing bytes", append(npy("<f4", "(2,)", 8), 'x'), ErrUnchecked},
		{"object dtype", npy("|O", "(2,)", 40), ErrUnchecked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNPY(bytes.NewReader(tc.in), int64(len(tc.in)))
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}
