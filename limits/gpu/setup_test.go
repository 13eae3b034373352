//go:build cgo

package gpu

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// TestResolve: which request counts, what NVML changes, when a memory
// limit is applied, skipped or refused, and the field each user error
// names; on go-nvml's DGX A100 machine, without NVML, and with an NVML
// that fails.
func TestResolve(t *testing.T) {
	srv := dgxa100.New()
	a100 := func() (Driver, error) { return OpenLibrary(srv) }
	noNVML := func() (Driver, error) {
		return OpenLibrary(&mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }})
	}
	broken := func() (Driver, error) {
		return OpenLibrary(&mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_UNKNOWN }})
	}
	nodes := t.TempDir() // a /dev with one NVIDIA device node
	if err := os.WriteFile(filepath.Join(nodes, "nvidia0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	inv := inspect(t, open(t, srv))
	uuid0, uuid1 := inv.Devices[0].UUID, inv.Devices[1].UUID
	const given = "GPU-5d1f6a7e-3b2c-4c8a-9e1f-0a1b2c3d4e5f"

	for _, tc := range []struct {
		name string
		o    Options
		env  []string
		// want: nil (nothing asked or given) or what the setup must hold.
		none     bool
		source   string
		checked  bool
		visible  bool
		env0     string // the first of the trainer's variables, "" for none
		limitMiB uint64
		skipped  bool
		field    string // the FieldError's field, "" for none
		nvmlErr  bool   // the FieldError wraps ErrNVMLNeeded
		logs     string // an event that must be logged
		conflict string // a conflict that must be reported
	}{
		{name: "nothing asked", o: Options{Open: a100}, none: true},
		{name: "NVIDIA_VISIBLE_DEVICES unparsed", o: Options{Open: a100}, env: []string{"NVIDIA_VISIBLE_DEVICES=bogus"}, none: true, logs: "gpu.devices_unparsed"},
		{name: "bad devices", o: Options{Devices: "bogus", Open: a100}, field: FieldDevices},
		{name: "given, no NVML", o: Options{Open: noNVML}, env: []string{"NVIDIA_VISIBLE_DEVICES=2,3"},
			source: "NVIDIA_VISIBLE_DEVICES", visible: true, env0: "CUDA_VISIBLE_DEVICES=0,1", logs: "gpu.nvml_unavailable"},
		{name: "given, NVML fails", o: Options{Open: broken}, env: []string{"NVIDIA_VISIBLE_DEVICES=" + given},
			source: "NVIDIA_VISIBLE_DEVICES", visible: true, env0: "CUDA_VISIBLE_DEVICES=" + given, logs: "gpu.nvml_failed"},
		{name: "devices checked by NVML", o: Options{Devices: "0", DevicesName: "--gpus", Open: a100},
			source: "--gpus", checked: true, visible: true, env0: "CUDA_VISIBLE_DEVICES=" + uuid0},
		{name: "CUDA_VISIBLE_DEVICES kept", o: Options{Open: noNVML}, env: []string{"NVIDIA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES=1"},
			source: "NVIDIA_VISIBLE_DEVICES", visible: true, logs: "gpu.keep_cuda_visible_devices"},
		{name: "limit in MiB without NVML", o: Options{MemoryLimit: "8192", Open: noNVML}, env: []string{"NVIDIA_VISIBLE_DEVICES=0"},
			source: "NVIDIA_VISIBLE_DEVICES", visible: true, env0: "CUDA_VISIBLE_DEVICES=0", limitMiB: 8192},
		{name: "limit auto on a 40 GB card", o: Options{Devices: "1", MemoryLimit: "auto", Open: a100},
			source: "devices", checked: true, visible: true, env0: "CUDA_VISIBLE_DEVICES=" + uuid1, limitMiB: 38912},
		{name: "limit auto, a GPU, no NVML", o: Options{MemoryLimit: "auto", Open: noNVML}, env: []string{"NVIDIA_VISIBLE_DEVICES=0"},
			field: FieldMemoryLimit, nvmlErr: true},
		{name: "limit auto, all, a device node, no NVML", o: Options{MemoryLimit: "0.5", Open: noNVML, DevDir: nodes}, env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			field: FieldMemoryLimit, nvmlErr: true},
		{name: "limit auto, all, no device node, no NVML", o: Options{MemoryLimit: "auto", Open: noNVML, DevDir: t.TempDir()}, env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			source: "NVIDIA_VISIBLE_DEVICES", skipped: true, logs: "gpu.memory_limit_skipped"},
		{name: "limit auto, none", o: Options{MemoryLimit: "auto", Open: noNVML}, env: []string{"NVIDIA_VISIBLE_DEVICES=none"},
			source: "NVIDIA_VISIBLE_DEVICES", skipped: true},
		{name: "bad limit", o: Options{MemoryLimit: "lots", Open: noNVML}, env: []string{"NVIDIA_VISIBLE_DEVICES=0"}, field: FieldMemoryLimit},
		{name: "a conflict names the limit as given", o: Options{MemoryLimit: "8192", MemoryLimitName: "--gpu-memory-limit", Open: noNVML},
			env:    []string{"NVIDIA_VISIBLE_DEVICES=0", "FLAGS_gpu_memory_limit_mb=16000"},
			source: "NVIDIA_VISIBLE_DEVICES", visible: true, env0: "CUDA_VISIBLE_DEVICES=0", limitMiB: 8192,
			conflict: "FLAGS_gpu_memory_limit_mb=16000 in the environment conflicts with --gpu-memory-limit (8192 MiB), which wins."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			s, err := Resolve(tc.o, tc.env, slog.New(slog.NewTextHandler(&logs, nil)))
			defer s.Close()
			var fe *FieldError
			switch {
			case tc.field != "":
				if !errors.As(err, &fe) || fe.Field != tc.field || errors.Is(err, ErrNVMLNeeded) != tc.nvmlErr {
					t.Fatalf("err = %v, want a FieldError of %s (wrapping ErrNVMLNeeded: %v)", err, tc.field, tc.nvmlErr)
				}
				if s != nil {
					t.Errorf("a setup beside an error: %+v", s)
				}
				return
			case err != nil:
				t.Fatalf("err = %v", err)
			case tc.none:
				if s != nil {
					t.Fatalf("setup = %+v, want none", s)
				}
			default:
				if s == nil {
					t.Fatal("no setup")
				}
				if s.Source != tc.source || s.Checked != tc.checked || s.Visible != tc.visible || s.LimitMiB != tc.limitMiB || (s.LimitSkipped != "") != tc.skipped {
					t.Errorf("setup = %+v", s)
				}
				if got := first(s.Env); got != tc.env0 {
					t.Errorf("trainer env %q, want first %q", s.Env, tc.env0)
				}
				if tc.checked != (s.Driver() != nil) || tc.checked && len(s.Devices()) == 0 {
					t.Errorf("checked %v: driver %v, devices %q", tc.checked, s.Driver(), s.Devices())
				}
				if tc.limitMiB > 0 && !slices.Contains(s.Env, "FLAGS_gpu_memory_limit_mb="+strconv.FormatUint(tc.limitMiB, 10)) {
					t.Errorf("trainer env %q has no pool limit of %d MiB", s.Env, tc.limitMiB)
				}
				if tc.conflict != "" && !slices.Contains(s.Conflicts, tc.conflict) {
					t.Errorf("conflicts %q, want %q", s.Conflicts, tc.conflict)
				}
			}
			if tc.logs != "" && !strings.Contains(logs.String(), "msg="+tc.logs) {
				t.Errorf("no %s in the log:\n%s", tc.logs, logs.String())
			}
		})
	}
}

func first(env []string) string {
	if len(env) == 0 {
		return ""
	}
	return env[0]
}
