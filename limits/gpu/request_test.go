package gpu

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseDevices(t *testing.T) {
	const (
		gpuA = "GPU-5d1f6a7e-3b2c-4c8a-9e1f-0a1b2c3d4e5f"
		migA = "MIG-8a1b2c3d-4e5f-5a6b-8c9d-0e1f2a3b4c5d"
	)
	list := func(r ...Ref) Request { return Request{Mode: List, Devices: r} }
	tests := []struct {
		in      string
		want    Request
		wantErr string
	}{
		{in: "", want: Request{Mode: Unset}},
		{in: "  ", want: Request{Mode: Unset}},
		{in: "all", want: Request{Mode: All}},
		{in: "ALL", want: Request{Mode: All}},
		{in: "none", want: Request{Mode: None}},
		{in: "void", want: Request{Mode: Void}},
		{in: "0", want: list(IndexRef(0))},
		{in: "0,1", want: list(IndexRef(0), IndexRef(1))},
		{in: " 3 , 2 ", want: list(IndexRef(3), IndexRef(2))},
		{in: "0:1", want: list(Ref{Index: 0, MIGIndex: 1})},
		{in: gpuA, want: list(UUIDRef(gpuA))},
		{in: migA, want: list(UUIDRef(migA))},
		{in: "MIG-GPU-5d1f6a7e-3b2c-4c8a-9e1f-0a1b2c3d4e5f/1/0", want: list(UUIDRef("MIG-GPU-5d1f6a7e-3b2c-4c8a-9e1f-0a1b2c3d4e5f/1/0"))},
		{in: "1," + gpuA, want: list(IndexRef(1), UUIDRef(gpuA))},
		{in: "GPU-5d1f", want: list(UUIDRef("GPU-5d1f"))}, // CUDA accepts a unique prefix

		// docker --gpus
		{in: "device=0,1", want: list(IndexRef(0), IndexRef(1))},
		{in: `"device=0,1"`, want: list(IndexRef(0), IndexRef(1))},
		{in: `"device=0,1",capabilities=compute`, want: list(IndexRef(0), IndexRef(1))},
		{in: "device=" + migA, want: list(UUIDRef(migA))},
		{in: "count=2", want: Request{Mode: Count, Count: 2}},
		{in: "count=all", want: Request{Mode: All}},
		{in: "2,capabilities=utility", want: Request{Mode: Count, Count: 2}},
		{in: "all,capabilities=compute", want: Request{Mode: All}},
		{in: "device=all", want: Request{Mode: All}},
		{in: "driver=nvidia,count=1", want: Request{Mode: Count, Count: 1}},

		{in: "0,,1", wantErr: "empty entry"},
		{in: "0,", wantErr: "empty entry"},
		{in: "0,0", wantErr: "listed twice"},
		{in: gpuA + "," + strings.ToUpper(gpuA[4:]), wantErr: "not an index"},
		{in: "all,0", wantErr: "cannot be combined"},
		{in: "-1", wantErr: "not an index"},
		{in: "99999999999999999999", wantErr: "out of range"},
		{in: "GPU-", wantErr: "not a UUID"},
		{in: "GPU-xyz", wantErr: "not a UUID"},
		{in: "MIG-GPU-abc/1", wantErr: "MIG-GPU-<uuid>/<gi>/<ci>"},
		{in: "0:x", wantErr: "GPU:MIG indices"},
		{in: "gpu0", wantErr: "not an index"},
		{in: "/var/run/nvidia-container-devices", wantErr: "volume-mounts"},
		{in: "nvidia.com/gpu=0", wantErr: "CDI"},
		{in: "count=0", wantErr: "not a positive number"},
		{in: "count=2,device=0", wantErr: "both count and device"},
		{in: "foo=bar", wantErr: "unknown key"},
		{in: "capabilities=compute", wantErr: "neither devices nor a count"},
		{in: `"device=0`, wantErr: "device request"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDevices(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseDevices(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDevices(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseDevices(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseDevicesDuplicateUUIDIgnoresCase(t *testing.T) {
	_, err := ParseDevices("GPU-abcd,GPU-ABCD")
	if err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Fatalf("err = %v, want listed twice", err)
	}
}

// FuzzParseDevices checks that ParseDevices never panics, that what it
// accepts is well formed, and that Request.String round-trips.
func FuzzParseDevices(f *testing.F) {
	for _, s := range []string{
		"", "all", "none", "void", "0", "0,1,7", "0:1", "1:0,2",
		"GPU-5d1f6a7e-3b2c-4c8a-9e1f-0a1b2c3d4e5f", "MIG-8a1b2c3d-4e5f-5a6b-8c9d-0e1f2a3b4c5d",
		"MIG-GPU-5d1f6a7e-3b2c-4c8a-9e1f-0a1b2c3d4e5f/1/0",
		`"device=0,1",capabilities=compute`, "count=2", "2,driver=nvidia", "device=all",
		"0,,1", "/var/run/nvidia-container-devices", "nvidia.com/gpu=all",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		req, err := ParseDevices(s)
		if err != nil {
			return
		}
		switch req.Mode {
		case List:
			if len(req.Devices) == 0 {
				t.Fatalf("ParseDevices(%q): empty list", s)
			}
			for _, d := range req.Devices {
				if d.Index < 0 && d.UUID == "" || d.Index >= maxIndex || d.MIGIndex >= maxIndex {
					t.Fatalf("ParseDevices(%q): malformed ref %+v", s, d)
				}
			}
		case Count:
			if req.Count <= 0 {
				t.Fatalf("ParseDevices(%q): count %d", s, req.Count)
			}
		case Unset, All, None, Void:
			if len(req.Devices) != 0 || req.Count != 0 {
				t.Fatalf("ParseDevices(%q): %v with devices %+v", s, req.Mode, req)
			}
		default:
			t.Fatalf("ParseDevices(%q): mode %v", s, req.Mode)
		}
		again, err := ParseDevices(req.String())
		if err != nil {
			t.Fatalf("ParseDevices(%q) = %q, which does not parse: %v", s, req, err)
		}
		if !reflect.DeepEqual(again, req) {
			t.Fatalf("round trip of %q: %+v, then %+v", s, req, again)
		}
		// Planning never panics on anything parsed.
		_, _ = Plan(req, nil)
		_, _ = Plan(Request{Mode: req.Mode, Devices: req.Devices, Count: req.Count, Applied: true}, nil)
	})
}
