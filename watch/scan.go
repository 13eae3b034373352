package watch

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// internalPrefix starts the names of lifeboat's own temporary entries
// (restores in progress); scans skip them.
const internalPrefix = ".lifeboat-"

// scanDir lists the regular files under dir (symlinks and other special
// files are skipped: a checkpoint is regular files) and the directories that
// hold marker, with the step each marker names.
func scanDir(dir, marker string) ([]File, map[string]int64, error) {
	var files []File
	markers := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && os.IsNotExist(err) {
				return nil // removed while walking
			}
			return err
		}
		name := d.Name()
		if p != dir && strings.HasPrefix(name, internalPrefix) && name != marker {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if name == marker {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil // removed while walking
			}
			d := filepath.ToSlash(filepath.Dir(rel))
			if d == "." {
				d = ""
			}
			markers[d] = ParseMarkerStep(b)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		files = append(files, File{Path: rel, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("watch: scan %s: %w", dir, err)
	}
	return files, markers, nil
}
