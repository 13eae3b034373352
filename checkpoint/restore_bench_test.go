package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// BenchmarkRestoreFormatCheck restores one 256 MiB pickle from an
// in-memory store with the format checks on and off: the difference is
// what the checks add to a restore (docs/BENCHMARKS.md). cpu-ms/op is the
// process's CPU time (user and system) per restore: on a shared machine
// steadier than the time.
//
//	go test -run '^$' -bench RestoreFormatCheck -benchtime 5x ./checkpoint/
func BenchmarkRestoreFormatCheck(b *testing.B) {
	s := mem.New()
	src := b.TempDir()
	if err := os.WriteFile(filepath.Join(src, "model.pdparams"), pickleOf(randomBytes(9, 256<<20)), 0o644); err != nil {
		b.Fatal(err)
	}
	u := &Uploader{Store: s}
	if _, err := u.Upload(context.Background(), src, Target{Step: 1, WorldSize: 1}); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		skip bool
	}{{"checks", false}, {"no-checks", true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(256 << 20)
			cpu0 := cpuTime()
			for b.Loop() {
				dir := b.TempDir()
				if _, err := Restore(context.Background(), s, 1, 0, dir, RestoreOptions{SkipFormatCheck: tc.skip}); err != nil {
					b.Fatal(err)
				}
				os.RemoveAll(dir)
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
