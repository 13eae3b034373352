package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/signals"
)

// paddleBase is images/paddle's default base image: a tag PaddlePaddle's
// Docker install page lists, named without a registry host (Docker Hub).
const paddleBase = "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"

// The lifeboat images of the two build flavours (README, "Build
// flavours"), as scripts/docker-build.sh tags them, and their targets in
// ../Dockerfile.
const (
	staticImage = "lifeboat:dev"
	gpuImage    = "lifeboat:dev-gpu"
)

// dockerfile is the part of a Dockerfile these tests check.
type dockerfile struct {
	path   string
	args   map[string]string // global ARGs (before the first FROM) and their defaults
	stages []*stage
}

// stage is one FROM ... section.
type stage struct {
	line       int
	from       string // the image, with the global ARGs expanded
	name       string // AS name, or ""
	copies     []copyInstr
	env        map[string]string // ENV values, expanded; the base image's are unknown
	workdir    string
	entrypoint []string // nil when the stage has none
	cmd        []string
	runs       []string // RUN instructions, as written
}

type copyInstr struct {
	line int
	from string // --from, or "" for the build context
	srcs []string
	dst  string
}

// final is the stage the image is made of.
func (d *dockerfile) final() *stage { return d.stages[len(d.stages)-1] }

// stageNamed returns the stage called name, or nil.
func (d *dockerfile) stageNamed(name string) *stage {
	for _, s := range d.stages {
		if s.name == name {
			return s
		}
	}
	return nil
}

// copiedTo returns the COPY of the final stage whose destination is dst
// (a file path, or a directory ending in /), or nil.
func (s *stage) copiedTo(dst string) *copyInstr {
	for i, c := range s.copies {
		if c.dst == dst || (strings.HasSuffix(c.dst, "/") && len(c.srcs) == 1 && c.dst+path.Base(c.srcs[0]) == dst) {
			return &s.copies[i]
		}
	}
	return nil
}

// knownInstructions are the Dockerfile instructions; anything else is a
// typo this parser refuses.
var knownInstructions = map[string]bool{
	"FROM": true, "ARG": true, "ENV": true, "COPY": true, "ADD": true, "RUN": true, "WORKDIR": true,
	"ENTRYPOINT": true, "CMD": true, "LABEL": true, "USER": true, "EXPOSE": true, "VOLUME": true,
	"SHELL": true, "STOPSIGNAL": true, "HEALTHCHECK": true, "ONBUILD": true,
}

// parseDockerfile reads file strictly: upper-case known instructions only,
// ENTRYPOINT and CMD only as JSON arrays of strings, ENV only as KEY=VALUE.
func parseDockerfile(file string) (*dockerfile, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &dockerfile{path: file, args: map[string]string{}}
	var logical strings.Builder
	start, lineNo := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && logical.Len() == 0) {
			continue // comments (also between continuation lines) and blank lines
		}
		if logical.Len() == 0 {
			start = lineNo
		}
		if cont, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`); ok {
			logical.WriteString(cont)
			logical.WriteString(" ")
			continue
		}
		logical.WriteString(line)
		if err := d.instruction(start, strings.TrimSpace(logical.String())); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, start, err)
		}
		logical.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if logical.Len() > 0 {
		return nil, fmt.Errorf("%s:%d: the file ends inside a continued line", file, start)
	}
	if len(d.stages) == 0 {
		return nil, fmt.Errorf("%s: no FROM", file)
	}
	return d, nil
}

func (d *dockerfile) instruction(line int, text string) error {
	word, rest, _ := strings.Cut(text, " ")
	rest = strings.TrimSpace(rest)
	if !knownInstructions[strings.ToUpper(word)] {
		return fmt.Errorf("unknown instruction %q", word)
	}
	if word != strings.ToUpper(word) {
		return fmt.Errorf("instruction %q: write it upper-case", word)
	}
	if word != "FROM" && word != "ARG" && len(d.stages) == 0 {
		return fmt.Errorf("%s before the first FROM", word)
	}
	var s *stage
	if len(d.stages) > 0 {
		s = d.final()
	}
	switch word {
	case "ARG":
		name, def, _ := strings.Cut(rest, "=")
		if name == "" || strings.ContainsAny(name, " \t") {
			return fmt.Errorf("ARG %q: want NAME or NAME=default", rest)
		}
		if s == nil {
			d.args[name] = unquote(def)
		}
	case "FROM":
		fields := strings.Fields(rest)
		if len(fields) != 1 && !(len(fields) == 3 && strings.EqualFold(fields[1], "AS")) {
			return fmt.Errorf("FROM %q: want IMAGE [AS NAME]", rest)
		}
		ns := &stage{line: line, from: expand(fields[0], d.args), env: map[string]string{}}
		if len(fields) == 3 {
			ns.name = fields[2]
		}
		d.stages = append(d.stages, ns)
	case "ENV":
		pairs, err := envPairs(rest)
		if err != nil {
			return err
		}
		vars := map[string]string{}
		for k, v := range d.args {
			vars[k] = v
		}
		for k, v := range s.env {
			vars[k] = v
		}
		for _, kv := range pairs {
			s.env[kv[0]] = expandWith(kv[1], func(n string) (string, bool) { v, ok := vars[n]; return v, ok })
		}
	case "COPY", "ADD":
		c := copyInstr{line: line}
		fields := strings.Fields(rest)
		for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
			if from, ok := strings.CutPrefix(fields[0], "--from="); ok {
				c.from = from
			}
			fields = fields[1:]
		}
		if len(fields) < 2 || strings.HasPrefix(fields[0], "[") {
			return fmt.Errorf("%s %q: want [--from=STAGE] SRC... DST", word, rest)
		}
		c.srcs, c.dst = fields[:len(fields)-1], fields[len(fields)-1]
		s.copies = append(s.copies, c)
	case "RUN":
		s.runs = append(s.runs, rest)
	case "WORKDIR":
		s.workdir = rest
	case "ENTRYPOINT", "CMD":
		var argv []string
		dec := json.NewDecoder(strings.NewReader(rest))
		if err := dec.Decode(&argv); err != nil || dec.More() || len(argv) == 0 {
			return fmt.Errorf("%s %s: want the exec form, a non-empty JSON array of strings (the shell form would make /bin/sh PID 1): %v", word, rest, err)
		}
		if word == "ENTRYPOINT" {
			s.entrypoint = argv
			s.cmd = nil // as Docker does: a new ENTRYPOINT resets CMD
		} else {
			s.cmd = argv
		}
	}
	return nil
}

// envPairs splits ENV's arguments into KEY=VALUE pairs; values may be
// double-quoted. The legacy "ENV KEY VALUE" form is refused.
func envPairs(s string) ([][2]string, error) {
	var pairs [][2]string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || strings.ContainsAny(s[:eq], " \t\"") {
			return nil, fmt.Errorf("ENV %q: want KEY=VALUE pairs", s)
		}
		key, rest := s[:eq], s[eq+1:]
		var val string
		if strings.HasPrefix(rest, `"`) {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("ENV %s: unterminated quote", key)
			}
			val, s = rest[1:1+end], rest[2+end:]
		} else {
			sp := strings.IndexAny(rest, " \t")
			if sp < 0 {
				sp = len(rest)
			}
			val, s = rest[:sp], rest[sp:]
		}
		pairs = append(pairs, [2]string{key, val})
	}
	return pairs, nil
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

// expand substitutes the build ARGs in s.
func expand(s string, args map[string]string) string {
	return expandWith(s, func(n string) (string, bool) { v, ok := args[n]; return v, ok })
}

// expandWith substitutes $NAME, ${NAME}, ${NAME:-word} and ${NAME:+word}
// as Docker does; a variable the lookup does not know (one of the base
// image's) is empty.
func expandWith(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		if s[i+1] == '{' {
			depth, j := 1, i+2
			for ; j < len(s) && depth > 0; j++ {
				switch s[j] {
				case '{':
					depth++
				case '}':
					depth--
				}
			}
			inner := s[i+2 : j-1]
			name, op, word := inner, "", ""
			if k := strings.Index(inner, ":"); k >= 0 {
				name, op, word = inner[:k], inner[k:k+2], inner[k+2:]
			}
			v, _ := lookup(name)
			switch op {
			case ":-":
				if v == "" {
					v = expandWith(word, lookup)
				}
			case ":+":
				if v != "" {
					v = expandWith(word, lookup)
				}
			}
			b.WriteString(v)
			i = j - 1
			continue
		}
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		v, _ := lookup(s[i+1 : j])
		b.WriteString(v)
		i = j - 1
	}
	return b.String()
}

// image is what a container gets from an image: its ENTRYPOINT, CMD and
// the environment its Dockerfile sets.
type image struct {
	dockerfile string
	entrypoint []string
	cmd        []string
	env        map[string]string
}

// imageFiles maps the image names the manifests use to the Dockerfiles
// that build them.
var imageFiles = map[string]string{
	staticImage:            "../Dockerfile",
	gpuImage:               "../Dockerfile",
	"lifeboat-example:dev": "../images/example/Dockerfile",
	// The Paddle image as images/paddle/Dockerfile's comment names it.
	"my-paddle-lifeboat:2.6": "../images/paddle/Dockerfile",
}

// imageTargets are the --target stages of the images that are not their
// Dockerfile's last stage.
var imageTargets = map[string]string{
	staticImage: "static",
	gpuImage:    "gpu",
}

// loadImage parses the Dockerfile behind ref.
func loadImage(ref string) (*image, error) {
	file, ok := imageFiles[ref]
	if !ok {
		return nil, fmt.Errorf("image %q is not built in this repository; add it and its Dockerfile to imageFiles in deploy/dockerfile_test.go", ref)
	}
	d, err := parseDockerfile(file)
	if err != nil {
		return nil, err
	}
	s := d.final()
	if target, ok := imageTargets[ref]; ok {
		if s = d.stageNamed(target); s == nil {
			return nil, fmt.Errorf("%s: no stage %q, the target that builds %s", file, target, ref)
		}
	}
	return &image{dockerfile: file, entrypoint: s.entrypoint, cmd: s.cmd, env: s.env}, nil
}

// imageWant is what one derived trainer image must hold.
type imageWant struct {
	file   string
	args   map[string]string // global ARG defaults, exactly
	copies map[string]string // destination -> source in the build context (or STAGE:/path)
}

func TestDockerfiles(t *testing.T) {
	common := map[string]string{
		"/usr/local/bin/lifeboat":          "lifeboat:/lifeboat",
		"/opt/lifeboat/python/lifeboat.py": "images/lifeboat.py",
	}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, tc := range []imageWant{
		{
			file:   "../images/paddle/Dockerfile",
			args:   map[string]string{"BASE": paddleBase, "LIFEBOAT_IMAGE": gpuImage},
			copies: common,
		},
		{
			file:   "../images/example/Dockerfile",
			args:   map[string]string{"BASE": "python:3.11-slim", "LIFEBOAT_IMAGE": gpuImage},
			copies: with(map[string]string{"/workspace/train.py": "images/example/train.py"}),
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			d, err := parseDockerfile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			checkTrainerImage(t, d, tc)
		})
	}
}

func checkTrainerImage(t *testing.T, d *dockerfile, want imageWant) {
	t.Helper()
	if !reflect.DeepEqual(d.args, want.args) {
		t.Errorf("%s: global ARGs are %v, want %v", d.path, d.args, want.args)
	}
	lb := d.stageNamed("lifeboat")
	if lb == nil || lb.from != want.args["LIFEBOAT_IMAGE"] {
		t.Errorf("%s: want a stage `FROM ${LIFEBOAT_IMAGE} AS lifeboat` (COPY --from cannot take an ARG), got %+v", d.path, lb)
	}
	fin := d.final()
	if fin.from != want.args["BASE"] || len(d.stages) != 2 {
		t.Errorf("%s: want two stages, the last `FROM ${BASE}`; the last is FROM %s (%d stages)", d.path, fin.from, len(d.stages))
	}
	// The lifeboat image really holds /lifeboat.
	root, err := parseDockerfile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if target := root.stageNamed(imageTargets[want.args["LIFEBOAT_IMAGE"]]); target == nil || target.copiedTo("/lifeboat") == nil {
		t.Errorf("../Dockerfile: no target stage that makes /lifeboat for %s, which %s copies", want.args["LIFEBOAT_IMAGE"], d.path)
	}
	for dst, src := range want.copies {
		c := fin.copiedTo(dst)
		if c == nil {
			t.Errorf("%s: nothing is copied to %s (want %s)", d.path, dst, src)
			continue
		}
		got := strings.Join(c.srcs, " ")
		if c.from != "" {
			got = c.from + ":" + got
		}
		if got != src {
			t.Errorf("%s:%d: %s is copied from %s, want %s", d.path, c.line, dst, got, src)
		}
	}
	for _, c := range fin.copies {
		if c.from != "" {
			if d.stageNamed(c.from) == nil {
				t.Errorf("%s:%d: COPY --from=%s names no stage of this file", d.path, c.line, c.from)
			}
			continue
		}
		for _, src := range c.srcs {
			if _, err := os.Stat(filepath.Join("..", src)); err != nil {
				t.Errorf("%s:%d: COPY source %s is not in the build context (the repository root): %v", d.path, c.line, src, err)
			}
		}
	}
	if want := []string{"/usr/local/bin/lifeboat", "run", "--"}; !reflect.DeepEqual(fin.entrypoint, want) {
		t.Errorf("%s: ENTRYPOINT is %q, want %q", d.path, fin.entrypoint, want)
	}
	if want := []string{"python", "train.py"}; !reflect.DeepEqual(fin.cmd, want) {
		t.Errorf("%s: CMD is %q, want %q", d.path, fin.cmd, want)
	}
	if fin.workdir == "" || !path.IsAbs(fin.workdir) {
		t.Errorf("%s: WORKDIR is %q; CMD runs train.py relative to it, so set an absolute one", d.path, fin.workdir)
	}
	if first, _, _ := strings.Cut(fin.env["PYTHONPATH"], ":"); first != "/opt/lifeboat/python" {
		t.Errorf("%s: PYTHONPATH is %q; it must start with /opt/lifeboat/python, where lifeboat.py is copied", d.path, fin.env["PYTHONPATH"])
	}
	checkLifeboatEnv(t, d.path, fin.env)
}

// checkLifeboatEnv checks an image's LIFEBOAT_* defaults: each is a flag of
// lifeboat run, and the ones a platform must set have sound values.
func checkLifeboatEnv(t *testing.T, where string, env map[string]string) {
	t.Helper()
	for k := range env {
		if f := flagOfEnv(k); f != "" && !cliFlags["run"][f] {
			t.Errorf("%s: ENV %s is no flag of lifeboat run (lifeboat run --help lists them)", where, k)
		}
	}
	checks := []struct {
		name  string
		check func(string) error
	}{
		{"LIFEBOAT_DIR", func(v string) error {
			if v != "/ckpt" {
				return fmt.Errorf("want /ckpt, the mount path the manifests use")
			}
			return nil
		}},
		{"LIFEBOAT_GRACE", func(v string) error {
			g, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			if g != 30*time.Second {
				return fmt.Errorf("want 30s, Kubernetes' default terminationGracePeriodSeconds, so a pod that sets neither is right")
			}
			return nil
		}},
		{"LIFEBOAT_LOG_FORMAT", func(v string) error {
			if v != "json" {
				return fmt.Errorf("want json for the cluster's log pipeline")
			}
			return nil
		}},
		{"LIFEBOAT_KEEP", func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("want a positive number of checkpoints to keep")
			}
			return nil
		}},
	}
	for _, c := range checks {
		v, ok := env[c.name]
		if !ok {
			t.Errorf("%s: no ENV %s", where, c.name)
			continue
		}
		if err := c.check(v); err != nil {
			t.Errorf("%s: ENV %s=%q: %v", where, c.name, v, err)
		}
	}
}

// glibcOf is the glibc of the images GLIBC_IMAGE may default to. The gpu
// flavour needs at run time the newest glibc symbol version it was linked
// against: linked against glibc 2.34 or newer it needs 2.34 (the release
// that moved libpthread into libc), so it is built on an older one, no
// newer than Ubuntu 20.04's 2.31 (on Debian bullseye it needs only
// GLIBC_2.3.3).
var glibcOf = map[string]string{
	"debian:bullseye-slim": "2.31",
	"debian:bullseye":      "2.31",
	"ubuntu:20.04":         "2.31",
}

// TestBuildFlavours checks ../Dockerfile's two flavours. Target static is
// the last stage (what a plain `docker build` makes), FROM scratch, with a
// binary built with CGO_ENABLED=0; target gpu holds a binary built with
// cgo on GLIBC_IMAGE and runs on that image. Each binary is built once,
// with signals.LinkFlag. The trainer images take the gpu flavour.
func TestBuildFlavours(t *testing.T) {
	d, err := parseDockerfile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	glibcImage := d.args["GLIBC_IMAGE"]
	if _, ok := glibcOf[glibcImage]; !ok {
		t.Errorf("%s: ARG GLIBC_IMAGE=%q is no image known to have glibc 2.31 or older (%v); a gpu binary linked against a newer glibc does not start on an older one", d.path, glibcImage, glibcOf)
	}
	if fin := d.final(); fin.name != "static" {
		t.Errorf("%s: the last stage (a plain docker build, %s) is %q, want static", d.path, staticImage, fin.name)
	}
	for _, tc := range []struct{ target, build, buildFrom, from, cgo string }{
		{"static", "build-static", d.args["GO_IMAGE"], "scratch", "0"},
		{"gpu", "build-gpu", glibcImage, glibcImage, "1"},
	} {
		s := d.stageNamed(tc.target)
		if s == nil {
			t.Errorf("%s: no stage %q (docker build --target %s)", d.path, tc.target, tc.target)
			continue
		}
		if s.from != tc.from {
			t.Errorf("%s:%d: target %s is FROM %s, want %s", d.path, s.line, tc.target, s.from, tc.from)
		}
		if c := s.copiedTo("/lifeboat"); c == nil || c.from != tc.build || strings.Join(c.srcs, " ") != "/out/lifeboat" {
			t.Errorf("%s:%d: target %s must COPY --from=%s /out/lifeboat /lifeboat, got %+v", d.path, s.line, tc.target, tc.build, c)
		}
		if want := []string{"/lifeboat"}; !reflect.DeepEqual(s.entrypoint, want) {
			t.Errorf("%s:%d: target %s has ENTRYPOINT %q, want %q", d.path, s.line, tc.target, s.entrypoint, want)
		}
		b := d.stageNamed(tc.build)
		if b == nil {
			t.Errorf("%s: no stage %q", d.path, tc.build)
			continue
		}
		if b.from != tc.buildFrom {
			t.Errorf("%s:%d: stage %s is FROM %s, want %s", d.path, b.line, tc.build, b.from, tc.buildFrom)
		}
		if b.env["CGO_ENABLED"] != tc.cgo {
			t.Errorf("%s:%d: stage %s sets CGO_ENABLED=%q, want %s for the %s flavour", d.path, b.line, tc.build, b.env["CGO_ENABLED"], tc.cgo, tc.target)
		}
		var builds []string
		for _, r := range b.runs {
			if strings.Contains(r, "go build") {
				builds = append(builds, r)
			}
		}
		if len(builds) != 1 {
			t.Errorf("%s: stage %s runs go build %d times, want once", d.path, tc.build, len(builds))
			continue
		}
		if !strings.Contains(builds[0], signals.LinkFlag) || !strings.HasSuffix(builds[0], "-o /out/lifeboat ./cmd/lifeboat") {
			t.Errorf("%s: stage %s builds %q; want ./cmd/lifeboat into /out/lifeboat with -ldflags holding signals.LinkFlag %q", d.path, tc.build, builds[0], signals.LinkFlag)
		}
	}
	for _, f := range []string{"../images/paddle/Dockerfile", "../images/example/Dockerfile", "../images/e2e/Dockerfile"} {
		td, err := parseDockerfile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := td.args["LIFEBOAT_IMAGE"]; got != gpuImage {
			t.Errorf("%s: ARG LIFEBOAT_IMAGE=%s, want the gpu flavour %s (NVML checks in a glibc image)", f, got, gpuImage)
		}
	}
}

func TestParseDockerfileRejects(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"shell-form entrypoint", "FROM x\nENTRYPOINT /usr/local/bin/lifeboat run --\n", "exec form"},
		{"trailing text after the array", "FROM x\nCMD [\"python\"] x\n", "exec form"},
		{"non-string element", "FROM x\nCMD [\"python\", 1]\n", "exec form"},
		{"empty array", "FROM x\nENTRYPOINT []\n", "exec form"},
		{"typo", "FROM x\nENTRYPIONT [\"a\"]\n", "unknown instruction"},
		{"lower case", "FROM x\nenv A=1\n", "upper-case"},
		{"legacy env", "FROM x\nENV A 1\n", "KEY=VALUE"},
		{"before from", "ENV A=1\nFROM x\n", "before the first FROM"},
		{"dangling continuation", "FROM x\nENV A=1 \\\n", "ends inside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "Dockerfile")
			if err := os.WriteFile(f, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := parseDockerfile(f)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseDockerfile(%q) = %v, want an error containing %q", tc.text, err, tc.want)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "E": ""}
	for in, want := range map[string]string{
		"/x${A:+:${A}}": "/x:a",
		"/x${E:+:${E}}": "/x",
		"/x${U:+:${U}}": "/x",
		"${U:-d}/$A/y":  "d/a/y",
		"$A$A":          "aa",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
