package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/signals"
)

// lifeboatBin is the lifeboat binary TestMain builds from ./cmd/lifeboat.
var lifeboatBin string

// cliFlags maps each subcommand the manifests use to its flags, read from
// the binary's --help.
var cliFlags map[string]map[string]bool

// boolFlags take no value on the command line.
var boolFlags = map[string]bool{"signal-child-only": true, "create-bucket": true}

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "lifeboat-deploy-test-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "deploy: make temp dir: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		lifeboatBin = filepath.Join(dir, "lifeboat")
		build := exec.Command("go", "build", "-ldflags", signals.LinkFlag, "-o", lifeboatBin, "github.com/lifeboat-project/lifeboat/cmd/lifeboat")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "deploy: build lifeboat: %v\n%s", err, out)
			return 1
		}
		cliFlags = map[string]map[string]bool{}
		for _, sub := range []string{"run", "sidecar", "restore"} {
			flags, err := helpFlags(sub)
			if err != nil {
				fmt.Fprintf(os.Stderr, "deploy: %v\n", err)
				return 1
			}
			cliFlags[sub] = flags
		}
		return m.Run()
	}())
}

var helpLine = regexp.MustCompile(`(?m)^  --([a-z0-9-]+)  \[(LIFEBOAT_[A-Z0-9_]+)\]`)

// helpFlags runs `lifeboat SUB --help` and returns its flag names.
func helpFlags(sub string) (map[string]bool, error) {
	out, err := exec.Command(lifeboatBin, sub, "--help").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("lifeboat %s --help: %v\n%s", sub, err, out)
	}
	flags := map[string]bool{}
	for _, m := range helpLine.FindAllStringSubmatch(string(out), -1) {
		if want := envTwin(m[1]); m[2] != want {
			return nil, fmt.Errorf("lifeboat %s --help: flag --%s has variable %s, want %s", sub, m[1], m[2], want)
		}
		flags[m[1]] = true
	}
	if len(flags) < 3 {
		return nil, fmt.Errorf("lifeboat %s --help: found %d flags in:\n%s", sub, len(flags), out)
	}
	return flags, nil
}

// envTwin is a flag's environment variable: --s3-endpoint is
// LIFEBOAT_S3_ENDPOINT.
func envTwin(flag string) string {
	return "LIFEBOAT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// flagOfEnv is the reverse of envTwin, "" for a name without the prefix.
func flagOfEnv(name string) string {
	rest, ok := strings.CutPrefix(name, "LIFEBOAT_")
	if !ok {
		return ""
	}
	return strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
}

func TestHelpFlagsFound(t *testing.T) {
	for sub, want := range map[string][]string{
		"run":     {"grace", "store", "dir", "keep", "log-format", "restore", "marker"},
		"sidecar": {"grace", "store", "dir", "flush-wait"},
		"restore": {"store", "dir", "step"},
	} {
		for _, f := range want {
			if !cliFlags[sub][f] {
				t.Errorf("lifeboat %s --help does not list --%s; the manifests' checks rely on it", sub, f)
			}
		}
	}
}
