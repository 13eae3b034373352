package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/storage"
	fsstore "github.com/lifeboat-project/lifeboat/storage/fs"
)

// limitStore is a directory store built through the Go API, with step 1 a
// small whole checkpoint uploaded by the real Uploader.
func limitStore(t *testing.T) (url string, s storage.Store) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	s, err := fsstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "step-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "step-1", "model.pdparams"), pickleBytes([]byte("the model at step 1")), 0o644); err != nil {
		t.Fatal(err)
	}
	u := &checkpoint.Uploader{Store: s}
	if _, err := u.Upload(context.Background(), src, checkpoint.Target{Step: 1, WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	return "file://" + root, s
}

// commitManifest puts m, rank 0 of 1, at its key (docs/FORMAT.md).
func commitManifest(t *testing.T, s storage.Store, m *checkpoint.Manifest) {
	t.Helper()
	m.Format, m.WorldSize, m.Producer = checkpoint.FormatVersion, 1, "test"
	m.Created = time.Now().UTC()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	putObject(t, s, fmt.Sprintf("snapshots/%020d/rank-00000-of-00001.json", m.Step), b)
}

func putObject(t *testing.T, s storage.Store, key string, b []byte) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func sumOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// limitedRun runs `lifeboat run` in a process limited to 1024 open files
// (prlimit, else the shell's ulimit) with a trainer that writes its
// LIFEBOAT_RESUME_STEP into a file, and returns lifeboat's exit code,
// stderr and the step the trainer was told.
func limitedRun(t *testing.T, url, dir string) (code int, stderr, step string) {
	t.Helper()
	seen := filepath.Join(t.TempDir(), "seen")
	args := []string{lifeboatBin, "run", "--store", url, "--dir", dir, "--", "sh", "-c", `echo "$LIFEBOAT_RESUME_STEP" > "$0"`, seen}
	var cmd *exec.Cmd
	if _, err := exec.LookPath("prlimit"); err == nil {
		cmd = exec.Command("prlimit", append([]string{"--nofile=1024:1024"}, args...)...)
	} else {
		cmd = exec.Command("sh", append([]string{"-c", `ulimit -n 1024 && exec "$@"`, "sh"}, args...)...)
	}
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	_ = cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	b, _ := os.ReadFile(seen)
	return code, errBuf.String(), strings.TrimSpace(string(b))
}

// fastDir is an empty directory on a tmpfs of its own where the test can
// mount one (as root), else on the test's disk: 100,000 files are created
// and synced in seconds there, in minutes on a busy disk.
func fastDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2g"); err != nil {
		t.Logf("restoring onto the disk: cannot mount a tmpfs: %v", err)
		return dir
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestRestoreManyFilesUnderFileLimit: the store's newest checkpoint has
// 100,000 small files; lifeboat, limited to 1024 open files, restores it
// and starts the trainer at its step. Before, the restore opened every file
// at once, failed with "too many open files" and lifeboat exited 125 on
// every start.
func TestRestoreManyFilesUnderFileLimit(t *testing.T) {
	const n = 100_000
	url, s := limitStore(t)
	m := &checkpoint.Manifest{ID: "00000000000000a2", Step: 2}
	for i := range n {
		m.Files = append(m.Files, checkpoint.File{Path: fmt.Sprintf("step-2/%03d/%06d.bin", i/1000, i), Mode: 0o644})
	}
	put := map[string]bool{}
	for i := range m.Files {
		b := fmt.Appendf(nil, "%d\n", i%97)
		sum := sumOf(b)
		if !put[sum] {
			putObject(t, s, "chunks/"+sum[:2]+"/"+sum, b)
			put[sum] = true
		}
		m.Files[i].Size = int64(len(b))
		m.Files[i].Chunks = []checkpoint.Chunk{{SHA256: sum, Size: int64(len(b))}}
	}
	commitManifest(t, s, m)

	dir := fastDir(t)
	t0 := time.Now()
	code, stderr, step := limitedRun(t, url, dir)
	t.Logf("lifeboat run with %d files to restore took %v", n, time.Since(t0))
	if code != 0 || step != "2" {
		t.Fatalf("exit %d, trainer told step %q; want exit 0 and step 2; stderr:\n%s", code, step, tail(stderr))
	}
	if strings.Contains(stderr, "resume.fallback") {
		t.Errorf("fell back instead of restoring step 2:\n%s", tail(stderr))
	}
	for _, i := range []int{0, 96, 97, n - 1} {
		p := filepath.Join(dir, fmt.Sprintf("step-2/%03d/%06d.bin", i/1000, i))
		if b, err := os.ReadFile(p); err != nil || string(b) != fmt.Sprintf("%d\n", i%97) {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
}

// TestRestoreFallsBackFromTooBig: the store's newest checkpoint claims a
// file of 1 TiB (a valid manifest). lifeboat run falls back to the previous
// step, logs resume.fallback with the reason, and the trainer starts at
// that step; prune --keep 1 keeps the restorable step, not the 1 TiB one,
// and ls --check marks it. Before, lifeboat exited 125 with ENOSPC on every
// start, and prune deleted the good step.
func TestRestoreFallsBackFromTooBig(t *testing.T) {
	url, s := limitStore(t)
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil && st.Bavail*uint64(st.Bsize) > 1<<40 {
		t.Skipf("%s has more than 1 TiB free", dir)
	}
	chunks := make([]checkpoint.Chunk, (1<<40)/checkpoint.MaxChunkSize)
	for i := range chunks {
		chunks[i] = checkpoint.Chunk{SHA256: sumOf([]byte("never stored")), Size: checkpoint.MaxChunkSize}
	}
	commitManifest(t, s, &checkpoint.Manifest{ID: "00000000000000b3", Step: 3, ChunkSize: checkpoint.MaxChunkSize,
		Files: []checkpoint.File{{Path: "step-3/model.pdparams", Size: 1 << 40, Mode: 0o644, Chunks: chunks}}})

	code, stderr, step := limitedRun(t, url, dir)
	if code != 0 || step != "1" {
		t.Fatalf("exit %d, trainer told step %q; want exit 0 and step 1; stderr:\n%s", code, step, tail(stderr))
	}
	var fallback string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, `"msg":"resume.fallback"`) {
			fallback = l
		}
	}
	if !strings.Contains(fallback, `"skipped_step":3`) || !strings.Contains(fallback, "1099511627776 bytes") || !strings.Contains(fallback, "no space left on device") {
		t.Errorf("resume.fallback line %q; want step 3 skipped, naming its size and ENOSPC; stderr:\n%s", fallback, tail(stderr))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "step-1", "model.pdparams")); err != nil || !bytes.Equal(b, pickleBytes([]byte("the model at step 1"))) {
		t.Errorf("step 1's model after the fallback: %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(dir); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".lifeboat-restore-") }) {
		t.Errorf("a temporary restore directory is left in %s", dir)
	}

	// ls marks what it can tell cheaply: the manifests decode, so only
	// --check, which lists the chunks, sees step 3 cannot be restored.
	entries := lsJSON(t, nil, url)
	if len(entries) != 2 || !entries[0].Restorable || !entries[1].Restorable || entries[1].ChunksChecked {
		t.Errorf("ls --json: %+v; want steps 1 and 3, both restorable as far as ls can tell without --check", entries)
	}
	out, err := exec.Command(lifeboatBin, "ls", "--json", "--check", "--store", url).Output()
	if err != nil || !bytes.Contains(out, []byte(`"missing_chunks": 1`)) || bytes.Count(out, []byte(`"restorable": true`)) != 1 {
		t.Errorf("ls --json --check: %v\n%s; want step 3 not restorable with one missing chunk", err, out)
	}
	out, err = exec.Command(lifeboatBin, "ls", "--check", "--store", url).Output()
	if err != nil || !bytes.Contains(out, []byte("missing-chunks")) {
		t.Errorf("ls --check: %v\n%s; want step 3 marked missing-chunks", err, out)
	}

	out, err = exec.Command(lifeboatBin, "prune", "--store", url, "--keep", "1").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("kept steps [1]")) || !bytes.Contains(out, []byte("steps [3] cannot be restored")) {
		t.Errorf("prune --keep 1: %v\n%s; want step 1 kept and step 3 named as not restorable", err, out)
	}
	if entries := lsJSON(t, nil, url); len(entries) != 2 || entries[0].Step != 1 {
		t.Errorf("after prune --keep 1: %+v; want step 1 (and the newer step 3) still there", entries)
	}
}
