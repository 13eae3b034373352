package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestUploadChecksDistcpAgainstMetadata: a real PyTorch distributed
// checkpoint (torch 1.13, one shard per rank) is uploaded whole; its shard
// cut exactly between two items (a run of whole zip archives) is refused,
// naming the shard, because its .metadata says where the items end.
func TestUploadChecksDistcpAgainstMetadata(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import torch, numpy").CombinedOutput(); err != nil {
		testenv.Skip(t, "needs Debian's python3-torch and python3-numpy: "+strings.TrimSpace(string(out)))
	}
	saved := t.TempDir()
	if out, err := exec.Command(python, "../format/testdata/real_savers.py", saved).CombinedOutput(); err != nil {
		t.Fatalf("real_savers.py: %v\n%s", err, out)
	}
	meta, err := os.ReadFile(filepath.Join(saved, "dist1", ".metadata"))
	if err != nil {
		t.Fatal(err)
	}
	shard, err := os.ReadFile(filepath.Join(saved, "dist1", "__0_0.distcp"))
	if err != nil {
		t.Fatal(err)
	}
	// The end of the last item but one: an end-of-central-directory
	// record (no comment) ends there.
	cut := 0
	for at := len(shard) - 44; at > 0; at-- {
		if bytes.HasPrefix(shard[at:], []byte("PK\x05\x06")) {
			cut = at + 22
			break
		}
	}
	if cut == 0 {
		t.Fatal("no item boundary in the shard")
	}
	for _, tc := range []struct {
		name  string
		shard []byte
		torn  bool
	}{
		{"whole", shard, false},
		{"cut between items", shard[:cut], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, tree{"dcp/.metadata": meta, "dcp/__0_0.distcp": tc.shard})
			_, err := newUploader(mem.New(), nil).UploadFiles(context.Background(), dir,
				[]string{"dcp/.metadata", "dcp/__0_0.distcp"}, Target{Step: 1, WorldSize: 1})
			if !tc.torn {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInterrupted) || !errors.Is(err, format.ErrTorn) || InterruptedPath(err) != "dcp/__0_0.distcp" {
				t.Errorf("got %v (path %q), want ErrInterrupted naming dcp/__0_0.distcp", err, InterruptedPath(err))
			}
		})
	}
}
