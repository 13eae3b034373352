package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/storagetest"
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
		name string
		r    io.Reader
		size int64
		opts storage.PutOptions
		want bool
	}{
		{"bytes.Reader with its SHA-256", bytes.NewReader(make([]byte, 50)), 50, withSum, true},
		{"strings.Reader", strings.NewReader(strings.Repeat("x", 50)), 50, withSum, true},
		{"exactly one part", bytes.NewReader(make([]byte, part)), part, withSum, true},
		{"no SHA-256: it must be computed from the bytes", bytes.NewReader(make([]byte, 50)), 50, storage.PutOptions{}, false},
		{"unknown size", bytes.NewReader(make([]byte, 50)), -1, withSum, false},
		{"larger than a part", bytes.NewReader(make([]byte, part+1)), part + 1, withSum, false},
		{"fewer bytes than size", bytes.NewReader(make([]byte, 40)), 50, withSum, false},
		{"a file (no Size method)", f, 0, withSum, false},
		{"a plain reader", io.MultiReader(bytes.NewReader(make([]byte, 50))), 50, withSum, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ok := seekableBody(tt.r, tt.size, part, tt.opts)
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
	body, ok := seekableBody(r, 4, part, withSum)
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

// TestCorruptedInTransit flips one byte of every request body on its way
// to the server. The checksum each PUT carries (CRC32C or the caller's
// SHA-256 on a single PUT, CRC32C on each part) makes the server refuse it:
// Put fails with a permanent ErrChecksum and leaves neither an object nor
// an unfinished multipart upload.
func TestCorruptedInTransit(t *testing.T) {
	cfg := testConfig(t)
	target, err := url.Parse(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the client signed the proxy's host
		if r.Out.ContentLength > 0 {
			r.Out.Body = &flipByte{r: r.Out.Body, at: r.Out.ContentLength / 2}
		}
	}})
	defer proxy.Close()
	cfg.Endpoint = proxy.URL
	s := newTestStore(t, cfg)
	small := storagetest.Data(5, 1000)
	big := storagetest.Data(6, 2*MinPartSize+1)
	smallSum, bigSum := sha256.Sum256(small), sha256.Sum256(big)
	for i, tc := range []struct {
		name string
		b    []byte
		opts storage.PutOptions
	}{
		{"single PUT, CRC32C", small, storage.PutOptions{}},
		{"single PUT, caller's SHA-256", small, storage.PutOptions{SHA256: hex.EncodeToString(smallSum[:])}},
		{"single PUT, caller's SHA-256 and CRC32C", small, storage.PutOptions{SHA256: hex.EncodeToString(smallSum[:]), CRC32C: crc32.Checksum(small, storage.CRC32CTable)}},
		{"multipart", big, storage.PutOptions{SHA256: hex.EncodeToString(bigSum[:])}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("corrupt-%d", i)
			_, err := s.Put(context.Background(), key, bytes.NewReader(tc.b), int64(len(tc.b)), tc.opts)
			if !errors.Is(err, storage.ErrChecksum) || !storage.IsPermanent(err) {
				t.Fatalf("Put of a body corrupted in transit: %v, want a permanent ErrChecksum", err)
			}
			if _, err := s.Stat(context.Background(), key); !errors.Is(err, storage.ErrNotExist) {
				t.Fatalf("Stat after the refused Put: %v, want ErrNotExist", err)
			}
		})
	}
	if ids := incomplete(t, s); len(ids) != 0 {
		t.Fatalf("refused Puts left unfinished multipart uploads: %q", ids)
	}
}

// flipByte passes r through with the byte at offset at inverted.
type flipByte struct {
	r    io.ReadCloser
	at   int64
	read int64
}

func (f *flipByte) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if i := f.at - f.read; i >= 0 && i < int64(n) {
		p[i] ^= 0xff
	}
	f.read += int64(n)
	return n, err
}

func (f *flipByte) Close() error { return f.r.Close() }

// TestWrongCRC32C checks that a caller's CRC32C that does not match the
// bytes makes the server refuse the PUT with a permanent ErrChecksum, from
// memory without a copy and through the buffered path alike.
func TestWrongCRC32C(t *testing.T) {
	s := newTestStore(t, testConfig(t))
	b := storagetest.Data(7, 1000)
	sum, crc := storage.Checksums(b)
	for i, r := range []io.Reader{bytes.NewReader(b), io.MultiReader(bytes.NewReader(b))} {
		key := fmt.Sprintf("wrong-crc-%d", i)
		_, err := s.Put(context.Background(), key, r, int64(len(b)), storage.PutOptions{SHA256: sum, CRC32C: crc + 1})
		if !errors.Is(err, storage.ErrChecksum) || !storage.IsPermanent(err) {
			t.Fatalf("Put %d with a wrong CRC32C: %v, want a permanent ErrChecksum", i, err)
		}
		if _, err := s.Stat(context.Background(), key); !errors.Is(err, storage.ErrNotExist) {
			t.Fatalf("Stat after the refused Put: %v, want ErrNotExist", err)
		}
	}
}
