package main

import (
	"strings"
	"testing"
)

// TestStoreUnknownScheme: a store URL whose scheme no backend knows is a
// usage error (exit 2) that names the forms of the schemes known.
func TestStoreUnknownScheme(t *testing.T) {
	for _, args := range [][]string{
		{"ls", "--store", "gs://ckpt/job"},
		{"run", "--store", "gs://ckpt/job", "--dir", t.TempDir(), "--", "true"},
	} {
		code, _, stderr := lbRun(t, nil, args...)
		if code != 2 {
			t.Errorf("lifeboat %s: exit %d, want 2; stderr %q", strings.Join(args, " "), code, stderr)
		}
		for _, want := range []string{`unknown scheme "gs"`, "s3://bucket/prefix", "file:///abs/path", "--store (LIFEBOAT_STORE)"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("lifeboat %s: stderr %q does not say %q", strings.Join(args, " "), stderr, want)
			}
		}
	}
}
