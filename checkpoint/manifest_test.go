package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

func validManifest(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/manifest-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeManifest(t *testing.T) {
	valid := string(validManifest(t))
	// edit replaces old with new in the valid manifest, once.
	edit := func(old, new string) string {
		if !strings.Contains(valid, old) {
			t.Fatalf("testdata manifest has no %q", old)
		}
		return strings.Replace(valid, old, new, 1)
	}
	tests := []struct {
		name    string
		data    string
		wantErr string // "" means valid
	}{
		{"valid", valid, ""},
		{"trailing newline ok", valid + "\n", ""},
		{"empty", "", "decode"},
		{"not json", "hello", "decode"},
		{"truncated", valid[:len(valid)/2], "decode"},
		{"trailing data", valid + "{}", "data after"},
		{"unknown field", edit(`"format":1,`, `"format":1,"compression":"zstd",`), "unknown field"},
		{"future format", edit(`"format":1`, `"format":2`), "format version 2"},
		{"bad id", edit(`0123456789abcdef`, `0123456789ABCDEF`), "id"},
		{"negative step", edit(`"step":100`, `"step":-1`), "negative"},
		{"rank out of range", edit(`"rank":0`, `"rank":2`), "rank 2"},
		{"zero world", edit(`"world_size":2`, `"world_size":0`), "world size"},
		{"no time", edit(`"created":"2025-01-01T00:00:00Z",`, ``), "created"},
		{"absolute path", edit(`"path":"empty"`, `"path":"/etc/passwd"`), "absolute"},
		{"dotdot path", edit(`"path":"empty"`, `"path":"../empty"`), "segment"},
		{"inner dotdot", edit(`"path":"opt/state.pdopt"`, `"path":"opt/../../x"`), "segment"},
		{"dot segment", edit(`"path":"opt/state.pdopt"`, `"path":"opt/./state.pdopt"`), "segment"},
		{"trailing slash", edit(`"path":"opt/state.pdopt"`, `"path":"opt/"`), "segment"},
		{"backslash", edit(`"path":"empty"`, `"path":"..\\\\x"`), "backslash"},
		{"nul", edit(`"path":"empty"`, `"path":"a\u0000"`), "NUL"},
		{"escaped name", edit(`"path":"empty"`, `"path":"bad\\xffname\\x5c"`), ""},
		{"escape of a plain byte", edit(`"path":"empty"`, `"path":"b\\x41"`), "needs none"},
		{"escape of valid UTF-8", edit(`"path":"empty"`, `"path":"b\\xc3\\xa9"`), "needs none"},
		{"upper-case escape", edit(`"path":"empty"`, `"path":"b\\xFF"`), "backslash"},
		{"escaped NUL", edit(`"path":"empty"`, `"path":"b\\x00"`), "needs none"},
		{"empty path", edit(`"path":"empty"`, `"path":""`), "empty file path"},
		{"duplicate path", edit(`"path":"empty"`, `"path":"model.pdparams"`), "sorted or are duplicated"},
		{"unsorted", edit(`"path":"opt/state.pdopt"`, `"path":"a"`), "sorted"},
		{"file under file", edit(`"path":"opt/state.pdopt"`, `"path":"model.pdparams/x"`), "which is a file"},
		{"symlink mode", edit(`"mode":384`, `"mode":41471`), "only regular files"},
		{"setuid mode", edit(`"mode":384`, `"mode":2541`), "permissions"},
		{"size mismatch", edit(`"size":3,"mode"`, `"size":4,"mode"`), "add up"},
		{"zero chunk", edit(`"size":3}`, `"size":0}`), "chunk size 0"},
		{"huge chunk", edit(`"size":3}`, `"size":1073741824}`), "chunk size"},
		{"bad hash", edit(`5b7e7d2b`, `5B7E7D2B`), "chunk hash"},
		{"short hash", edit(`"5b7e7d2b`, `"`), "chunk hash"},
		{"wrong type", edit(`"step":100`, `"step":"100"`), "decode"},
		{"crc32c", edit(`"size":5}`, `"size":5,"crc32c":"0a1b2c3d"}`), ""},
		{"upper-case crc32c", edit(`"size":5}`, `"size":5,"crc32c":"0A1B2C3D"}`), "CRC32C"},
		{"short crc32c", edit(`"size":5}`, `"size":5,"crc32c":"0a1b2c"}`), "CRC32C"},
		{"crc32c as a number", edit(`"size":5}`, `"size":5,"crc32c":169552957}`), "decode"},
		{"revision and counter", edit(`"world_size":2,`, `"world_size":2,"revision":3,"counter":true,`), ""},
		{"negative revision", edit(`"world_size":2,`, `"world_size":2,"revision":-1,`), "revision -1"},
		{"revision too high", edit(`"world_size":2,`, `"world_size":2,"revision":100000,`), "revision 100000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeManifest([]byte(tt.data))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeManifest = %v", err)
				}
				if m.Step != 100 || len(m.Files) != 3 || m.Bytes() != 8388616 {
					t.Errorf("decoded %+v", m)
				}
				return
			}
			if err == nil {
				t.Fatalf("DecodeManifest accepted it: %+v", m)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("DecodeManifest = %v, want ErrCorrupt mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeManifestSizeLimit(t *testing.T) {
	big := append(validManifest(t), bytes.Repeat([]byte(" "), MaxManifestSize)...)
	if _, err := DecodeManifest(big); !errors.Is(err, ErrCorrupt) {
		t.Errorf("DecodeManifest of %d bytes = %v, want ErrCorrupt", len(big), err)
	}
}

func TestManifestEncodeRoundTrip(t *testing.T) {
	m, err := DecodeManifest(validManifest(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m2, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := m2.Encode()
	if !bytes.Equal(b, b2) {
		t.Errorf("encode is not stable:\n%s\n%s", b, b2)
	}
	m.Files[0].Path = "../x"
	if _, err := m.Encode(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Encode of an invalid manifest = %v, want ErrCorrupt", err)
	}
}

// FuzzDecodeManifest checks that DecodeManifest never panics, and that what
// it accepts is safe to restore and survives re-encoding unchanged.
func FuzzDecodeManifest(f *testing.F) {
	f.Add(validManifest(f))
	f.Add([]byte(`{"format":1}`))
	f.Add(bytes.Replace(validManifest(f), []byte(`"size":5}`), []byte(`"size":5,"crc32c":"0a1b2c3d"}`), 1))
	f.Add([]byte(`{"format":1,"id":"0123456789abcdef","step":0,"rank":0,"world_size":1,"created":"2025-01-01T00:00:00Z","producer":"","chunk_size":0,"files":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		for _, file := range m.Files {
			if err := CheckPath(file.Path); err != nil {
				t.Fatalf("accepted unsafe path: %v", err)
			}
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatalf("accepted manifest does not encode: %v", err)
		}
		m2, err := DecodeManifest(enc)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
		a, _ := json.Marshal(m)
		b, _ := json.Marshal(m2)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the manifest:\n%s\n%s", a, b)
		}
		for i := range m.Files {
			if m.Files[i].Path != m2.Files[i].Path {
				t.Fatalf("round trip changed path %q to %q", m.Files[i].Path, m2.Files[i].Path)
			}
		}
	})
}

// TestEscapePath: a name that is not UTF-8, or holds a backslash, is
// written with \xHH escapes and read back byte for byte; other names are
// written as they are.
func TestEscapePath(t *testing.T) {
	for _, tt := range []struct{ raw, esc string }{
		{"step-1/model.pdparams", "step-1/model.pdparams"},
		{"caf\xc3\xa9/\xef\xbf\xbd", "caf\xc3\xa9/\xef\xbf\xbd"}, // valid UTF-8, U+FFFD included
		{"bad\xffname", `bad\xffname`},
		{`a\b`, `a\x5cb`},
		{"\xc3", `\xc3`},                      // a truncated sequence
		{"\xc3\xa9\xc3", "\xc3\xa9" + `\xc3`}, // valid é kept, then a truncated sequence
	} {
		if got := EscapePath(tt.raw); got != tt.esc {
			t.Errorf("EscapePath(%q) = %q, want %q", tt.raw, got, tt.esc)
		}
		if got, err := UnescapePath(tt.esc); err != nil || got != tt.raw {
			t.Errorf("UnescapePath(%q) = %q, %v; want %q", tt.esc, got, err, tt.raw)
		}
	}
	m, err := DecodeManifest(validManifest(t))
	if err != nil {
		t.Fatal(err)
	}
	m.Files[0].Path = "bad\xffname"
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"path":"bad\\xffname"`)) {
		t.Errorf("encoded manifest does not escape the name:\n%s", b)
	}
	m2, err := DecodeManifest(b)
	if err != nil || m2.Files[0].Path != "bad\xffname" {
		t.Errorf("decoded name %q, %v; want the bytes back", m2.Files[0].Path, err)
	}
}
