package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// TestVerifyRestoreOption: `lifeboat restore` checks chunks against the
// CRC32C their manifest records unless --verify-restore (or
// LIFEBOAT_VERIFY_RESTORE) says sha256, on a MinIO store and a file://
// store alike (what is checked comes from the manifest, not the store).
// resume.restored says which ran.
func TestVerifyRestoreOption(t *testing.T) {
	type store struct {
		name string
		open func(t *testing.T) (url string, env []string)
	}
	stores := []store{
		{name: "file", open: func(t *testing.T) (string, []string) { return "file://" + filepath.Join(t.TempDir(), "store"), nil }},
		{name: "s3", open: func(t *testing.T) (string, []string) {
			m := testenv.RequireMinIO(t)
			b := make([]byte, 6)
			_, _ = rand.Read(b)
			return "s3://lifeboat-vr-" + hex.EncodeToString(b) + "/job", []string{"AWS_ENDPOINT_URL=" + m.Endpoint, "AWS_ACCESS_KEY_ID=" + m.AccessKey,
				"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1", "LIFEBOAT_CREATE_BUCKET=true", "LIFEBOAT_S3_BUCKET_LOOKUP=path"}
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			url, env := st.open(t)
			s := openStore(t, env, url)
			m := seedStep(t, s, 7, map[string][]byte{"a.bin": numbered("a", 5000), "b/c.bin": numbered("c", 1500)})
			chunks := 0
			for _, f := range m.Files {
				chunks += len(f.Chunks)
			}
			for _, tc := range []struct {
				name  string
				args  []string
				env   []string
				check string
			}{
				{"default", nil, nil, "crc32c"},
				{"flag sha256", []string{"--verify-restore", "sha256"}, nil, "sha256"},
				{"env sha256", nil, []string{"LIFEBOAT_VERIFY_RESTORE=sha256"}, "sha256"},
				{"flag over env", []string{"--verify-restore=crc32c"}, []string{"LIFEBOAT_VERIFY_RESTORE=sha256"}, "crc32c"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					dir := t.TempDir()
					args := append([]string{"restore", "--store", url, "--dir", dir, "--log-format", "json"}, tc.args...)
					code, out, errOut := lbRun(t, append(append([]string{}, env...), tc.env...), args...)
					if code != 0 {
						t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
					}
					r := logLines(errOut, "resume.restored")
					if len(r) != 1 {
						t.Fatalf("resume.restored lines %v, want one", r)
					}
					crc, sha := 0, chunks
					if tc.check == "crc32c" {
						crc, sha = chunks, 0
					}
					if r[0]["verify_restore"] != tc.check || r[0]["chunks_crc32c"] != float64(crc) || r[0]["chunks_sha256"] != float64(sha) {
						t.Errorf("resume.restored %v; want verify_restore %s, chunks_crc32c %d, chunks_sha256 %d", r[0], tc.check, crc, sha)
					}
				})
			}
		})
	}
}
