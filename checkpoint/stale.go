package checkpoint

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/lifeboat-project/lifeboat/internal/beneath"
)

// RemoveStaleRestores removes what restores into dir that never finished
// left behind (a restore killed by SIGKILL cannot clean up after itself):
// the top-level entries whose names start with the restore's temporary
// prefix, through dir's descriptor, never following a link (a link of
// that name is removed, not what it points to). A restore in progress in
// another process would lose its files, so call it only when no other
// lifeboat restores into dir. It returns the names removed.
func RemoveStaleRestores(dir string) ([]string, error) {
	root, err := beneath.Open(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer root.Close()
	ents, err := root.ReadDir("")
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		if err := root.RemoveAll(e.Name()); err != nil {
			return removed, err
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}
