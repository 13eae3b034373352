package checkpoint

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/internal/beneath"
	"github.com/lifeboat-project/lifeboat/internal/reserved"
)

// AsideDir is the directory, in the directory restored into, that a
// restore moves the files it found in the restored checkpoint's directory,
// and did not restore, into: AsideDir/<UTC time>/<their paths>. Lifeboat
// never reads, uploads or deletes what is there.
const AsideDir = reserved.AsideDir

// RecordFile is the record of a restore in progress, in the directory
// restored into: written before the first file moves into place and
// removed after the last, so that the next start finishes a restore a
// SIGKILL cut (FinishInterrupted).
const RecordFile = reserved.RestoreRecord

// recordLimit bounds the record FinishInterrupted reads: a manifest's own
// limit and the paths of the files moved aside.
const recordLimit = 2 * MaxManifestSize

// restoreRecord is RecordFile's content.
type restoreRecord struct {
	Version int `json:"version"`
	// Tmp is the temporary directory the files are moved from, Sub the
	// directory they are moved into ("" for the one restored into),
	// both relative to the directory restored into.
	Tmp string `json:"tmp"`
	Sub string `json:"sub,omitempty"`
	// Whole: Tmp is renamed to Sub as a whole (every rank's files),
	// instead of file by file.
	Whole bool `json:"whole,omitempty"`
	// Aside is where Strays go, and Strays the files and directories to
	// move there first.
	Aside  string   `json:"aside,omitempty"`
	Strays []string `json:"strays,omitempty"`
	// Manifest is the restored snapshot's manifest (with Whole, the
	// joined manifest of RestoreResult), Ranks each rank's.
	Manifest json.RawMessage   `json:"manifest"`
	Ranks    []json.RawMessage `json:"ranks,omitempty"`
	Rank     int               `json:"rank"`
}

const recordVersion = 1

// strays lists what sub's checkpoint directory (the deepest directory
// holding every file of files) holds beyond files, relative to root:
// whole entries, not descended into unless a file of files lies below.
// When files lie at the top of sub, that directory is the trainer's
// whole directory (its logs, configs, other checkpoints): nothing at the
// top is a stray then, only the non-directory entries of the
// subdirectories that hold files. Reserved names (lifeboat's own, the
// marker) are never strays.
func strays(root *beneath.Dir, sub string, files []File) ([]string, error) {
	want := map[string]bool{}   // file paths
	needed := map[string]bool{} // directories on the way to a file
	for _, f := range files {
		want[f.Path] = true
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			needed[d] = true
		}
	}
	common := CommonDir(files)
	rel := ""
	for _, seg := range strings.Split(common, "/") {
		if seg == "" {
			break
		}
		rel = joinSlash(rel, seg)
		if st, err := root.Lstat(joinSlash(sub, rel)); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil, nil // nothing there yet (or checkTargets refused it)
		}
	}
	var out []string
	var walk func(rel string) error
	walk = func(rel string) error {
		ents, err := root.ReadDir(joinSlash(sub, rel))
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := joinSlash(rel, e.Name())
			switch {
			case want[p], reserved.Is(e.Name()):
			case needed[p] && e.IsDir():
				if err := walk(p); err != nil {
					return err
				}
			case common != "" || rel != "" && !e.IsDir():
				out = append(out, joinSlash(sub, p))
			}
		}
		return nil
	}
	if err := walk(common); err != nil {
		return nil, err
	}
	return out, nil
}

// CommonDir is the deepest directory holding every file ("" when they are
// at the top): where the trainer finds a restored checkpoint, and the
// directory a restore leaves holding the snapshot only.
func CommonDir(files []File) string {
	if len(files) == 0 {
		return ""
	}
	common := path.Dir(files[0].Path)
	for _, f := range files[1:] {
		d := path.Dir(f.Path)
		for common != "." && d != common && !strings.HasPrefix(d, common+"/") {
			common = path.Dir(common)
		}
	}
	if common == "." {
		return ""
	}
	return common
}

// asideName names a new directory under AsideDir for one restore's
// strays: the time (UTC) and random characters. It is made when the
// first file moves there.
func asideName(now time.Time) string {
	return AsideDir + "/" + now.UTC().Format("20060102T150405Z") + "-" + rand.Text()[:8]
}

// moveInPlace moves the restored files of files from rec.Tmp into
// rec.Sub, all or nothing, also across a kill: it lists what the
// checkpoint's directory holds beyond files (strays), writes the record
// (RecordFile), moves the strays aside and the files into place
// (moveRecorded), and removes the record. When a move fails, the
// checkpoint is taken apart (takeApart) rather than left half moved.
func moveInPlace(root *beneath.Dir, rec *restoreRecord, files []File) error {
	st, err := strays(root, rec.Sub, files)
	if err != nil {
		return fmt.Errorf("list the restored checkpoint's directory: %w", err)
	}
	rec.Strays, rec.Aside = st, asideName(time.Now())
	if err := writeRecord(root, rec); err != nil {
		return err
	}
	if err := moveRecorded(root, rec, files); err != nil {
		return errors.Join(err, takeApart(root, rec, files))
	}
	if len(rec.Strays) == 0 {
		rec.Aside = ""
	}
	return nil
}

// takeApart moves the files of a restore that cannot be finished from
// their places into rec.Aside, so that the directory holds no mix of two
// checkpoints, and removes the record. It returns what it could not do.
func takeApart(root *beneath.Dir, rec *restoreRecord, files []File) error {
	var errs []error
	for _, f := range files {
		target := joinSlash(rec.Sub, f.Path)
		if err := root.Rename(target, rec.Aside+"/"+target); err == nil {
			rec.Strays = append(rec.Strays, target)
		} else if !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if rec.Whole {
		if err := root.Rename(rec.Sub, rec.Aside+"/"+rec.Sub); err == nil {
			rec.Strays = append(rec.Strays, rec.Sub)
		}
	}
	errs = append(errs, removeRecord(root))
	return errors.Join(errs...)
}

// writeRecord writes rec as root's RecordFile, atomically, and syncs.
func writeRecord(root *beneath.Dir, rec *restoreRecord) error {
	rec.Version = recordVersion
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := root.WriteFile(RecordFile, b, 0o644, tempPrefix); err != nil {
		return fmt.Errorf("write the record of the restore in progress: %w", err)
	}
	return nil
}

// removeRecord removes root's RecordFile and syncs root.
func removeRecord(root *beneath.Dir) error {
	if err := root.Remove(RecordFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return root.Sync()
}

// moveRecorded does what rec records, in order: the strays moved aside,
// then the files (or the whole directory) moved into place, each step
// skipped where a former attempt did it already; then it removes the
// record. files are the snapshot's. A file found neither in rec.Tmp nor
// in place makes it fail with errIncomplete.
func moveRecorded(root *beneath.Dir, rec *restoreRecord, files []File) error {
	n := 0
	step := func() {
		n++
		if afterMove != nil {
			afterMove(n)
		}
	}
	if afterMove != nil {
		afterMove(0)
	}
	for _, s := range rec.Strays {
		err := root.Rename(s, rec.Aside+"/"+s) // makes rec.Aside
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("move %s aside: %w", s, err)
		}
		step()
	}
	if rec.Whole {
		_, terr := root.Lstat(rec.Tmp)
		_, serr := root.Lstat(rec.Sub)
		switch {
		case terr == nil:
			var old string
			if serr == nil {
				var err error
				if old, err = root.MkdirTemp("", tempPrefix); err != nil {
					return err
				}
				if err := root.Rename(rec.Sub, old+"/"+path.Base(rec.Sub)); err != nil {
					return fmt.Errorf("move the previous %s aside: %w", rec.Sub, err)
				}
			}
			if err := root.Rename(rec.Tmp, rec.Sub); err != nil {
				return fmt.Errorf("move restored files into place: %w", err)
			}
			if old != "" {
				root.RemoveAll(old)
			}
		case serr != nil:
			return fmt.Errorf("%s is neither in %s nor in place: %w", rec.Sub, rec.Tmp, errIncomplete)
		}
		step()
	} else {
		dirs := map[string]bool{}
		for _, f := range files {
			target := joinSlash(rec.Sub, f.Path)
			err := root.Rename(rec.Tmp+"/"+f.Path, target)
			if errors.Is(err, fs.ErrNotExist) {
				// Moved by an attempt a kill cut short, or lost.
				if st, serr := root.Lstat(target); serr != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != f.Size {
					return fmt.Errorf("%s is neither in %s nor in place: %w", f.Path, rec.Tmp, errIncomplete)
				}
				err = nil
			}
			if err != nil {
				return fmt.Errorf("move restored files into place (some are moved, the rest are not): %w", err)
			}
			dirs[path.Dir(target)] = true
			step()
		}
		syncDirs(root, dirs)
	}
	if err := root.Sync(); err != nil {
		return err
	}
	return removeRecord(root)
}

// errIncomplete marks an interrupted restore that cannot be finished: a
// file is neither in its temporary directory nor in place.
var errIncomplete = errors.New("the interrupted restore cannot be finished")

// FinishInterrupted finishes a restore into dir that a kill (SIGKILL, a
// power loss) cut short while it moved files into place, as recorded in
// dir's RecordFile: what the restore had not moved aside yet is moved
// aside, the files still in its temporary directory are moved into place,
// and the record is removed. The files were complete and checked before
// the record was written, so the result is the whole snapshot, as if the
// restore had not been cut. It returns nil and no error when there is no
// record. Call it at start, before anything reads, scans or uploads dir,
// and before RemoveStaleRestores (which would remove the temporary
// directory).
//
// When the restore cannot be finished (a file is gone from both places,
// or the record is unreadable), the files it had moved into place are moved
// aside too, so that no mix of two checkpoints is left, the record is
// removed, and the error says what happened; RestoreResult then lists
// what was moved aside.
func FinishInterrupted(dir string) (*RestoreResult, error) {
	root, err := beneath.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer root.Close()
	b, err := root.ReadFile(RecordFile, recordLimit)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	wrap := func(err error) error {
		return fmt.Errorf("checkpoint: finish the restore into %s that was cut short: %w", dir, err)
	}
	fail := func(err error) (*RestoreResult, error) { return nil, wrap(err) }
	if err != nil {
		return fail(err)
	}
	var rec restoreRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Version != recordVersion {
		if err == nil {
			err = fmt.Errorf("record version %d, want %d", rec.Version, recordVersion)
		}
		// Nothing can be known of it: leave the files, drop the record.
		return fail(errors.Join(fmt.Errorf("%s: %w", RecordFile, err), removeRecord(root)))
	}
	var ranks []*Manifest
	for _, r := range rec.Ranks {
		rm, err := DecodeManifest(r)
		if err != nil {
			return fail(errors.Join(err, removeRecord(root)))
		}
		ranks = append(ranks, rm)
	}
	var m *Manifest
	if rec.Whole && len(ranks) > 0 {
		m, _ = joinRanks(ranks)
	} else if m, err = DecodeManifest(rec.Manifest); err != nil {
		return fail(errors.Join(err, removeRecord(root)))
	}
	res := &RestoreResult{Step: m.Step, Rank: rec.Rank, Line: m.Line, Revision: m.Revision, Manifest: m, Ranks: ranks,
		Dir: joinDir(dir, rec.Sub), Files: len(m.Files), Bytes: m.Bytes(), Aside: rec.Aside, MovedAside: rec.Strays}
	files := m.Files
	if rec.Whole {
		files = nil
	}
	if err := moveRecorded(root, &rec, files); err != nil {
		// Take the half-moved checkpoint apart rather than leave a mix.
		err = errors.Join(err, takeApart(root, &rec, files))
		return &RestoreResult{Aside: rec.Aside, MovedAside: rec.Strays}, wrap(err)
	}
	if len(rec.Strays) == 0 {
		res.Aside = ""
	}
	return res, nil
}

// joinDir is dir joined with the slash path sub.
func joinDir(dir, sub string) string {
	if sub == "" {
		return dir
	}
	return strings.TrimSuffix(dir, "/") + "/" + sub
}
