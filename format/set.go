package format

import (
	"path"
	"slices"
	"strings"
)

// checkSet requires a *.metadata file beside every *.distcp shard: Paddle's
// save_state_dict writes the shards and the metadata that maps tensors to
// them, and shards without it cannot be loaded.
func checkSet(paths []string) error {
	shards := make(map[string]bool)
	meta := make(map[string]bool)
	for _, p := range paths {
		switch strings.ToLower(path.Ext(p)) {
		case ".distcp":
			shards[path.Dir(p)] = true
		case ".metadata":
			meta[path.Dir(p)] = true
		}
	}
	var missing []string
	for dir := range shards {
		if !meta[dir] {
			missing = append(missing, dir)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	if len(missing) == 1 {
		return torn("checkpoint", "directory %q holds *.distcp shards but no *.metadata file", missing[0])
	}
	return torn("checkpoint", "directories %q hold *.distcp shards but no *.metadata file", missing)
}
