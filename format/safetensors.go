package format

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"slices"
)

// maxSafetensorsHeader bounds the JSON header read into memory (the
// safetensors library's own limit is 100 MB).
const maxSafetensorsHeader = 100 << 20

// checkSafetensors checks the layout of a safetensors file: an 8-byte
// little-endian header length N, N bytes of JSON object, then the tensor
// data, which must end exactly at the end of the file.
func checkSafetensors(r io.ReaderAt, size int64) error {
	if size < 8 {
		return torn("safetensors", "%d bytes is too short for the header length", size)
	}
	var b [8]byte
	if err := readFull(r, b[:], 0); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint64(b[:])
	if n > maxSafetensorsHeader {
		return torn("safetensors", "header length %d is over %d bytes", n, maxSafetensorsHeader)
	}
	if n > uint64(size-8) {
		return torn("safetensors", "the %d-byte header ends past the end of the file (%d bytes)", n, size)
	}
	header := make([]byte, n)
	if err := readFull(r, header, 8); err != nil {
		return err
	}
	if t := bytes.TrimLeft(header, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return torn("safetensors", "the header is not a JSON object")
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(header, &entries); err != nil {
		return torn("safetensors", "the header is not a JSON object: %v", err)
	}
	names := make([]string, 0, len(entries))
	for name := range entries {
		if name != "__metadata__" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var end uint64
	for _, name := range names {
		var t struct {
			DataOffsets []uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(entries[name], &t); err != nil {
			return torn("safetensors", "tensor %q: %v", name, err)
		}
		if len(t.DataOffsets) != 2 || t.DataOffsets[0] > t.DataOffsets[1] {
			return torn("safetensors", "tensor %q has no data_offsets [begin, end]", name)
		}
		end = max(end, t.DataOffsets[1])
	}
	if data := uint64(size) - 8 - n; end != data {
		return torn("safetensors", "the tensors end at byte %d of the data, but the file holds %d bytes of data", end, data)
	}
	return nil
}
