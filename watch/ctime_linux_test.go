package watch

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestChangeTime: an in-place rewrite that restores size and modification
// time changes the fingerprint through the change time.
func TestChangeTime(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "step-1", "model.pdparams")
	mtime := time.Now().Add(-time.Hour).Truncate(time.Second)
	write(t, p, "aaaa", mtime)
	w, _ := New(Config{Dir: dir})
	r, _ := w.Scan(true)
	if len(r) != 1 || r[0].Files[0].ChangeTime.IsZero() {
		t.Fatalf("scan: %+v; want step-1 with its change time", r)
	}
	w.Done(r[0])
	before := r[0].Files[0].ChangeTime
	// dd conv=notrunc + touch -r: same size, same mtime. The kernel's
	// change time is coarse: rewrite until it moves.
	for i := 0; ; i++ {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteAt([]byte("bbbb"), 0)
		f.Close()
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if ctimeOf(t, p).After(before) {
			break
		}
		if i == 200 {
			t.Fatal("change time never moved")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r, _ = w.Scan(true)
	if len(r) != 1 || r[0].Files[0].Size != 4 || !r[0].Files[0].ModTime.Equal(mtime) {
		t.Fatalf("rewritten in place with size and mtime kept: %+v, want it returned again", r)
	}

	t0, t1, t2 := time.Unix(100, 0), time.Unix(200, 0), time.Unix(300, 0)
	c := Candidate{Files: []File{{ModTime: t0, ChangeTime: t2}, {ModTime: t1, ChangeTime: t1}}}
	if got := c.LastChange(); !got.Equal(t2) {
		t.Errorf("LastChange = %v, want %v", got, t2)
	}
}

func ctimeOf(t *testing.T, p string) time.Time {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
}
