package main

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/signals"
)

// commands are every subcommand with flags.
var commands = []string{"run", "sidecar", "restore", "ls", "verify", "prune", "doctor"}

// badStrings are values each string flag refuses. Every string flag of
// every command is here or in freeText (TestFlagTableComplete), so a new
// flag cannot escape TestValidateBadInput.
var badStrings = map[string][]string{
	"log-level":         {"loud"},
	"log-format":        {"xml"},
	"store":             {"foo://x", "file://relative/path", "s3://KEY:hunter2pw@bucket/x"},
	"s3-endpoint":       {"http://KEY:hunter2pw@minio:9000", "ftp://minio", "http://minio:9000/path", "::"},
	"s3-region":         {"us east 1"},
	"s3-bucket-lookup":  {"sideways"},
	"s3-ca-file":        {"/nonexistent/ca.pem", "/etc/passwd"},
	"upload-limit":      {"fast", "-5MB"},
	"stop-signals":      {"NOPE"},
	"stop-delivery":     {"sideways"},
	"rewrite":           {"TERM"},
	"preempt-exit-code": {"300", "x"},
	"restart":           {"sometimes"},
	"marker":            {"a/b"},
	"step-pattern":      {"(", "step"},
	"restore":           {"sometimes"},
	"restore-ranks":     {"some"},
	"exclude":           {"["},
	"verify-format":     {"strict"},
	"metrics-addr":      {"nohost", "localhost:"},
	"notices":           {"azure", "url:ftp://KEY:hunter2pw@host"},
	"notice-signal":     {"NOPE"},
	"memory-cgroup":     {"maybe"},
	"memory-reserve":    {"lots", "-5MiB"},
	"gpus":              {"abc", "/var/lib/kubelet/device-plugins"},
	"gpu-memory-limit":  {"lots", "1.5"},
	"gpu-memory-policy": {"explode"},
	"read-data-subset":  {"3/2", "x"},
	"verify-restore":    {"md5", "SHA256", "none"},
}

// freeText are the string flags every value of which is valid, and why.
var freeText = map[string]string{
	"termination-log": "any path: the file is written at exit, and a missing default (Kubernetes') is skipped",
	"dir":             "any path: it is created at start; what cannot be created is a runtime failure",
}

// badByKind are the values every flag of a kind refuses.
var badByKind = map[string][]string{
	"duration": {"-1s", "garbage"},
	"int":      {"-5", "x"},
	"bool":     {"maybe"},
}

// cmdFlags returns cmd's flags as the command builds them.
func cmdFlags(t *testing.T, cmd string) []*flag.Flag {
	t.Helper()
	var got *flag.FlagSet
	onNewFlagSet = func(fs *flag.FlagSet) {
		if got == nil {
			got = fs
		}
	}
	defer func() { onNewFlagSet = nil }()
	if code := run(context.Background(), []string{cmd, "-h"}, io.Discard, io.Discard); code != 0 || got == nil {
		t.Fatalf("lifeboat %s -h: exit %d", cmd, code)
	}
	var out []*flag.Flag
	got.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	return out
}

// flagKind is duration, int, bool or string: what the messages call the
// flag's kind, and durations that are not time.Duration values.
func flagKind(f *flag.Flag) string {
	switch unwrapValue(f.Value).(type) {
	case *positiveDuration, *coordInterval:
		return "duration"
	}
	return cmp.Or(kindOf(f.Value), "string")
}

// badValues are the values of f the test tries.
func badValues(f *flag.Flag) []string {
	if k := flagKind(f); k != "string" {
		return badByKind[k]
	}
	return badStrings[f.Name]
}

func TestFlagTableComplete(t *testing.T) {
	for _, cmd := range commands {
		for _, f := range cmdFlags(t, cmd) {
			if flagKind(f) != "string" {
				continue
			}
			_, free := freeText[f.Name]
			if len(badStrings[f.Name]) == 0 && !free {
				t.Errorf("lifeboat %s --%s: a string flag with no bad values in badStrings and no reason in freeText", cmd, f.Name)
			}
		}
	}
}

// hangLimit is how long a test waits before it calls lifeboat hung. It is a
// bound against hangs, far above any expected time, not a speed test.
const hangLimit = 60 * time.Second

// buildLifeboat builds this package into a binary as lifeboat ships
// (signals.LinkFlag) and returns its path; it is removed when t ends.
// The tests of the binary as users run it are in e2e/; this package's
// tests that start it need its flag sets as well.
func buildLifeboat(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lifeboat")
	if out, err := exec.Command("go", "build", "-ldflags", signals.LinkFlag, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// baseArgs are a command line of cmd that would start something and change
// the store or dir: the bad value must stop it before that.
func baseArgs(cmd, store, dir, ran string) (flags []string, rest []string) {
	s, d := "file://"+store, dir
	switch cmd {
	case "run":
		return []string{"--store", s, "--dir", d}, []string{"--", "touch", ran}
	case "sidecar", "restore":
		return []string{"--store", s, "--dir", d}, nil
	default:
		return []string{"--store", s}, nil
	}
}

// without drops flag name (and its value) from args.
func without(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--"+name {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// cleanEnv is the environment without LIFEBOAT_ and AWS_ variables.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LIFEBOAT_") && !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "MINIO_") {
			out = append(out, kv)
		}
	}
	return out
}

// flagRef finds the flags a text names.
var flagRef = regexp.MustCompile(`(?:^|[^-\w])--([a-z0-9][a-z0-9-]*[a-z0-9])`)

// allFlags is every flag of every command.
func allFlags(t *testing.T) map[string]bool {
	all := map[string]bool{}
	for _, cmd := range commands {
		for _, f := range cmdFlags(t, cmd) {
			all[f.Name] = true
		}
	}
	return all
}

// TestValidateBadInput runs every command with a bad value for every flag,
// as the flag and as its variable: exit 2, one line naming the flag and
// its variable, no secret, and nothing started or changed.
func TestValidateBadInput(t *testing.T) {
	lifeboatBin := buildLifeboat(t)
	real := allFlags(t)
	type tc struct {
		cmd, flag, value string
		env              bool
	}
	var cases []tc
	for _, cmd := range commands {
		for _, f := range cmdFlags(t, cmd) {
			for _, v := range badValues(f) {
				cases = append(cases, tc{cmd, f.Name, v, false}, tc{cmd, f.Name, v, true})
			}
		}
	}
	for _, c := range cases {
		via := "flag"
		if c.env {
			via = "env"
		}
		t.Run(c.cmd+"/"+c.flag+"/"+via+"/"+c.value, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			store, dir, ran := filepath.Join(root, "store"), filepath.Join(root, "dir"), filepath.Join(root, "ran")
			flags, rest := baseArgs(c.cmd, store, dir, ran)
			flags = without(flags, c.flag)
			env := cleanEnv()
			if c.env {
				env = append(env, envName(c.flag)+"="+c.value)
			} else {
				flags = append(flags, "--"+c.flag+"="+c.value)
			}
			ctx, cancel := context.WithTimeout(context.Background(), hangLimit) // against a hang only
			defer cancel()
			cmd := exec.CommandContext(ctx, lifeboatBin, append(append([]string{c.cmd}, flags...), rest...)...)
			cmd.Env = env
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			_ = cmd.Run()
			code := cmd.ProcessState.ExitCode()
			out := strings.TrimRight(stderr.String(), "\n")
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", code, out)
			}
			if lines := strings.Split(out, "\n"); len(lines) != 1 {
				t.Errorf("stderr has %d lines, want one:\n%s", len(lines), out)
			}
			if !strings.Contains(out, "--"+c.flag) || !strings.Contains(out, envName(c.flag)) {
				t.Errorf("stderr does not name --%s and %s:\n%s", c.flag, envName(c.flag), out)
			}
			for _, m := range flagRef.FindAllStringSubmatch(out, -1) {
				if !real[m[1]] {
					t.Errorf("stderr names --%s, which no command has:\n%s", m[1], out)
				}
			}
			if strings.Contains(out+stdout.String(), "hunter2pw") {
				t.Errorf("the output shows the password:\n%s", out)
			}
			if ents, _ := os.ReadDir(root); len(ents) > 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("started or changed something: %v were created", names)
			}
		})
	}
}

// TestFlagNamesInMessages: no string in the source that a user can see
// names a flag that no command has (--endpoint for --s3-endpoint).
func TestFlagNamesInMessages(t *testing.T) {
	real := allFlags(t)
	// Flags of other programs that lifeboat's messages and help name.
	foreign := map[string]string{
		"version":        "lifeboat's own, before a command",
		"help":           "lifeboat's own, before a command",
		"nproc-per-node": "paddle.distributed.launch's",
		"read-data":      "restic's check, named as the model of verify",
		"fork":           "unshare's",
		"pid":            "unshare's",
		"mount-proc":     "unshare's",
	}
	// The commands' files and every library package's (libraryFiles).
	paths, err := filepath.Glob("../*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	libraryFiles(t, func(_, path string) { paths = append(paths, path) })
	var bad []string
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		stringLiterals(t, p, func(line int, lit string) {
			for _, m := range flagRef.FindAllStringSubmatch(lit, -1) {
				if !real[m[1]] && foreign[m[1]] == "" {
					bad = append(bad, p+":"+strconv.Itoa(line)+": --"+m[1])
				}
			}
		})
	}
	sort.Strings(bad)
	bad = slices.Compact(bad)
	for _, b := range bad {
		t.Errorf("%s: no command has this flag", b)
	}
}
