package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

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

// TestValidateEndpointEnv: a bad AWS_ENDPOINT_URL is a usage error before
// the store is opened, and its password is never shown.
func TestValidateEndpointEnv(t *testing.T) {
	for _, cmd := range []string{"ls", "verify", "prune", "doctor"} {
		for _, ep := range []string{"http://KEY:hunter2pw@minio:9000", "minio:9000"} {
			c := exec.Command(lifeboatBin, cmd, "--store", "s3://bucket/x")
			c.Env = append(cleanEnv(), "AWS_ENDPOINT_URL="+ep, "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s")
			out, _ := c.CombinedOutput()
			if code := c.ProcessState.ExitCode(); code != 2 || strings.Contains(string(out), "hunter2pw") || !strings.Contains(string(out), "AWS_ENDPOINT_URL") {
				t.Errorf("%s with AWS_ENDPOINT_URL=%s: exit %d, output %q; want exit 2, the variable named and no password", cmd, ep, code, out)
			}
		}
	}
}

// TestValidateCABundleEnv: an AWS_CA_BUNDLE that holds no certificate is
// a usage error before the store is opened.
func TestValidateCABundleEnv(t *testing.T) {
	for _, f := range []string{"/nonexistent/ca.pem", "/etc/passwd"} {
		c := exec.Command(lifeboatBin, "ls", "--store", "s3://bucket/x")
		c.Env = append(cleanEnv(), "AWS_CA_BUNDLE="+f, "AWS_ENDPOINT_URL=https://127.0.0.1:1")
		out, _ := c.CombinedOutput()
		if code := c.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "AWS_CA_BUNDLE") || !strings.Contains(string(out), "--s3-ca-file") {
			t.Errorf("AWS_CA_BUNDLE=%s: exit %d, output %q; want exit 2 naming the variable and --s3-ca-file", f, code, out)
		}
	}
}

// TestExitCodeRuntimeFailure: a store that cannot be reached is the
// operation failing: 1 for restore, ls, verify, prune and doctor, 125
// (lifeboat's own failure, as for run) for sidecar; never 2, which says
// the command line is wrong. Each command asks a few times first (the
// retries of opening a store), so they run at once.
func TestExitCodeRuntimeFailure(t *testing.T) {
	for _, cmd := range []string{"ls", "verify", "prune", "restore", "doctor", "sidecar"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			args := []string{cmd, "--store", "s3://bucket/x", "--s3-endpoint", "http://127.0.0.1:1", "--s3-connect-timeout", "1s", "--s3-response-timeout", "1s"}
			want := 1
			switch cmd {
			case "restore":
				args = append(args, "--dir", t.TempDir())
			case "sidecar":
				args, want = append(args, "--dir", t.TempDir()), 125
			}
			c := exec.Command(lifeboatBin, args...)
			c.Env = append(cleanEnv(), "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_REGION=us-east-1")
			out, _ := c.CombinedOutput()
			if code := c.ProcessState.ExitCode(); code != want {
				t.Errorf("%s against a closed port: exit %d, want %d; output %q", cmd, code, want, out)
			}
		})
	}
}

// TestSupervisorConfigNamesFlags: what supervisor.Config.Validate finds
// wrong (a *supervisor.FieldError naming Config's field) reaches the user
// as a sentence naming the flags and their variables, exit 2.
func TestSupervisorConfigNamesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stop-signals", "TERM,CHLD"}, "--stop-signals (LIFEBOAT_STOP_SIGNALS) names CHLD, which lifeboat cannot receive or forward"},
		{[]string{"--stop-delivery", "group", "--signal-child-only"}, "--stop-delivery group (LIFEBOAT_STOP_DELIVERY) sends stop signals to the trainer's process group, which --signal-child-only (LIFEBOAT_SIGNAL_CHILD_ONLY) forbids; use --stop-delivery main-only or main-first"},
		{[]string{"--restart", "on-failure", "--max-restarts", "0"}, "--restart on-failure needs --max-restarts (LIFEBOAT_MAX_RESTARTS) of at least 1"},
	} {
		code, out := runLifeboat(t, nil, append(append([]string{"run"}, tc.args...), "--", "true")...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("lifeboat run %s: exit %d\n%s\nwant 2 and %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}
}
