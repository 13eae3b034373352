package format

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// benchSize is the size of the checkpoints the benchmarks check:
// LIFEBOAT_BENCH_SIZE bytes, 1 GiB by default (docs/BENCHMARKS.md compares
// the checks with the upload of 1 GiB).
func benchSize(b *testing.B) int64 {
	if s := os.Getenv("LIFEBOAT_BENCH_SIZE"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	return 1 << 30
}

// BenchmarkRealChecks times the whole check (Inspect: the header checks,
// and for streamed formats every byte fed in 1 MiB reads) of checkpoints
// of benchSize bytes saved by real torch 1.13: the legacy format and a
// distributed checkpoint's shard, each 64 tensors; and, in memory, JSON
// Lines of the same size up to the 64 MiB checked (maxJSONChecked), fed in
// 8 MiB buffers as the upload feeds them.
// The page cache holds the files, so the time is the checks', not the
// disk's. Compare ns/op with the upload time of the same size.
func BenchmarkRealChecks(b *testing.B) {
	size := benchSize(b)
	if err := exec.Command(systemPython, "-c", "import torch").Run(); err != nil {
		b.Skip("needs Debian's python3-torch")
	}
	dir := b.TempDir()
	script := fmt.Sprintf(`
import sys
exec(open("testdata/real_savers.py").read().split("import numpy as np")[0])
import torch, torch.distributed._shard.checkpoint as dcp
n = %d // 4 // 64
sd = {"t%%02d" %% i: torch.ones(n) for i in range(64)}
torch.save(sd, sys.argv[1] + "/legacy.pt", _use_new_zipfile_serialization=False)
dcp.save_state_dict(sd, dcp.FileSystemWriter(sys.argv[1] + "/dist", single_file_per_rank=True), no_dist=True)
`, size)
	if out, err := exec.Command(systemPython, "-c", script, dir).CombinedOutput(); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	for _, tc := range []struct{ name, rel string }{
		{"torch-legacy", "legacy.pt"},
		{"distcp-shard", "dist/__0_0.distcp"},
	} {
		p := filepath.Join(dir, tc.rel)
		fi, err := os.Stat(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(fi.Size())
			for b.Loop() {
				if _, err := Inspect(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	var jl bytes.Buffer
	for i := 0; int64(jl.Len()) < min(size, maxJSONChecked); i++ {
		fmt.Fprintf(&jl, `{"step": %d, "loss": %g, "grad_norm": NaN, "lr": 1e-05, "note": "epoch \"%d\""}`+"\n", i, 1/float64(i+1), i)
	}
	data := jl.Bytes()
	b.Run("json-lines", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			s := new(jsonStream)
			for off := 0; off < len(data); off += 8 << 20 {
				s.Write(data[off:min(off+8<<20, len(data))])
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
