package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const composeFile = "compose/compose.yaml"

// composeProject is the part of the Compose specification compose.yaml
// may use. Anything else is an unknown field and fails the decode, so a
// misspelt key (stop_grace_periode, depends-on) cannot go unnoticed. Only
// the unambiguous forms are accepted: command and test as lists,
// environment as a map of strings, volumes and ports in the short syntax.
type composeProject struct {
	Name     string                     `json:"name"`
	Services map[string]*composeService `json:"services"`
	Volumes  map[string]*composeVolume  `json:"volumes"`
}

type composeService struct {
	Image           string                       `json:"image"`
	Build           *composeBuild                `json:"build"`
	Entrypoint      []string                     `json:"entrypoint"`
	Command         []string                     `json:"command"`
	Environment     map[string]string            `json:"environment"`
	Ports           []string                     `json:"ports"`
	Volumes         []string                     `json:"volumes"`
	Tmpfs           []string                     `json:"tmpfs"`
	Healthcheck     *composeHealthcheck          `json:"healthcheck"`
	DependsOn       map[string]composeDependency `json:"depends_on"`
	StopGracePeriod string                       `json:"stop_grace_period"`
	StopSignal      string                       `json:"stop_signal"`
	Restart         string                       `json:"restart"`
}

type composeBuild struct {
	Context    string            `json:"context"`
	Dockerfile string            `json:"dockerfile"`
	Args       map[string]string `json:"args"`
}

type composeHealthcheck struct {
	Test        []string `json:"test"`
	Interval    string   `json:"interval"`
	Timeout     string   `json:"timeout"`
	Retries     int      `json:"retries"`
	StartPeriod string   `json:"start_period"`
}

type composeDependency struct {
	Condition string `json:"condition"`
}

// composeVolume is a top-level named volume; `name:` with no value (null)
// is the usual declaration.
type composeVolume struct {
	Driver string `json:"driver"`
}

// decodeCompose decodes a Compose file strictly: duplicate keys, unknown
// fields, keys in the wrong case, wrong types and trailing data are errors.
func decodeCompose(file string, b []byte) (*composeProject, error) {
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var p composeProject
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: data after the project", file)
	}
	var raw any
	if err := json.Unmarshal(j, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := exactKeys(raw, reflect.TypeOf(p), "compose"); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(p.Services) == 0 {
		return nil, fmt.Errorf("%s: no services", file)
	}
	return &p, nil
}

func loadCompose(t *testing.T) *composeProject {
	t.Helper()
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodeCompose(composeFile, b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return p
}

// composeLifeboat is a service that runs `lifeboat run`, with its
// settings resolved as lifeboat resolves them: the service's environment,
// else the image's ENV (an empty value counts as unset).
type composeLifeboat struct {
	name string
	svc  *composeService
	env  map[string]string
}

func (l *composeLifeboat) value(flag string) (string, bool) {
	v := l.env[envTwin(flag)]
	return v, v != ""
}

// composeTrainer finds the one service whose image runs `lifeboat run`.
func composeTrainer(p *composeProject) (*composeLifeboat, error) {
	var found []*composeLifeboat
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		s := p.Services[name]
		if s.Image == "" || strings.HasPrefix(s.Image, "minio/") {
			continue
		}
		img, err := loadImage(s.Image)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", name, err)
		}
		if s.Build != nil {
			df := filepath.Join(filepath.Dir(composeFile), s.Build.Context, s.Build.Dockerfile)
			if filepath.Clean(df) != filepath.Clean(img.dockerfile) {
				return nil, fmt.Errorf("service %s builds %s, but image %s is built from %s", name, df, s.Image, img.dockerfile)
			}
		}
		argv := slices.Concat(img.entrypoint, img.cmd)
		if s.Entrypoint != nil {
			argv = slices.Concat(s.Entrypoint, s.Command)
		} else if s.Command != nil {
			argv = slices.Concat(img.entrypoint, s.Command)
		}
		if len(argv) < 3 || path.Base(argv[0]) != "lifeboat" || argv[1] != "run" {
			continue
		}
		env := map[string]string{}
		for k, v := range img.env {
			env[k] = v
		}
		for k, v := range s.Environment {
			env[k] = v
		}
		found = append(found, &composeLifeboat{name: name, svc: s, env: env})
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d services run `lifeboat run` as their ENTRYPOINT, want exactly one, the trainer", len(found))
	}
	return found[0], nil
}

// minioService returns the service that runs the MinIO server and the
// port its S3 API listens on.
func minioService(p *composeProject, name string) (*composeService, string, error) {
	s := p.Services[name]
	if s == nil {
		return nil, "", fmt.Errorf("no service %q", name)
	}
	if !strings.HasPrefix(s.Image, "minio/minio") {
		return nil, "", fmt.Errorf("service %s runs image %q, not minio/minio", name, s.Image)
	}
	if len(s.Command) < 2 || s.Command[0] != "server" {
		return nil, "", fmt.Errorf("service %s: command %q is not `server DIR ...`", name, s.Command)
	}
	port := "9000"
	for i, a := range s.Command {
		if a == "--address" && i+1 < len(s.Command) {
			_, port, _ = net.SplitHostPort(s.Command[i+1])
		}
	}
	return s, port, nil
}

// minioDataDir is the directory `server DIR` keeps its data in.
func minioDataDir(s *composeService) string {
	for i := 1; i < len(s.Command); i++ {
		a := s.Command[i]
		if strings.HasPrefix(a, "--") {
			i++ // every server flag compose.yaml may use takes a value
			continue
		}
		return a
	}
	return ""
}

// mountSource returns the source (volume name or host path) that s mounts
// at dir, from the short syntax SOURCE:TARGET[:MODE], or from tmpfs.
func mountSource(s *composeService, dir string) (string, bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && path.Clean(parts[1]) == path.Clean(dir) {
			return parts[0], true
		}
	}
	for _, v := range s.Tmpfs {
		if target, _, _ := strings.Cut(v, ":"); path.Clean(target) == path.Clean(dir) {
			return "tmpfs", true
		}
	}
	return "", false
}

// composeChecks are the cross-reference checks run on compose.yaml.
var composeChecks = []struct {
	name  string
	check func(p *composeProject) error
}{
	{"LIFEBOAT_ variables are flags of lifeboat run", func(p *composeProject) error {
		tr, err := composeTrainer(p)
		if err != nil {
			return err
		}
		for k := range tr.svc.Environment {
			if f := flagOfEnv(k); f != "" && !cliFlags["run"][f] {
				return fmt.Errorf("service %s: %s is no flag of lifeboat run (see lifeboat run --help)", tr.name, k)
			}
		}
		return nil
	}},
	{"lifeboat is the trainer's ENTRYPOINT", func(p *composeProject) error {
		tr, err := composeTrainer(p)
		if err != nil {
			return err
		}
		if tr.svc.Entrypoint != nil {
			return fmt.Errorf("service %s sets entrypoint %q; leave it to the image's (lifeboat run --) and put the trainer in command", tr.name, tr.svc.Entrypoint)
		}
		return nil
	}},
	{"stop_grace_period matches lifeboat's grace", func(p *composeProject) error {
		tr, err := composeTrainer(p)
		if err != nil {
			return err
		}
		grace := 30 * time.Second
		if v, ok := tr.value("grace"); ok {
			if grace, err = time.ParseDuration(v); err != nil || grace <= 0 {
				return fmt.Errorf("service %s: LIFEBOAT_GRACE %q is not a positive Go duration", tr.name, v)
			}
		}
		if tr.svc.StopGracePeriod == "" {
			return fmt.Errorf("service %s: no stop_grace_period; Docker's default (10s) SIGKILLs lifeboat before its grace (%s) ends", tr.name, grace)
		}
		sgp, err := time.ParseDuration(tr.svc.StopGracePeriod)
		if err != nil {
			return fmt.Errorf("service %s: stop_grace_period %q: %v", tr.name, tr.svc.StopGracePeriod, err)
		}
		if sgp != grace {
			return fmt.Errorf("service %s: stop_grace_period is %s but lifeboat's grace (LIFEBOAT_GRACE) is %s; set both to the same time", tr.name, sgp, grace)
		}
		if s := tr.svc.StopSignal; s != "" && s != "SIGTERM" && s != "TERM" {
			return fmt.Errorf("service %s: stop_signal %s is not one lifeboat stops on by default (TERM)", tr.name, s)
		}
		return nil
	}},
	{"the store's endpoint is the minio service", func(p *composeProject) error {
		tr, err := composeTrainer(p)
		if err != nil {
			return err
		}
		store, ok := tr.value("store")
		if !ok || !strings.HasPrefix(store, "s3://") {
			return fmt.Errorf("service %s: LIFEBOAT_STORE %q is not an s3:// store", tr.name, store)
		}
		endpoint, ok := tr.value("s3-endpoint")
		if !ok {
			endpoint = tr.env["AWS_ENDPOINT_URL"]
		}
		u, err := url.Parse(endpoint)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" {
			return fmt.Errorf("service %s: endpoint %q (AWS_ENDPOINT_URL) is not an http(s) URL", tr.name, endpoint)
		}
		_, port, err := minioService(p, u.Hostname())
		if err != nil {
			return fmt.Errorf("service %s: endpoint %s: %w", tr.name, endpoint, err)
		}
		if u.Port() != port {
			return fmt.Errorf("service %s: endpoint %s has port %q, but minio listens on %s", tr.name, endpoint, u.Port(), port)
		}
		if v, _ := tr.value("create-bucket"); v != "true" && p.Services["createbucket"] == nil {
			return fmt.Errorf("service %s: nothing creates the bucket of %s: set LIFEBOAT_CREATE_BUCKET: \"true\" or add a createbucket service", tr.name, store)
		}
		return nil
	}},
	{"credentials are minio's root user", func(p *composeProject) error {
		tr, err := composeTrainer(p)
		if err != nil {
			return err
		}
		endpoint, _ := url.Parse(tr.env["AWS_ENDPOINT_URL"])
		m, _, err := minioService(p, endpoint.Hostname())
		if err != nil {
			return err
		}
		for key, minioKey := range map[string]string{"AWS_ACCESS_KEY_ID": "MINIO_ROOT_USER", "AWS_SECRET_ACCESS_KEY": "MINIO_ROOT_PASSWORD"} {
			v := tr.svc.Environment[key]
			if !strings.HasPrefix(v, "${") {
				return fmt.Errorf("service %s: %s must come from the environment (${VAR}), not a literal in the file", tr.name, key)
			}
			if mv := m.Environment[minioKey]; v != mv {
				return fmt.Errorf("service %s: %s is %q but minio's %s is %q", tr.name, key, v, minioKey, mv)
			}
		}
		return nil
	}},
	{"the trainer waits for minio to be healthy", func(p *composeProject) error {
		tr, err := composeTrainer(p)
		if err != nil {
			return err
		}
		endpoint, _ := url.Parse(tr.env["AWS_ENDPOINT_URL"])
		host := endpoint.Hostname()
		d, ok := tr.svc.DependsOn[host]
		if !ok || d.Condition != "service_healthy" {
			return fmt.Errorf("service %s: depends_on %s is %+v; want condition: service_healthy, or lifeboat's restore races the server's start", tr.name, host, d)
		}
		m, _, err := minioService(p, host)
		if err != nil {
			return err
		}
		if m.Healthcheck == nil || len(m.Healthcheck.Test) < 2 || m.Healthcheck.Test[0] != "CMD" && m.Healthcheck.Test[0] != "CMD-SHELL" {
			return fmt.Errorf("service %s has no healthcheck test, so service_healthy never holds", host)
		}
		return nil
	}},
	{"volumes are declared and mounted", func(p *composeProject) error {
		for _, name := range slices.Sorted(maps.Keys(p.Services)) {
			for _, v := range p.Services[name].Volumes {
				src, _, ok := strings.Cut(v, ":")
				if !ok {
					return fmt.Errorf("service %s: volume %q is not SOURCE:TARGET (an anonymous volume outlives nothing useful here)", name, v)
				}
				if strings.HasPrefix(src, "/") || strings.HasPrefix(src, ".") || strings.HasPrefix(src, "~") {
					continue // a bind mount
				}
				if _, ok := p.Volumes[src]; !ok {
					return fmt.Errorf("service %s mounts volume %q, which the top-level volumes do not declare", name, src)
				}
			}
		}
		tr, err := composeTrainer(p)
		if err != nil {
			return err
		}
		dir, ok := tr.value("dir")
		if !ok {
			return fmt.Errorf("service %s: no LIFEBOAT_DIR, so lifeboat has no checkpoints to upload", tr.name)
		}
		if _, ok := mountSource(tr.svc, dir); !ok {
			return fmt.Errorf("service %s: checkpoint directory %s (LIFEBOAT_DIR) is not a volume of the service", tr.name, dir)
		}
		endpoint, _ := url.Parse(tr.env["AWS_ENDPOINT_URL"])
		m, _, err := minioService(p, endpoint.Hostname())
		if err != nil {
			return err
		}
		if data := minioDataDir(m); data == "" {
			return errors.New("minio: `server` has no data directory")
		} else if _, ok := mountSource(m, data); !ok {
			return fmt.Errorf("minio keeps its data in %s, which is not a volume: the checkpoints would die with the container", data)
		}
		return nil
	}},
}

func TestCompose(t *testing.T) {
	p := loadCompose(t)
	for _, c := range composeChecks {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(p); err != nil {
				t.Errorf("%s: %v", composeFile, err)
			}
		})
	}
}

func TestDecodeComposeRejects(t *testing.T) {
	svc := "services:\n  minio:\n    image: minio/minio\n"
	for _, tc := range []struct{ name, text, want string }{
		{"unknown field", svc + "    stop_grace_periode: 30s\n", "unknown field"},
		{"wrong case", svc + "    Stop_Grace_Period: 30s\n", "case-sensitive"},
		{"duplicate key", svc + "    image: minio/minio\n", "already set"},
		{"environment as a list", svc + "    environment:\n      - A=1\n", "cannot unmarshal"},
		{"unquoted bool", svc + "    environment:\n      A: true\n", "cannot unmarshal"},
		{"shell-form command", svc + "    command: server /data\n", "cannot unmarshal"},
		{"no services", "name: x\n", "no services"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeCompose("test.yaml", []byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decodeCompose = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestComposeChecksCatch breaks compose.yaml in the ways the checks exist
// for and expects each to be reported.
func TestComposeChecksCatch(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		breakIt    func(p *composeProject)
	}{
		{"grace differs", "set both to the same time", func(p *composeProject) { p.Services["trainer"].StopGracePeriod = "30s" }},
		{"no stop_grace_period", "Docker's default", func(p *composeProject) { p.Services["trainer"].StopGracePeriod = "" }},
		{"image default grace", "lifeboat's grace (LIFEBOAT_GRACE) is 30s", func(p *composeProject) {
			delete(p.Services["trainer"].Environment, "LIFEBOAT_GRACE")
		}},
		{"endpoint host", "no service \"s3\"", func(p *composeProject) {
			p.Services["trainer"].Environment["AWS_ENDPOINT_URL"] = "http://s3:9000"
		}},
		{"endpoint port", "minio listens on 9000", func(p *composeProject) {
			p.Services["trainer"].Environment["AWS_ENDPOINT_URL"] = "http://minio:9001"
		}},
		{"no bucket", "creates the bucket", func(p *composeProject) {
			delete(p.Services["trainer"].Environment, "LIFEBOAT_CREATE_BUCKET")
		}},
		{"not healthy", "service_healthy", func(p *composeProject) {
			p.Services["trainer"].DependsOn["minio"] = composeDependency{Condition: "service_started"}
		}},
		{"no healthcheck", "no healthcheck", func(p *composeProject) { p.Services["minio"].Healthcheck = nil }},
		{"undeclared volume", "do not declare", func(p *composeProject) { delete(p.Volumes, "ckpt") }},
		{"dir not mounted", "not a volume of the service", func(p *composeProject) {
			p.Services["trainer"].Environment["LIFEBOAT_DIR"] = "/data"
		}},
		{"minio data not mounted", "die with the container", func(p *composeProject) { p.Services["minio"].Volumes = nil }},
		{"literal secret", "not a literal", func(p *composeProject) {
			p.Services["trainer"].Environment["AWS_SECRET_ACCESS_KEY"] = "minio123"
		}},
		{"other user", "minio's MINIO_ROOT_USER", func(p *composeProject) {
			p.Services["trainer"].Environment["AWS_ACCESS_KEY_ID"] = "${AWS_ACCESS_KEY_ID}"
		}},
		{"unknown LIFEBOAT variable", "no flag", func(p *composeProject) {
			p.Services["trainer"].Environment["LIFEBOAT_GRACE_PERIOD"] = "60s"
		}},
		{"entrypoint replaced", "ENTRYPOINT", func(p *composeProject) {
			p.Services["trainer"].Entrypoint = []string{"python"}
		}},
		{"entrypoint is lifeboat again", "sets entrypoint", func(p *composeProject) {
			p.Services["trainer"].Entrypoint = []string{"/usr/local/bin/lifeboat", "run", "--"}
		}},
		{"unknown image", "not built in this repository", func(p *composeProject) { p.Services["trainer"].Image = "somewhere/else:1" }},
		{"other Dockerfile", "is built from", func(p *composeProject) {
			p.Services["trainer"].Build.Dockerfile = "images/paddle/Dockerfile"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadCompose(t)
			tc.breakIt(p)
			var errs []string
			for _, c := range composeChecks {
				if err := c.check(p); err != nil {
					errs = append(errs, err.Error())
				}
			}
			if len(errs) == 0 {
				t.Fatalf("no check caught it")
			}
			t.Logf("caught: %s", strings.Join(errs, "\n"))
			if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Errorf("errors do not mention %q:\n%s", tc.want, strings.Join(errs, "\n"))
			}
		})
	}
}
