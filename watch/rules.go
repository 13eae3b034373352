package watch

import (
	"fmt"
	"path"
	"strings"

	"github.com/lifeboat-project/lifeboat/setting"
)

// DefaultExclude is Config.Exclude when it is nil: logs, temporary and
// partial files, editor swap files, locks, TensorBoard event files and NFS's
// silly-renamed files, which trainers and their tools keep next to
// checkpoints.
var DefaultExclude = []string{
	"*.log", "*.log.[0-9]*", "*.tmp", "*.temp", "*.swp", "*.part", "*.partial",
	"*.lock", "*.pid", "nohup.out", "events.out.tfevents.*", ".nfs*", "*~",
}

// checkpointExtensions are the file extensions that mark a group of files
// as a checkpoint (whichever check their content gets).
var checkpointExtensions = []string{
	".pdparams", ".pkl", ".pickle", ".distcp", ".metadata", ".pt", ".pth", ".npz", ".zip", ".safetensors",
	".pdmodel", ".pdiparams", ".pdiparams.info", ".pdopt", ".npy", ".bin", ".ckpt",
	".h5", ".onnx", ".pb", ".msgpack", ".params",
}

// validExclude checks each pattern's syntax.
func validExclude(patterns []string) error {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("watch: exclude pattern %q: %v", p, err)
		}
	}
	return nil
}

// excluded reports whether the file at rel (slash-separated, relative to
// the watched directory) matches one of patterns: against its base name, or
// against rel for a pattern that holds a '/'.
func excluded(patterns []string, rel string) bool {
	base := path.Base(rel)
	for _, p := range patterns {
		target := base
		if strings.Contains(p, "/") {
			target = rel
		}
		if ok, _ := path.Match(p, target); ok {
			return true
		}
	}
	return false
}

// checkpointFile reports whether a file's name announces a checkpoint
// format.
func checkpointFile(name string) bool {
	lower := strings.ToLower(path.Base(name))
	for _, ext := range checkpointExtensions {
		if strings.HasSuffix(lower, ext) {
			return true
		}
	}
	return false
}

// The events logged for candidates that are not checkpoints.
const (
	eventNotACheckpoint = "checkpoint.not_a_checkpoint"
	eventUnmarked       = "checkpoint.unmarked_ignored"
)

// rejection says why c is not a checkpoint under the rules of the package
// comment: the event to log and why (naming MarkerOnly as a
// setting.Name), or "" and the zero Text when it is one.
func (w *Watcher) rejection(c *Candidate) (event string, why setting.Text) {
	if c.Marker {
		return "", setting.Text{}
	}
	switch {
	case w.cfg.MarkerOnly:
		return eventUnmarked, setting.Textf("%s", setting.MarkerOnly)
	case w.markerSeen:
		return eventUnmarked, setting.Textf("a marker was seen; only marked directories are checkpoints")
	}
	// Numbered subdirectories always count; top-level files and unnumbered
	// subdirectories need a file of a checkpoint format.
	if c.Dir != "" && c.HasStep {
		return "", setting.Text{}
	}
	for _, f := range c.Files {
		if checkpointFile(f.Path) {
			return "", setting.Text{}
		}
	}
	if c.Dir == "" {
		return eventNotACheckpoint, setting.Textf("files at the top of the directory are a checkpoint only when one has a checkpoint format (.pdparams, .pt, .safetensors, .npy, ...)")
	}
	return eventNotACheckpoint, setting.Textf("a directory without a step in its name is a checkpoint only when one of its files has a checkpoint format (.pdparams, .pt, .safetensors, .npy, ...)")
}
