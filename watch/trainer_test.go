package watch

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// fakeProc writes a /proc of processes, each with its parent, mount
// namespace and mountinfo; "self" is a link to the pid given.
type fakeProc struct {
	pid       int
	ppid      int
	ns        string
	mountinfo string
}

func writeFakeProc(t *testing.T, self int, procs []fakeProc) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range procs {
		d := filepath.Join(root, strconv.Itoa(p.pid))
		if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		stat := strconv.Itoa(p.pid) + " (x) S " + strconv.Itoa(p.ppid) + " 0 0\n"
		for name, content := range map[string]string{"stat": stat, "mountinfo": p.mountinfo} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("mnt:["+p.ns+"]", filepath.Join(d, "ns", "mnt")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("pid:[4026532999]", filepath.Join(d, "ns", "pid")); err != nil { // a pod's
			t.Fatal(err)
		}
	}
	if err := os.Symlink(strconv.Itoa(self), filepath.Join(root, "self")); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestTrainerProcesses: the trainer a sidecar serves is told by its
// mounts: processes of another container that mount the checkpoint volume
// (also through a subPath, at another mount point) count; the pause
// process (lifeboat's ancestor), lifeboat's own container and a container
// without the volume (a service mesh proxy) do not.
func TestTrainerProcesses(t *testing.T) {
	const vol = "/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/ckpt"
	sidecar := "1 0 0:50 / / rw - overlay overlay rw\n2 1 8:1 " + vol + " /data rw - ext4 /dev/sda1 rw\n3 1 8:1 /var/lib/kubelet/pods/u/etc-hosts /etc/hosts rw - ext4 /dev/sda1 rw\n"
	trainer := "1 0 0:51 / / rw - overlay overlay rw\n2 1 8:1 " + vol + " /checkpoints\\040here rw - ext4 /dev/sda1 rw\n"
	subPath := "1 0 0:52 / / rw - overlay overlay rw\n2 1 8:1 " + vol + "/run-7 /ckpt rw - ext4 /dev/sda1 rw\n"
	proxy := "1 0 0:53 / / rw - overlay overlay rw\n3 1 8:1 /var/lib/kubelet/pods/u/etc-hosts /etc/hosts rw - ext4 /dev/sda1 rw\n"
	root := writeFakeProc(t, 20, []fakeProc{
		{1, 0, "pause", "1 0 0:49 / / rw - overlay overlay rw\n"},
		{20, 1, "sidecar", sidecar},
		{21, 20, "sidecar", sidecar}, // a helper in lifeboat's own container
		{30, 1, "trainer", trainer},
		{31, 30, "trainer", trainer}, // a DataLoader worker
		{40, 1, "other", subPath},
		{50, 1, "proxy", proxy},
	})
	w := &Watcher{cfg: Config{Dir: "/data/step", ProcRoot: root}, self: 20}
	if got := w.TrainerProcesses(); !slices.Equal(got, []int{30, 31, 40}) {
		t.Errorf("TrainerProcesses = %v, want [30 31 40]", got)
	}
	// Without the volume's mount in lifeboat's own table nothing counts.
	w.cfg.Dir = "/elsewhere"
	if got := w.TrainerProcesses(); len(got) != 0 {
		t.Errorf("TrainerProcesses with --dir on the root file system = %v, want none", got)
	}
	// In the machine's initial PID namespace (not in a pod) lifeboat sees
	// every process of the machine: none is taken for the trainer.
	w.cfg.Dir = "/data/step"
	pidNS := filepath.Join(root, "20", "ns", "pid")
	if err := os.Remove(pidNS); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(initialPIDNamespace, pidNS); err != nil {
		t.Fatal(err)
	}
	if got := w.TrainerProcesses(); len(got) != 0 {
		t.Errorf("TrainerProcesses in the initial PID namespace = %v, want none", got)
	}
}
