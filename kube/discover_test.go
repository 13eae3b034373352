package kube

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestDiscover(t *testing.T) {
	sa := t.TempDir()
	for name, content := range map[string]string{"token": "t", "ca.crt": "x", "namespace": "from-file\n"} {
		if err := os.WriteFile(filepath.Join(sa, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cluster := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "HOSTNAME": "host-pod"}
	with := func(extra map[string]string) func(string) string {
		env := map[string]string{}
		for k, v := range cluster {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		return func(k string) string { return env[k] }
	}
	tests := []struct {
		name      string
		getenv    func(string) string
		dir       string
		notIn     bool
		server    string
		ns, pod   string
		uid       string
		otherFail bool
	}{
		{name: "no service env", getenv: func(string) string { return "" }, dir: sa, notIn: true},
		{name: "no token", getenv: with(nil), dir: t.TempDir(), notIn: true},
		{name: "hostname and namespace file", getenv: with(nil), dir: sa, server: "https://10.96.0.1:443", ns: "from-file", pod: "host-pod"},
		{name: "downward API wins", getenv: with(map[string]string{"LIFEBOAT_POD_NAME": "p", "LIFEBOAT_POD_NAMESPACE": "n", "LIFEBOAT_POD_UID": "u"}),
			dir: sa, server: "https://10.96.0.1:443", ns: "n", pod: "p", uid: "u"},
		{name: "IPv6 host", getenv: with(map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1"}), dir: sa, server: "https://[fd00::1]:443", ns: "from-file", pod: "host-pod"},
		{name: "no pod name", getenv: with(map[string]string{"HOSTNAME": ""}), dir: sa, otherFail: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Discover(tc.getenv, tc.dir)
			switch {
			case tc.notIn:
				if !errors.Is(err, ErrNotInCluster) {
					t.Fatalf("err = %v, want ErrNotInCluster", err)
				}
				return
			case tc.otherFail:
				if err == nil || errors.Is(err, ErrNotInCluster) {
					t.Fatalf("err = %v, want an error saying what is missing", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if cfg.Server != tc.server || cfg.Namespace != tc.ns || cfg.Pod != tc.pod || cfg.PodUID != tc.uid {
				t.Errorf("got %+v", cfg)
			}
			if cfg.TokenFile != filepath.Join(tc.dir, "token") || cfg.CAFile != filepath.Join(tc.dir, "ca.crt") {
				t.Errorf("files %s %s", cfg.TokenFile, cfg.CAFile)
			}
		})
	}
}
