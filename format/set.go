package format

import (
	"cmp"
	"io"
	"maps"
	"math"
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

// maxDistcpMetadata bounds the .metadata file read into memory.
const maxDistcpMetadata = 256 << 20

// CheckDistcpMetadata checks PyTorch distributed checkpoint shards against
// the .metadata beside them (read through meta, metaSize bytes), which
// records each item's shard (relative_path), offset and length:
// FileSystemWriter writes a shard's items back to back, so in each shard
// that sizes holds (by name relative to the metadata's directory, with its
// size) the items must lie end to end from byte 0 to the end of the file.
// A shard the metadata names that sizes lacks is not judged: other ranks'
// shards are in their own snapshots. A .metadata that is not PyTorch's (Paddle's), or that the interpreter
// cannot follow, checks nothing. A torn error wraps ErrTorn and comes
// with the shard's name.
func CheckDistcpMetadata(meta io.ReaderAt, metaSize int64, sizes map[string]int64) (string, error) {
	if metaSize > maxDistcpMetadata || metaSize == 0 {
		return "", nil
	}
	b := make([]byte, metaSize)
	if err := readFull(meta, b, 0); err != nil {
		return "", err
	}
	var vm pickleVM
	if _, _, err := vm.run(b); err != nil {
		return "", nil // torn or garbled: its own pickle check says so
	}
	type item struct{ off, n int64 }
	items := map[string][]item{}
	for _, st := range vm.states {
		rp, off, n := st.field("relative_path"), st.field("offset"), st.field("length")
		if rp == nil || off == nil || n == nil || rp.kind != pStr || off.kind != pInt || n.kind != pInt || off.i < 0 || n.i < 0 {
			continue
		}
		items[rp.s] = append(items[rp.s], item{off.i, n.i})
	}
	if len(items) == 0 {
		return "", nil
	}
	for _, shard := range slices.Sorted(maps.Keys(items)) {
		size, ok := sizes[shard]
		if !ok {
			continue
		}
		its := items[shard]
		slices.SortFunc(its, func(a, b item) int { return cmp.Compare(a.off, b.off) })
		end := int64(0)
		for _, it := range its {
			if it.n > math.MaxInt64-it.off {
				return shard, torn("distcp", "shard %s: its .metadata gives an item of %d bytes at byte %d", shard, it.n, it.off)
			}
			if it.off != end {
				return shard, torn("distcp", "shard %s: its .metadata puts an item at byte %d where the previous item ends at byte %d", shard, it.off, end)
			}
			end = it.off + it.n
		}
		if end != size {
			return shard, torn("distcp", "shard %s holds %d bytes; its .metadata says its %d items end at byte %d", shard, size, len(its), end)
		}
	}
	return "", nil
}

// CheckDistcpBeneath is CheckDistcpMetadata for the .metadata file metaRel
// (slash-separated) under dir, opened without following symlinks.
func CheckDistcpBeneath(dir, metaRel string, sizes map[string]int64) (string, error) {
	f, err := openBeneath(dir, metaRel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	return CheckDistcpMetadata(f, fi.Size(), sizes)
}
