package watch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/lifeboat-project/lifeboat/internal/reserved"
)

// listing is what one walk of the watched directory found.
type listing struct {
	files    []File           // regular files, not excluded, markers left out
	markers  map[string]int64 // directory holding a marker -> its step
	specials []special        // symlinks, FIFOs, sockets, devices, not excluded
	// unreadable are the directories under the watched one that could
	// not be listed (permission denied), not excluded: what they hold is
	// unknown.
	unreadable []string
	excluded   []string // files an exclude pattern matched (for Survey)
}

// special is a file that is not a regular file.
type special struct {
	path string // slash-separated, relative to the watched directory
	mode fs.FileMode
}

// scanDir lists the regular files under dir that no exclude pattern
// matches, the special files (a checkpoint is regular files: these are
// reported, never part of one) and the directories that hold marker, with
// the step each marker names.
func scanDir(dir, marker string, exclude []string) (listing, error) {
	l := listing{markers: map[string]int64{}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && os.IsNotExist(err) {
				return nil // removed while walking
			}
			if p != dir && d != nil && d.IsDir() && errors.Is(err, fs.ErrPermission) {
				// One directory lifeboat may not list (another user's,
				// lost+found on a volume's root) must not hide every
				// checkpoint: its own is withheld (Scan), the rest go on.
				if rel, rerr := filepath.Rel(dir, p); rerr == nil && !excluded(exclude, filepath.ToSlash(rel)) {
					l.unreadable = append(l.unreadable, filepath.ToSlash(rel))
				}
				return filepath.SkipDir
			}
			return err
		}
		if p == dir {
			return nil
		}
		name := d.Name()
		if reserved.Is(name) && name != marker {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if name == marker && d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil // removed while walking
			}
			d := filepath.ToSlash(filepath.Dir(rel))
			if d == "." {
				d = ""
			}
			l.markers[d] = ParseMarkerStep(b)
			return nil
		}
		if excluded(exclude, rel) {
			l.excluded = append(l.excluded, rel)
			return nil
		}
		if !d.Type().IsRegular() {
			l.specials = append(l.specials, special{path: rel, mode: d.Type()})
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		l.files = append(l.files, File{Path: rel, Size: info.Size(), ModTime: info.ModTime(), ChangeTime: changeTime(info)})
		return nil
	})
	if err != nil {
		return listing{}, fmt.Errorf("watch: scan %s: %w", dir, err)
	}
	return l, nil
}
