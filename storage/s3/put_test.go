package s3

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
)

// TestSeekableBody covers when Put sends the caller's reader as it is and
// when it takes the buffered path.
func TestSeekableBody(t *testing.T) {
	const part = 100
	sum := strings.Repeat("ab", 32)
	withSum := storage.PutOptions{SHA256: sum}
	f, err := os.CreateTemp(t.TempDir(), "body")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name      string
		r         io.Reader
		size      int64
		opts      storage.PutOptions
		unlimited bool
		want      bool
	}{
		{"bytes.Reader with its SHA-256", bytes.NewReader(make([]byte, 50)), 50, withSum, true, true},
		{"strings.Reader", strings.NewReader(strings.Repeat("x", 50)), 50, withSum, true, true},
		{"exactly one part", bytes.NewReader(make([]byte, part)), part, withSum, true, true},
		{"no SHA-256: it must be computed from the bytes", bytes.NewReader(make([]byte, 50)), 50, storage.PutOptions{}, true, false},
		{"an upload limit paces reads", bytes.NewReader(make([]byte, 50)), 50, withSum, false, false},
		{"unknown size", bytes.NewReader(make([]byte, 50)), -1, withSum, true, false},
		{"larger than a part", bytes.NewReader(make([]byte, part+1)), part + 1, withSum, true, false},
		{"fewer bytes than size", bytes.NewReader(make([]byte, 40)), 50, withSum, true, false},
		{"a file (no Size method)", f, 0, withSum, true, false},
		{"a plain reader", io.MultiReader(bytes.NewReader(make([]byte, 50))), 50, withSum, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ok := seekableBody(tt.r, tt.size, part, tt.opts, tt.unlimited)
			if ok != tt.want {
				t.Fatalf("seekableBody ok = %v, want %v", ok, tt.want)
			}
			if ok && body.Size() != tt.size {
				t.Errorf("body has %d bytes, want %d", body.Size(), tt.size)
			}
		})
	}

	// The view starts at the reader's offset and can be read again.
	r := bytes.NewReader([]byte("0123456789"))
	r.Seek(3, io.SeekStart)
	body, ok := seekableBody(r, 4, part, withSum, true)
	if !ok {
		t.Fatal("seekableBody refused a bytes.Reader")
	}
	for range 2 {
		got, _ := io.ReadAll(body)
		if string(got) != "3456" {
			t.Fatalf("body = %q, want %q", got, "3456")
		}
		body.Seek(0, io.SeekStart)
	}
}
