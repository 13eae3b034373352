package format

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// safetensorsFile lays out a safetensors file: the header length, the
// JSON header padded with spaces to 8 bytes as the safetensors library
// does, and data bytes.
func safetensorsFile(header string, data int) []byte {
	for len(header)%8 != 0 {
		header += " "
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	for i := range data {
		b = append(b, byte(i)|'.')
	}
	return b
}

const stHeader = `{"__metadata__":{"format":"pt"},` +
	`"linear.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},` +
	`"linear.bias":{"dtype":"F32","shape":[3],"data_offsets":[24,36]}}`

func TestSafetensorsWholeFilesPass(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header string
		data   int
	}{
		{"two tensors", stHeader, 36},
		{"no tensors", `{}`, 0},
		{"metadata only", `{"__metadata__":{"a":"b"}}`, 0},
		{"empty tensor last", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}`, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkBytes("m.safetensors", safetensorsFile(tc.header, tc.data)); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestSafetensorsEveryCutFails(t *testing.T) {
	b := safetensorsFile(stHeader, 36)
	for cut := range len(b) {
		if err := checkBytes("m.safetensors", b[:cut]); !errors.Is(err, ErrTorn) {
			t.Fatalf("cut at %d of %d: got %v, want ErrTorn", cut, len(b), err)
		}
	}
}

func TestSafetensorsVerdicts(t *testing.T) {
	huge := binary.LittleEndian.AppendUint64(nil, 200<<20)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"too short", []byte{1, 2, 3}, "3 bytes is too short"},
		{"header over 100 MiB", append(huge, make([]byte, 64)...), "header length 209715200 is over"},
		{"header past the end", safetensorsFile(stHeader, 0)[:40], "ends past the end of the file"},
		{"bytes appended", safetensorsFile(stHeader, 37), "the tensors end at byte 36 of the data, but the file holds 37"},
		{"null header", safetensorsFile(`null`, 0), "not a JSON object"},
		{"array header", safetensorsFile(`[]`, 0), "not a JSON object"},
		{"bad JSON", safetensorsFile(`{"a":`, 0), "not a JSON object"},
		{"no data_offsets", safetensorsFile(`{"a":{"dtype":"F32"}}`, 0), `tensor "a" has no data_offsets`},
		{"reversed offsets", safetensorsFile(`{"a":{"data_offsets":[4,0]}}`, 4), `tensor "a" has no data_offsets`},
		{"negative offset", safetensorsFile(`{"a":{"data_offsets":[-1,4]}}`, 4), `tensor "a"`},
		{"tensor not an object", safetensorsFile(`{"a":3}`, 0), `tensor "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBytes("m.safetensors", tc.in)
			if !errors.Is(err, ErrTorn) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrTorn saying %q", err, tc.want)
			}
		})
	}
}
