// Package testenv holds the rules tests share about their environment: when
// a missing prerequisite may skip a test, where the test MinIO server is, and
// how to run AWS's EC2 metadata mock.
package testenv

import (
	"os"
	"testing"
)

// SkipDisallowed reports whether skipping is forbidden: in CI (CI is set) or
// when LIFEBOAT_TEST_DISALLOW_SKIP=1. There a missing prerequisite is a
// failure, because a skipped test proves nothing.
func SkipDisallowed() bool {
	return os.Getenv("CI") != "" || os.Getenv("LIFEBOAT_TEST_DISALLOW_SKIP") == "1"
}

// Skip skips the test with reason locally, and fails it where skipping is
// disallowed.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if SkipDisallowed() {
		t.Fatalf("prerequisite missing and skipping is disallowed here (CI or LIFEBOAT_TEST_DISALLOW_SKIP=1): %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot skips (or fails, see Skip) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root (PID namespaces, subreaper, cgroups)")
	}
}

// MinIO is the test MinIO server that scripts/minio.sh started.
type MinIO struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
}

// RequireMinIO returns the server named by LIFEBOAT_TEST_S3_ENDPOINT,
// LIFEBOAT_TEST_S3_ACCESS_KEY and LIFEBOAT_TEST_S3_SECRET_KEY, or skips (or
// fails, see Skip) when they are not set. Run the suite through
// scripts/test.sh to have them set.
func RequireMinIO(t testing.TB) MinIO {
	t.Helper()
	m := MinIO{
		Endpoint:  os.Getenv("LIFEBOAT_TEST_S3_ENDPOINT"),
		AccessKey: os.Getenv("LIFEBOAT_TEST_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("LIFEBOAT_TEST_S3_SECRET_KEY"),
	}
	if m.Endpoint == "" || m.AccessKey == "" || m.SecretKey == "" {
		Skip(t, "no test MinIO server: run the suite with scripts/test.sh, which starts one")
	}
	return m
}
