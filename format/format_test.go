package format

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Kind
	}{
		{"model.pdparams", Pickle},
		{"ckpt/step-100/opt.PDOPT", Pickle},
		{"a.pkl", Pickle},
		{"a.pickle", Pickle},
		{"0_0.distcp", Pickle},
		{"0.metadata", Pickle},
		{"model.pt", Zip},
		{"model.PTH", Zip},
		{"arrays.npz", Zip},
		{"a.zip", Zip},
		{"model.safetensors", Safetensors},
		{"model.pdparams.tmp", Unknown},
		{"pdparams", Unknown},
		{"dir.pkl/events.out.tfevents", Unknown},
		{"config.json", JSON},
		{"config.yaml", Unknown},
		{"", Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := KindOf(tc.name); got != tc.want {
				t.Errorf("KindOf(%q) = %d, want %d", tc.name, got, tc.want)
			}
			if Known(tc.name) != (tc.want != Unknown) {
				t.Errorf("Known(%q) = %v", tc.name, Known(tc.name))
			}
			if (NewStream(tc.name) != nil) != (tc.want == Pickle) {
				t.Errorf("NewStream(%q) = %v", tc.name, NewStream(tc.name))
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
		{"empty.pkl", nil, "pickle: empty file"},
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
	for _, p := range []string{link, sub, filepath.Join(dir, "missing.pt")} {
		err := CheckFile(p)
		if err == nil || errors.Is(err, ErrTorn) || !strings.Contains(err.Error(), p) {
			t.Errorf("CheckFile(%s): got %v, want an error naming it, not ErrTorn", p, err)
		}
	}
	if err := CheckFile(filepath.Join(dir, "missing.txt")); err != nil {
		t.Errorf("unknown format: got %v, want nil (nothing is read)", err)
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
