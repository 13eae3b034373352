package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
	"github.com/lifeboat-project/lifeboat/watch"
)

// lockedBuffer is a log destination safe to read while the agent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// events returns the log's lines as maps, in order.
func (l *lockedBuffer) events() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range bytes.Lines(l.b.Bytes()) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestStreamAfterTheUploadInFlight: a stop comes while a background upload
// is in flight. The stream of the trainer's last save begins only once
// that upload has ended (the chunks in memory stay one upload's), then
// stores the save's whole chunks as a real writer process writes them,
// and the final flush commits the save taking those chunks from it.
func TestStreamAfterTheUploadInFlight(t *testing.T) {
	defer goleak.VerifyNone(t)
	const chunk = 64 << 10
	dir, inner := t.TempDir(), mem.New()
	// The first Put (the background upload of step 1) waits for release.
	var puts atomic.Int64
	blocked, release := make(chan struct{}), make(chan struct{})
	s := &mem.FaultStore{Inner: inner,
		OnPut: func(ctx context.Context, key string, r io.Reader, size int64, o storage.PutOptions) (storage.ObjectInfo, error) {
			if puts.Add(1) == 1 {
				close(blocked)
				<-release
			}
			return inner.Put(ctx, key, r, size, o)
		},
	}
	logs := &lockedBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	w, err := watch.New(watch.Config{Dir: dir, Settle: time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Dir: dir, Watcher: w, WorldSize: 1, Interval: 10 * time.Millisecond, Log: log,
		Uploader: &checkpoint.Uploader{Store: storage.Retry(s, storage.RetryPolicy{Backoff: noWait}), ChunkSize: chunk}})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "step-1", "model.bin"), 200<<10, 1)
	stop := run(t, a)
	defer stop()
	<-blocked

	// The trainer's last save: a process that holds the file open for
	// writing and writes what the test sends it.
	save := filepath.Join(dir, "step-2", "model.bin")
	if err := os.MkdirAll(filepath.Dir(save), 0o755); err != nil {
		t.Fatal(err)
	}
	writer := exec.Command("sh", "-c", `exec cat > "$0"`, save)
	in, err := writer.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	defer writer.Wait()
	defer in.Close()
	body := make([]byte, 2*chunk+100)
	for i := range body {
		body[i] = byte(i*13 + i/chunk)
	}
	if _, err := in.Write(body[:2*chunk]); err != nil {
		t.Fatal(err)
	}
	a.Stopping()
	waitFor(t, "the stop to reach the agent", func() bool { return len(a.stopCh) == 0 })
	close(release) // the upload in flight goes on and commits step 1

	waitFor(t, "the stream to store the save's two whole chunks", func() bool {
		n := 0
		for _, c := range [][]byte{body[:chunk], body[chunk : 2*chunk]} {
			sum, _ := storage.Checksums(c)
			if _, err := inner.Stat(context.Background(), "chunks/"+sum[:2]+"/"+sum); err == nil {
				n++
			}
		}
		return n == 2
	})
	if _, err := in.Write(body[2*chunk:]); err != nil {
		t.Fatal(err)
	}
	in.Close()
	if err := writer.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(flushContext()); err != nil {
		t.Fatal(err)
	}

	var order []string
	var streamed, committed2 map[string]any
	for _, e := range logs.events() {
		switch e["msg"] {
		case "checkpoint.committed":
			// The agent's own loop may commit step 2 as soon as the writer
			// closes it, before Flush; Flush then finds it committed and says
			// so (already_committed). That second event commits nothing.
			if e["already_committed"] == true {
				continue
			}
			order = append(order, "committed step "+jsonNumber(e["step"]))
			if e["step"] == float64(2) {
				committed2 = e
			}
		case "checkpoint.stream_started":
			// After step 2's commit the stop is still under way, and a
			// stream may start again for a save that is yet to come.
			if committed2 == nil {
				order = append(order, "stream started")
			}
		case "checkpoint.streamed":
			if streamed == nil {
				streamed = e
			}
		}
	}
	if len(order) != 3 || order[0] != "committed step 1" || order[1] != "stream started" || order[2] != "committed step 2" {
		t.Errorf("events %v; want step 1 committed, then the stream started, then step 2 committed, and no other commit", order)
	}
	if streamed == nil || streamed["chunks"] != float64(2) {
		t.Errorf("checkpoint.streamed: %v; want 2 chunks", streamed)
	}
	if committed2 == nil || committed2["streamed_bytes"] != float64(2*chunk) {
		t.Errorf("commit of step 2: %v; want streamed_bytes %d", committed2, 2*chunk)
	}
	out := t.TempDir()
	res, err := checkpoint.RestoreLatest(context.Background(), inner, 0, out, checkpoint.RestoreOptions{})
	if err != nil || res.Step != 2 {
		t.Fatalf("RestoreLatest = %+v, %v; want step 2", res, err)
	}
	if got, err := os.ReadFile(filepath.Join(out, "step-2", "model.bin")); err != nil || !bytes.Equal(got, body) {
		t.Errorf("restored step 2 differs from what was written (%v)", err)
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
