package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/internal/beneath"
	"github.com/lifeboat-project/lifeboat/setting"
	"github.com/lifeboat-project/lifeboat/watch"
)

// commitRecord is this run's last commit of one checkpoint (by its id):
// the target and revision, and of each file what checkTorn compares.
type commitRecord struct {
	target   checkpoint.Target
	revision int
	files    map[string]committedFile // by path relative to --dir
	torn     bool                     // marked torn already
}

// committedFile is a committed file's size and its first and last chunks
// (with the last one's offset): a bounded record however large the file,
// since one is kept for every checkpoint of the run.
type committedFile struct {
	size        int64
	first, last checkpoint.Chunk
	lastOff     int64
}

// recordCommit remembers what res committed of r.
func (a *Agent) recordCommit(r watch.Ready, t checkpoint.Target, res *checkpoint.UploadResult) {
	rec := &commitRecord{target: t, revision: res.Revision, files: map[string]committedFile{}}
	for _, f := range res.Manifest.Files {
		if n := len(f.Chunks); n > 0 {
			last := f.Chunks[n-1]
			rec.files[f.Path] = committedFile{size: f.Size, first: f.Chunks[0], last: last, lastOff: f.Size - last.Size}
		}
	}
	a.mu.Lock()
	a.commits[r.ID] = rec
	a.mu.Unlock()
}

// checkTorn is called before r, a checkpoint this run committed before
// whose files changed since, is uploaded again. A file of the last commit
// that has grown, with the committed bytes still at its start (its first
// and last committed chunks read the same), was still being written when
// it was committed: that revision is torn. It is marked so in the store
// (checkpoint.MarkTorn: never restored; a higher revision, the one about
// to be uploaded, replaces it), logged once and counted. A file rewritten
// with other content (a new save of the same checkpoint) proves nothing.
func (a *Agent) checkTorn(ctx context.Context, r watch.Ready) {
	a.mu.Lock()
	rec := a.commits[r.ID]
	a.mu.Unlock()
	if rec == nil || rec.torn {
		return
	}
	for _, f := range r.Files {
		rel := path.Join(r.Dir, f.Path)
		old, ok := rec.files[rel]
		if !ok || f.Size <= old.size || !a.startsWith(rel, old) {
			continue
		}
		why := fmt.Sprintf("%s grew from %d to %d bytes after the commit, which holds its first %d", rel, old.size, f.Size, old.size)
		err := checkpoint.MarkTorn(ctx, a.cfg.Uploader.Store, rec.target, rec.revision, why)
		args := []any{"step", rec.target.Step, "rank", rec.target.Rank, "revision", rec.revision, "path", rel,
			"committed_bytes", old.size, "bytes", f.Size, "reason", "a file of the commit grew afterwards: it was committed while still being written"}
		if err != nil {
			args = append(args, "mark_err", err, "effect", "the mark could not be stored: the revision stays restorable until a higher one replaces it")
		} else {
			args = append(args, "effect", "that revision is never restored; the next commit of this checkpoint replaces it")
		}
		args = append(args, "hint", setting.Textf("have the trainer mark a finished save (a marker file, lifeboat.commit(path, step)), or raise %s above the longest pause inside one save", setting.Settle))
		a.cfg.Log.Warn("checkpoint.torn_commit", args...)
		a.mu.Lock()
		rec.torn = err == nil
		a.stats.Torn++
		a.mu.Unlock()
		return
	}
}

// startsWith reports whether the file rel (under --dir) begins with the
// committed file old: its first and last committed chunks hash the same
// at the same offsets. A file that cannot be read does not.
func (a *Agent) startsWith(rel string, old committedFile) bool {
	d, err := beneath.Open(a.cfg.Dir)
	if err != nil {
		return false
	}
	defer d.Close()
	f, err := d.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	same := func(c checkpoint.Chunk, off int64) bool {
		h := sha256.New()
		_, err := io.Copy(h, io.NewSectionReader(f, off, c.Size))
		return err == nil && hex.EncodeToString(h.Sum(nil)) == c.SHA256
	}
	return same(old.first, 0) && (old.lastOff == 0 || same(old.last, old.lastOff))
}
