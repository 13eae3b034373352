package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
)

// RemoveStaleRestores removes what restores into dir that never finished
// left behind (a restore killed by SIGKILL cannot clean up after itself):
// the top-level entries whose names start with the restore's temporary
// prefix. A restore in progress in another process would lose its files,
// so call it only when no other lifeboat restores into dir. It returns the
// names removed.
func RemoveStaleRestores(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var removed []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return removed, err
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}
