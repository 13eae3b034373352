package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/signals"
)

// TestVersionFlavour builds lifeboat both ways and checks that `lifeboat
// version` names the flavour the go command recorded in the binary
// (CGO_ENABLED), and that only the gpu flavour holds go-nvml.
func TestVersionFlavour(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Skip(t, "no C compiler for the gpu flavour (cgo): install gcc")
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		cgo, flavour string
		nvml         bool
	}{
		{"0", flavourStatic, false},
		{"1", flavourGPU, true},
	} {
		t.Run(tc.flavour, func(t *testing.T) {
			bin := filepath.Join(dir, "lifeboat-"+tc.flavour)
			build := exec.Command("go", "build", "-ldflags", signals.LinkFlag+" -X main.version=1.2.3", "-o", bin, ".")
			build.Env = append(os.Environ(), "CGO_ENABLED="+tc.cgo, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build with CGO_ENABLED=%s: %v\n%s", tc.cgo, err, out)
			}
			out, err := exec.Command(bin, "version").Output()
			if err != nil {
				t.Fatalf("lifeboat version: %v", err)
			}
			want := regexp.MustCompile(`^lifeboat 1\.2\.3 ` + tc.flavour + ` \([^)]+\) linux/[a-z0-9]+ go[0-9.]+\S*\n$`)
			if !want.Match(out) {
				t.Errorf("lifeboat version printed %q, want a line matching %s", out, want)
			}
			info, err := exec.Command("go", "version", "-m", bin).Output()
			if err != nil {
				t.Fatalf("go version -m: %v", err)
			}
			if !strings.Contains(string(info), "CGO_ENABLED="+tc.cgo+"\n") {
				t.Errorf("go version -m %s does not record CGO_ENABLED=%s:\n%s", bin, tc.cgo, info)
			}
			if got := strings.Contains(string(info), "github.com/NVIDIA/go-nvml"); got != tc.nvml {
				t.Errorf("%s flavour: go-nvml linked in is %v, want %v", tc.flavour, got, tc.nvml)
			}
		})
	}
}
