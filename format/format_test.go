package format

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDetect: the first bytes decide the format, whatever the name.
func TestDetect(t *testing.T) {
	legacy := "\x80\x02" + string(torchMagic) + "\x80\x02M\xe9\x03."
	for _, tc := range []struct {
		name string
		head string
		size int64 // len(head) when 0
		want Kind
	}{
		{"empty", "", 0, Empty},
		{"pickle protocol 2", "\x80\x02}q\x00.", 0, Pickle},
		{"pickle protocol 5", "\x80\x05\x95", 0, Pickle},
		{"pickle protocol 6", "\x80\x06N.", 0, Unknown},
		{"pickle protocol 0", "(dp0\n.", 0, Unknown},
		{"torch legacy", legacy, 0, TorchLegacy},
		{"torch legacy protocol 4", "\x80\x04\x95\x0f\x00\x00\x00\x00\x00\x00\x00" + string(torchMagic), 0, TorchLegacy},
		{"zip", "PK\x03\x04\x14\x00", 100, Zip},
		{"empty zip", "PK\x05\x06" + strings.Repeat("\x00", 18), 0, Zip},
		{"npy", "\x93NUMPY\x01\x00v\x00", 200, NPY},
		{"safetensors", "\x20\x00\x00\x00\x00\x00\x00\x00{\"a\"", 100, Safetensors},
		{"json object", "  \n{\"a\": 1}", 0, JSON},
		{"json array", "[1, 2]", 0, JSON},
		{"json with BOM", "\xef\xbb\xbf{}", 0, JSON},
		{"json scalar", "7", 0, Unknown},
		{"text", "hello", 0, Unknown},
		{"zeros", "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 0, Unknown},
		{"floats beginning like PROTO 3", "\x80\x03\x00\x00\x00\x00\x80\x3f\xcd\xcc\x4c\x3e", 0, Unknown},
		{"pickle cut in its head", "\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c", 100, Pickle},
		{"binary beginning with a brace", "{\x00\x17\xff\x01", 0, Unknown},
		{"python repr", "{'a': 1}", 0, Unknown},
		{"int64s 5, 123", "\x05\x00\x00\x00\x00\x00\x00\x00{\x00\x00\x00\x00\x00\x00\x00", 1000, Unknown},
		{"json cut in its head", "{\"loss\": 0.", 100, JSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.size
			if size == 0 {
				size = int64(len(tc.head))
			}
			if got := Detect([]byte(tc.head), size); got != tc.want {
				t.Errorf("Detect(%q) = %v, want %v", tc.head, got, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	pkl := pickleFixtures(t)["state_p4.pdparams"]
	// Bigger than CheckFile's buffer, so the stream gets several Writes.
	large := pickleFixtures(t)["large_p4.pdopt"]
	pt := zipFixtures(t)["torch_like.pt"]
	st := safetensorsFile(stHeader, 36)
	for _, tc := range []struct {
		name string
		data []byte
		torn string // "" when whole
	}{
		{"model.pdparams", pkl, ""},
		{"opt.pdopt", large, ""},
		{"model.pt", pt, ""},
		{"model.safetensors", st, ""},
		{"notes.txt", []byte("anything"), ""},
		{"cut.pdparams", pkl[:len(pkl)-1], "pickle: cut at byte"},
		{"cut-large.pdopt", large[:len(large)/2], "pickle: cut at byte 35025 inside BINBYTES"},
		{"cut.pt", pt[:len(pt)-1], "zip: no end-of-central-directory"},
		{"cut.safetensors", st[:len(st)-1], "safetensors: the tensors end"},
		{"empty.pkl", nil, ""},
		{"text.pdparams", []byte("not a pickle"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, tc.name, tc.data)
			err := CheckFile(p)
			if tc.torn == "" {
				if err != nil {
					t.Error(err)
				}
				return
			}
			want := "format: " + p + ": " + tc.torn
			if !errors.Is(err, ErrTorn) || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("got %v, want ErrTorn starting %q", err, want)
			}
		})
	}
}

func TestCheckFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	target := writeFile(t, dir, "real.pdparams", pickleFixtures(t)["state_p2.pdparams"])
	link := filepath.Join(dir, "link.pdparams")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub.pkl")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, sub, filepath.Join(dir, "missing.pt"), filepath.Join(dir, "missing.txt")} {
		err := CheckFile(p)
		if err == nil || errors.Is(err, ErrTorn) || !strings.Contains(err.Error(), p) {
			t.Errorf("CheckFile(%s): got %v, want an error naming it, not ErrTorn", p, err)
		}
	}
}

func TestCheckSet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		paths []string
		want  string // "" when whole
	}{
		{"no shards", []string{"model.pdparams", "logs/x.txt"}, ""},
		{"shards and metadata", []string{"0_0.distcp", "1_0.distcp", "0.metadata"}, ""},
		{"nested", []string{"step-100/0_0.distcp", "step-100/0.metadata", "model.pdparams"}, ""},
		{"upper case", []string{"s/0_0.DISTCP", "s/0.Metadata"}, ""},
		{"metadata missing", []string{"0_0.distcp", "1_0.distcp"}, `directory "." holds *.distcp shards but no *.metadata file`},
		{"metadata in another directory", []string{"a/0_0.distcp", "b/0.metadata"}, `directory "a" holds`},
		{"two directories", []string{"b/0_0.distcp", "a/0_0.distcp"}, `directories ["a" "b"] hold`},
		{"metadata only", []string{"0.metadata"}, ""},
		{"empty", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSet(tc.paths)
			if tc.want == "" {
				if err != nil {
					t.Error(err)
				}
				return
			}
			if !errors.Is(err, ErrTorn) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrTorn saying %q", err, tc.want)
			}
		})
	}
}
