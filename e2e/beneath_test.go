package e2e

// Tests that lifeboat writes nothing outside --dir, whatever links the
// trainer (or anything sharing the volume) plants in it, before or during a
// restore.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/signals"
	fsstore "github.com/lifeboat-project/lifeboat/storage/fs"
)

var (
	faultBinOnce sync.Once
	faultBin     string
	faultBinErr  error
)

// faultLifeboat builds lifeboat with the lifeboat_faults tag (once):
// LIFEBOAT_FAULT_STOP_AT_MOVE=N makes a restore SIGSTOP itself once N
// files are moved into place (checkpoint/faults.go).
func faultLifeboat(t *testing.T) string {
	t.Helper()
	faultBinOnce.Do(func() {
		faultBin = filepath.Join(filepath.Dir(lifeboatBin), "lifeboat-faults")
		out, err := exec.Command("go", "build", "-tags", "lifeboat_faults", "-ldflags", signals.LinkFlag, "-o", faultBin, lifeboatPkg).CombinedOutput()
		if err != nil {
			faultBinErr = fmt.Errorf("build with -tags lifeboat_faults: %v\n%s", err, out)
		}
	})
	if faultBinErr != nil {
		t.Fatal(faultBinErr)
	}
	return faultBin
}

// startBin runs bin (a lifeboat) with env added, as a plain process.
func startBin(t *testing.T, bin string, env []string, args ...string) *lb {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &lb{t: t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start lifeboat: %v", err)
	}
	p.pid = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// waitSelfStopped waits until lifeboat has stopped itself (SIGSTOP, state T);
// it fails if lifeboat exits first.
func waitSelfStopped(t *testing.T, p *lb) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for time.Now().Before(deadline) {
		if allStopped(p.pid) {
			return
		}
		if !p.alive() {
			t.Fatalf("lifeboat exited (code %d) before it stopped at the fault point; stderr:\n%s", p.code, p.stderr.String())
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("lifeboat never stopped at the fault point; stderr:\n%s", p.stderr.String())
}

// allStopped reports whether every thread of pid is stopped (state T).
func allStopped(pid int) bool {
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	for _, st := range stats {
		b, err := os.ReadFile(st)
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if err != nil || i < 0 || len(s) < i+3 || s[i+2] != 'T' {
			return false
		}
	}
	return len(stats) > 0
}

// storeWith returns the URL of a new file store holding step, one rank,
// whose files (slash paths, relative to --dir) are files.
func storeWith(t *testing.T, step int64, files map[string][]byte) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	s, err := fsstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	writeTree(t, src, files)
	u := &checkpoint.Uploader{Store: s}
	if _, err := u.Upload(context.Background(), src, checkpoint.Target{Step: step, WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	return "file://" + root
}

// writeTree writes files (slash paths) under dir.
func writeTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for p, b := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sentinel is a tree outside --dir that links in --dir point into: its
// state (every name, type, mode, size, modification time, content and
// link target) must never change.
type sentinel struct {
	dir string
}

func newSentinel(t *testing.T) *sentinel {
	t.Helper()
	s := &sentinel{dir: filepath.Join(t.TempDir(), "outside")}
	writeTree(t, s.dir, map[string][]byte{
		"victim":                []byte("precious, outside --dir"),
		"step-000100/model.bin": []byte("another job's model"),
		"d/sub/f":               []byte("deep outside"),
		"empty/.keep":           nil,
	})
	if err := os.Symlink("/etc/hostname", filepath.Join(s.dir, "link")); err != nil {
		t.Fatal(err)
	}
	return s
}

// state is a description of every entry under s.dir.
func (s *sentinel) state(t *testing.T) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.dir, p)
		line := fmt.Sprintf("%q %v %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatalf("read the tree outside --dir: %v", err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestResumeFileLinkNotFollowed: a link planted at the
// resume file's temporary name, or at the resume file itself, pointing to
// a file outside --dir: `lifeboat restore` and `lifeboat run` write the
// resume file and leave the link's target as it was. Before, resume.Write
// wrote DIR/.lifeboat-resume.json.tmp with os.WriteFile, following the
// link: lifeboat (as root) truncated and rewrote any file on the machine.
func TestResumeFileLinkNotFollowed(t *testing.T) {
	url := storeWith(t, 100, map[string][]byte{"step-000100/model.bin": []byte("the model at step 100")})
	for _, cmd := range []string{"restore", "run"} {
		for _, at := range []string{".lifeboat-resume.json.tmp", ".lifeboat-resume.json"} {
			t.Run(cmd+"/"+at, func(t *testing.T) {
				out := newSentinel(t)
				before := out.state(t)
				dir := t.TempDir()
				if err := os.Symlink(filepath.Join(out.dir, "victim"), filepath.Join(dir, at)); err != nil {
					t.Fatal(err)
				}
				args := []string{cmd, "--store", url, "--dir", dir}
				if cmd == "run" {
					args = append(args, "--", "true")
				}
				p := start(t, "plain", args...)
				if code := p.wait(); code != 0 {
					t.Fatalf("lifeboat %s exited %d:\n%s", cmd, code, p.stderr.String())
				}
				if after := out.state(t); after != before {
					t.Fatalf("lifeboat %s changed the tree outside --dir through a link at %s:\nbefore:\n%s\nafter:\n%s", cmd, at, before, after)
				}
				b, err := os.ReadFile(filepath.Join(dir, ".lifeboat-resume.json"))
				if err != nil || !strings.Contains(string(b), `"step":100`) {
					t.Fatalf("resume file: %q, %v", b, err)
				}
			})
		}
	}
}

// swapForLink renames dir/rel aside (inside dir) and puts a symlink to
// target in its place.
func swapForLink(t *testing.T, dir, rel, target string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.Rename(p, filepath.Join(dir, "swapped-"+strings.ReplaceAll(rel, "/", "-"))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreIntoDirectorySwappedForLink: while a
// restore is about to move its files into place (stopped there by the
// lifeboat_faults build), a directory it moves into, or its own temporary
// directory, is swapped for a symlink to a directory outside --dir on the
// same file system. Nothing is created, replaced or removed outside --dir,
// and the restore fails with an error that names the link. Before, the
// moves went by path: the restored files landed in the link's target (or
// were taken from it).
func TestRestoreIntoDirectorySwappedForLink(t *testing.T) {
	bin := faultLifeboat(t)
	files := map[string][]byte{
		"step-000100/model.bin":     []byte("the model at step 100"),
		"step-000100/sub/optim.bin": []byte("the optimizer at step 100"),
	}
	url := storeWith(t, 100, files)
	cases := []struct {
		name  string
		moved int    // files moved when the swap happens
		swap  string // what is swapped, relative to --dir; "tmp": the restore's temporary directory
		into  string // the link's target, relative to the tree outside
	}{
		{"checkpoint dir", 0, "step-000100", "step-000100"},
		{"sub dir", 0, "step-000100/sub", "d"},
		{"checkpoint dir after a move", 1, "step-000100", "d"},
		{"temporary dir", 0, "tmp", "step-000100"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := newSentinel(t)
			// The outside target holds the names the restore moves.
			writeTree(t, filepath.Join(out.dir, tc.into), map[string][]byte{"model.bin": []byte("outside model"), "sub/optim.bin": []byte("outside optimizer")})
			before := out.state(t)
			dir := t.TempDir()
			writeTree(t, dir, map[string][]byte{"step-000100/sub/old.log": []byte("a reused volume")})
			p := startBin(t, bin, []string{fmt.Sprintf("LIFEBOAT_FAULT_STOP_AT_MOVE=%d", tc.moved)}, "restore", "--store", url, "--dir", dir)
			waitSelfStopped(t, p)
			swap := tc.swap
			if swap == "tmp" {
				ents, _ := filepath.Glob(filepath.Join(dir, ".lifeboat-restore-*"))
				if len(ents) != 1 {
					t.Fatalf("want one temporary directory, found %v", ents)
				}
				swap = filepath.Base(ents[0])
			}
			swapForLink(t, dir, swap, filepath.Join(out.dir, tc.into))
			p.signal(syscall.SIGCONT)
			code := p.wait()
			if after := out.state(t); after != before {
				t.Fatalf("the restore changed the tree outside --dir through a link (exit %d):\nbefore:\n%s\nafter:\n%s\nstderr:\n%s", code, before, after, p.stderr.String())
			}
			if code == 0 {
				t.Fatalf("the restore succeeded through a link:\n%s", p.stderr.String())
			}
			if !strings.Contains(p.stderr.String(), "symbolic link") {
				t.Errorf("the error does not say that a link was in the way:\n%s", p.stderr.String())
			}
		})
	}
}

// swapper swaps entries of a directory tree for symlinks into a sentinel
// tree outside it, in a loop, until stopped.
type swapper struct {
	dir, out string
	rng      *rand.Rand
	n        int
	stop     chan struct{}
	done     chan struct{}
}

func startSwapper(dir, out string, seed uint64) *swapper {
	s := &swapper{dir: dir, out: out, rng: rand.New(rand.NewPCG(seed, 1)), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// targets outside: directories and files.
var swapTargets = []string{"", "d", "d/sub", "step-000100", "empty", "victim", "d/sub/f", "link", "step-000100/model.bin"}

func (s *swapper) run() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		var entries []string
		filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == s.dir {
				return nil
			}
			if strings.HasPrefix(d.Name(), "swapped-") {
				return fs.SkipDir
			}
			entries = append(entries, p)
			return nil
		})
		if len(entries) == 0 {
			continue
		}
		p := entries[s.rng.IntN(len(entries))]
		s.n++
		aside := filepath.Join(s.dir, fmt.Sprintf("swapped-%d", s.n))
		if os.Rename(p, aside) != nil {
			continue
		}
		os.Symlink(filepath.Join(s.out, swapTargets[s.rng.IntN(len(swapTargets))]), p)
		if s.rng.IntN(3) == 0 {
			// Now and then put the real one back, so the restore gets
			// further before it meets a link.
			if os.Remove(p) == nil {
				os.Rename(aside, p)
			}
		}
	}
}

func (s *swapper) halt() int {
	close(s.stop)
	<-s.done
	return s.n
}

// TestRestoreUnderLinkSwapsWritesNothingOutside: restores (`lifeboat restore`, `lifeboat run`'s restore at
// start, and `run --restart on-failure`'s restores before each restart)
// run while another goroutine swaps every directory and file of the
// tree under --dir (checkpoint directories, the restore's temporary
// directory, the resume file) for symlinks into a tree outside --dir, in a
// loop. Whatever the interleaving, and whether each restore succeeds or
// fails, nothing outside --dir changes.
func TestRestoreUnderLinkSwapsWritesNothingOutside(t *testing.T) {
	files := map[string][]byte{}
	for i := range 40 {
		files[fmt.Sprintf("step-000100/d%d/e%d/f%02d.bin", i%4, i%3, i)] = []byte(strings.Repeat(fmt.Sprint(i), 1000+i))
	}
	url := storeWith(t, 100, files)
	out := newSentinel(t)
	before := out.state(t)
	swaps, failed := 0, 0
	for trial := range 12 {
		dir := t.TempDir()
		writeTree(t, dir, map[string][]byte{"step-000100/d0/e0/f00.bin": []byte("old"), "step-000100/d1/e1/old.bin": []byte("old")})
		sw := startSwapper(dir, out.dir, uint64(trial))
		args := []string{"restore", "--store", url, "--dir", dir}
		switch trial % 3 {
		case 1:
			args = []string{"run", "--store", url, "--dir", dir, "--", "true"}
		case 2:
			// A trainer that crashes: two restarts, each restoring again.
			args = []string{"run", "--store", url, "--dir", dir, "--restart", "on-failure", "--max-restarts", "2", "--restart-backoff", "1ms", "--", "false"}
		}
		p := start(t, "plain", args...)
		if code := p.wait(); code != 0 && (trial%3 != 2 || !strings.Contains(p.stderr.String(), `"msg":"supervisor.restart`)) {
			failed++
		}
		swaps += sw.halt()
		if after := out.state(t); after != before {
			t.Fatalf("trial %d: lifeboat %s changed the tree outside --dir:\nbefore:\n%s\nafter:\n%s\nstderr:\n%s", trial, args[0], before, after, p.stderr.String())
		}
	}
	t.Logf("%d swaps; %d of 12 lifeboats failed on a link", swaps, failed)
}
