package gpu

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestMemoryPlan(t *testing.T) {
	const a100 = 40 * gib // 40960 MiB
	tests := []struct {
		name      string
		spec      string
		mem       uint64
		env       []string
		vars      []string
		conflicts []string // substrings, one per conflict
		wantErr   error
		errText   string
	}{
		{name: "nothing", vars: []string{"FLAGS_allocator_strategy=auto_growth"}},
		{name: "user's strategy kept", env: []string{"FLAGS_allocator_strategy=naive_best_fit"}},
		{name: "MiB", spec: "8192",
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"}},
		{name: "MiB without device memory", spec: "8192", mem: 0,
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"}},
		{name: "fraction", spec: "0.5", mem: a100,
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=20480"}},
		{name: "fraction 1.0", spec: "1.0", mem: a100,
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=40960"}},
		{name: "auto: 5% margin", spec: "auto", mem: a100, // 40960 - 2048
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=38912"}},
		{name: "auto: 512 MiB margin on a small MIG device", spec: "auto", mem: 4864 << 20, // 4864 - 512
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=4352"}},
		{name: "auto without device memory", spec: "auto", wantErr: ErrMemoryUnknown},
		{name: "fraction without device memory", spec: "0.5", wantErr: ErrMemoryUnknown},
		{name: "auto on a tiny device", spec: "auto", mem: 512 << 20, errText: "leave nothing"},
		{name: "bad", spec: "8G", mem: a100, errText: "want MiB"},
		{name: "zero", spec: "0", mem: a100, errText: "want MiB"},
		{name: "fraction above 1", spec: "1.5", mem: a100, errText: "want MiB"},
		{name: "negative fraction", spec: "-0.5", mem: a100, errText: "want MiB"},

		{name: "user's limit differs: flag wins", spec: "8192", mem: a100,
			env:       []string{"FLAGS_gpu_memory_limit_mb=16000"},
			vars:      []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"},
			conflicts: []string{"FLAGS_gpu_memory_limit_mb=16000 in the environment conflicts with the GPU memory limit (8192 MiB), which wins"}},
		{name: "user's limit equal: no conflict", spec: "8192", mem: a100,
			env:  []string{"FLAGS_gpu_memory_limit_mb=8192"},
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"}},
		{name: "user's limit alone stays", mem: a100,
			env:  []string{"FLAGS_gpu_memory_limit_mb=16000"},
			vars: []string{"FLAGS_allocator_strategy=auto_growth"}},
		{name: "last value of a key wins", spec: "8192", mem: a100,
			env:  []string{"FLAGS_gpu_memory_limit_mb=1", "FLAGS_gpu_memory_limit_mb=8192"},
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"}},
		{name: "initial above the flag: lowered", spec: "8192", mem: a100,
			env:       []string{"FLAGS_initial_gpu_memory_in_mb=10000"},
			vars:      []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192", "FLAGS_initial_gpu_memory_in_mb=8192"},
			conflicts: []string{"FLAGS_initial_gpu_memory_in_mb=10000 in the environment is above the GPU memory limit (8192 MiB): lowered to 8192"}},
		{name: "initial within the flag", spec: "8192", mem: a100,
			env:  []string{"FLAGS_initial_gpu_memory_in_mb=4096"},
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"}},
		{name: "fraction above the flag: lowered", spec: "8192", mem: a100,
			env:       []string{"FLAGS_fraction_of_gpu_memory_to_use=0.92"},
			vars:      []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192", "FLAGS_fraction_of_gpu_memory_to_use=0.2"},
			conflicts: []string{"FLAGS_fraction_of_gpu_memory_to_use=0.92 in the environment is 37683 MiB of the device, above the GPU memory limit (8192 MiB): lowered to 0.2"}},
		{name: "fraction within the flag", spec: "8192", mem: a100,
			env:  []string{"FLAGS_fraction_of_gpu_memory_to_use=0.1"},
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"}},
		{name: "fraction unknowable", spec: "8192",
			env:       []string{"FLAGS_fraction_of_gpu_memory_to_use=0.92"},
			vars:      []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"},
			conflicts: []string{"cannot be checked"}},
		{name: "user's own limit and fraction disagree: reported only", mem: a100,
			env:       []string{"FLAGS_gpu_memory_limit_mb=8192", "FLAGS_fraction_of_gpu_memory_to_use=0.92"},
			vars:      []string{"FLAGS_allocator_strategy=auto_growth"},
			conflicts: []string{"above FLAGS_gpu_memory_limit_mb in the environment (8192 MiB): Paddle's first chunk will fail"}},
		{name: "naive_best_fit gets a fitting fraction", spec: "10240", mem: a100,
			env:  []string{"FLAGS_allocator_strategy=naive_best_fit"},
			vars: []string{"FLAGS_gpu_memory_limit_mb=10240", "FLAGS_fraction_of_gpu_memory_to_use=0.25"}},
		{name: "naive_best_fit without device memory gets an initial chunk", spec: "10240",
			env:  []string{"FLAGS_allocator_strategy=naive_best_fit"},
			vars: []string{"FLAGS_gpu_memory_limit_mb=10240", "FLAGS_initial_gpu_memory_in_mb=10240"}},
		{name: "unknown strategy reported", spec: "8192", mem: a100,
			env:       []string{"FLAGS_allocator_strategy=legacy"},
			vars:      []string{"FLAGS_gpu_memory_limit_mb=8192"},
			conflicts: []string{`FLAGS_allocator_strategy="legacy" in the environment is not auto_growth`}},
		{name: "garbage fraction reported", spec: "8192", mem: a100,
			env:       []string{"FLAGS_fraction_of_gpu_memory_to_use=lots"},
			vars:      []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"},
			conflicts: []string{"not a fraction"}},
		{name: "garbage initial reported", spec: "8192", mem: a100,
			env:       []string{"FLAGS_initial_gpu_memory_in_mb=big"},
			vars:      []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"},
			conflicts: []string{"FLAGS_initial_gpu_memory_in_mb=\"big\" in the environment is not a number"}},
		{name: "unrelated env ignored", spec: "8192", mem: a100,
			env:  []string{"PATH=/bin", "FLAGS_gpu_memory_limit_mb_extra=1", "NOEQUALS"},
			vars: []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=8192"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars, conflicts, err := MemoryPlan(tt.spec, tt.mem, tt.env)
			if tt.wantErr != nil || tt.errText != "" {
				if err == nil {
					t.Fatalf("MemoryPlan = %q, %q; want an error", vars, conflicts)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				var fe *FieldError
				if !strings.Contains(err.Error(), tt.errText) || !errors.As(err, &fe) || fe.Field != FieldMemoryLimit || fe.Value != tt.spec {
					t.Fatalf("err = %v, want a *FieldError of %s %q that contains %q", err, FieldMemoryLimit, tt.spec, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatalf("MemoryPlan: %v", err)
			}
			if !reflect.DeepEqual(vars, tt.vars) {
				t.Errorf("vars = %q, want %q", vars, tt.vars)
			}
			if len(conflicts) != len(tt.conflicts) {
				t.Fatalf("conflicts = %q, want %d like %q", conflicts, len(tt.conflicts), tt.conflicts)
			}
			for i, c := range tt.conflicts {
				if !strings.Contains(conflicts[i], c) {
					t.Errorf("conflict %d = %q, want it to contain %q", i, conflicts[i], c)
				}
			}
		})
	}
}
