package checkpoint

import (
	"fmt"
	"strconv"
	"strings"
)

// Store layout (docs/FORMAT.md):
//
//	chunks/<first 2 hex>/<sha256 hex>                               file content, by hash
//	snapshots/<step, 20 digits>/rank-<r, 5>-of-<n, 5>.json          manifest, revision 0
//	snapshots/<step, 20 digits>/rank-<r, 5>-of-<n, 5>-rev-<k, 5>.json  revision k >= 1
//	snapshots/<step, 20 digits>-complete-of-<n, 5>-...json           completion record (record.go)
//
// Zero padding makes lexical List order numeric order: steps ascend, within
// a step ranks ascend, and a rank's revisions 1, 2, ... ascend. Revision 0
// sorts after them ('-' < '.'): readers take the highest number, never the
// last key listed.
const (
	chunksPrefix    = "chunks/"
	snapshotsPrefix = "snapshots/"
)

// MaxRevision is the highest revision of one rank's snapshot of a step.
const MaxRevision = 99999

func chunkKey(sum string) string { return chunksPrefix + sum[:2] + "/" + sum }

// stepPrefix is the folder of step's manifests: snapshots/<step>/.
func stepPrefix(step int64) string { return stepKeys(step) + "/" }

// stepKeys is the prefix of every key of step: its folder and, beside
// it, its completion records (record.go).
func stepKeys(step int64) string { return fmt.Sprintf("%s%020d", snapshotsPrefix, step) }

// parseStepFolder returns the step of a folder snapshots/<step>/, as a
// listing one level deep (storage.ListDirs) gives it.
func parseStepFolder(key string) (int64, bool) {
	rest, found := strings.CutPrefix(key, snapshotsPrefix)
	if !found || len(rest) != 21 || rest[20] != '/' {
		return 0, false
	}
	step, err := strconv.ParseInt(rest[:20], 10, 64)
	if err != nil || step < 0 || stepPrefix(step) != key {
		return 0, false
	}
	return step, true
}

// rankPrefix is the part every revision's key of the snapshot of t's step
// and rank, of its world size, shares, and no other key. A key names only
// Step, Rank and WorldSize of a target.
func rankPrefix(t Target) string {
	return fmt.Sprintf("%srank-%05d-of-%05d", stepPrefix(t.Step), t.Rank, t.WorldSize)
}

// manifestKey is the key of revision of t's manifest.
func manifestKey(t Target, revision int) string {
	if revision == 0 {
		return rankPrefix(t) + ".json"
	}
	return fmt.Sprintf("%s-rev-%05d.json", rankPrefix(t), revision)
}

// parseManifestKey is the inverse of manifestKey: t has the Step, Rank and
// WorldSize the key names. ok is false for any other key, which listings
// skip.
func parseManifestKey(key string) (t Target, revision int, ok bool) {
	rest, found := strings.CutPrefix(key, snapshotsPrefix)
	if !found || len(rest) < 21 || rest[20] != '/' {
		return Target{}, 0, false
	}
	step, err := strconv.ParseInt(rest[:20], 10, 64)
	if err != nil || step < 0 {
		return Target{}, 0, false
	}
	name := rest[21:]
	// rank-RRRRR-of-NNNNN.json or rank-RRRRR-of-NNNNN-rev-KKKKK.json
	const base = len("rank-00000-of-00000")
	if len(name) < base || !strings.HasPrefix(name, "rank-") || name[10:14] != "-of-" {
		return Target{}, 0, false
	}
	r, err1 := strconv.Atoi(name[5:10])
	n, err2 := strconv.Atoi(name[14:19])
	if err1 != nil || err2 != nil || n < 1 || n > MaxWorldSize || r < 0 || r >= n {
		return Target{}, 0, false
	}
	switch tail := name[base:]; {
	case tail == ".json":
	case len(tail) == len("-rev-00000.json") && strings.HasPrefix(tail, "-rev-") && strings.HasSuffix(tail, ".json"):
		k, err := strconv.Atoi(tail[5:10])
		if err != nil || k < 1 || k > MaxRevision {
			return Target{}, 0, false
		}
		revision = k
	default:
		return Target{}, 0, false
	}
	t = Target{Step: step, Rank: r, WorldSize: n}
	if manifestKey(t, revision) != key {
		return Target{}, 0, false
	}
	return t, revision, true
}

// parseChunkKey returns the hash in a chunk key; ok is false for other keys.
func parseChunkKey(key string) (sum string, ok bool) {
	rest, found := strings.CutPrefix(key, chunksPrefix)
	if !found || len(rest) != 3+64 || rest[2] != '/' {
		return "", false
	}
	sum = rest[3:]
	if !isHexSHA256(sum) || sum[:2] != rest[:2] {
		return "", false
	}
	return sum, true
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
