package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// runLifeboat runs the binary with env added and returns its exit code and
// output; a run that outlives hangLimit fails the test.
func runLifeboat(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, lifeboatBin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("lifeboat %s hung for %v against an endpoint that never answers; output %q", strings.Join(args, " "), hangLimit, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestStoreTimeoutBlackHole: an endpoint that accepts TCP and never
// answers ends run (before the trainer starts), restore and ls within the
// timeouts set by flag or environment, with a message that names the
// endpoint and the flag to raise, and no credential.
func TestStoreTimeoutBlackHole(t *testing.T) {
	endpoint := "http://" + testenv.SilentServer(t)
	marker := filepath.Join(t.TempDir(), "ran")
	const secret = "lifeboat-secret-value-xyz"
	creds := []string{"AWS_ACCESS_KEY_ID=AKIDLIFEBOATTEST", "AWS_SECRET_ACCESS_KEY=" + secret}
	flags := []string{"--store", "s3://ckpt/job", "--s3-endpoint", endpoint, "--s3-connect-timeout", "300ms", "--s3-response-timeout", "300ms"}
	viaEnv := append([]string{"AWS_ENDPOINT_URL=" + endpoint, "LIFEBOAT_S3_CONNECT_TIMEOUT=300ms", "LIFEBOAT_S3_RESPONSE_TIMEOUT=300ms"}, creds...)
	// After the commands, which run at once.
	t.Cleanup(func() {
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("the trainer started although the store never answered")
		}
	})
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
	}{
		{"run", creds, append(append([]string{"run"}, flags...), "--dir", t.TempDir(), "--", "touch", marker), 125},
		{"run with a region", append([]string{"AWS_REGION=us-east-1"}, creds...), append(append([]string{"run"}, flags...), "--dir", t.TempDir(), "--", "touch", marker), 125},
		{"restore", creds, append(append([]string{"restore"}, flags...), "--dir", t.TempDir()), 1},
		{"ls", creds, append([]string{"ls"}, flags...), 1},
		{"ls from the environment", viaEnv, []string{"ls", "--store", "s3://ckpt/job"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each asks a few times before it gives up
			code, out := runLifeboat(t, tc.env, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; output %q", code, tc.code, out)
			}
			for _, want := range []string{endpoint, "did not answer", "--s3-response-timeout", "--s3-endpoint"} {
				if !strings.Contains(out, want) {
					t.Errorf("output %q does not mention %q", out, want)
				}
			}
			if strings.Contains(out, secret) {
				t.Errorf("the secret key appears in the output %q", out)
			}
		})
	}
}

// TestStoreTimeoutFlags: a timeout that is not a positive duration is a
// usage error (exit 2) naming the flag and its variable.
func TestStoreTimeoutFlags(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"run", "--store", "s3://ckpt/job", "--s3-connect-timeout", "0", "--dir", t.TempDir(), "--", "touch", marker}, "--s3-connect-timeout (LIFEBOAT_S3_CONNECT_TIMEOUT) must be a positive duration"},
		{nil, []string{"ls", "--store", "s3://ckpt/job", "--s3-response-timeout", "soon"}, "--s3-response-timeout (LIFEBOAT_S3_RESPONSE_TIMEOUT) must be a positive duration"},
		{[]string{"LIFEBOAT_S3_STALL_TIMEOUT=-1s"}, []string{"restore", "--store", "s3://ckpt/job", "--dir", t.TempDir()}, "--s3-stall-timeout (LIFEBOAT_S3_STALL_TIMEOUT) must be a positive duration"},
	} {
		code, out := runLifeboat(t, tc.env, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v %v: exit %d, output %q; want 2 and %q", tc.env, tc.args, code, out, tc.want)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the trainer started despite a bad timeout")
	}
}
