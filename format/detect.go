package format

import (
	"bytes"
	"encoding/binary"
)

// Kind is a file format, recognised by a file's first bytes.
type Kind int

// The kinds of file that are recognised.
const (
	// Unknown is content no check recognises: such a file is judged by
	// the death rule (package agent), never refused by a check.
	Unknown Kind = iota
	// Empty is a file of no bytes: no check applies to it, so, like
	// Unknown, the death rule judges it.
	Empty
	// Pickle is one or more whole pickles of protocol 2 or later, back to
	// back (pickle.dump called once or several times on one file,
	// paddle.save, torch's distributed .metadata, Paddle's .distcp).
	Pickle
	// TorchLegacy is torch.save(..., _use_new_zipfile_serialization=False):
	// five pickles, then the raw storages the fourth one records.
	TorchLegacy
	// Zip is one or more zip archives back to back: torch.save,
	// np.savez, and the items of PyTorch's distributed checkpoint
	// (.distcp), which torch.save writes one after another into a shard.
	Zip
	// Safetensors is a safetensors file: an 8-byte header length and a
	// JSON header.
	Safetensors
	// JSON is one or more JSON values as Python's json module writes
	// them (NaN, Infinity and -Infinity included), a JSON Lines file
	// among them, with or without a UTF-8 byte-order mark.
	JSON
	// NPY is numpy's np.save format.
	NPY
)

var kindNames = [...]string{
	Unknown:     "unknown",
	Empty:       "empty",
	Pickle:      "pickle",
	TorchLegacy: "torch-legacy",
	Zip:         "zip",
	Safetensors: "safetensors",
	JSON:        "json",
	NPY:         "npy",
}

// String names the kind as logs and `lifeboat check` show it.
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Checked reports whether a check of this kind decides on its own whether
// a file is whole (Unknown and Empty are left to the death rule).
func (k Kind) Checked() bool { return k != Unknown && k != Empty }

// HeadLen is how many first bytes Detect looks at.
const HeadLen = 64

// torchMagic is the first pickle of torch's legacy format after PROTO n:
// LONG1 of 10 bytes holding 0x1950a86a20f9469cfc6c, then STOP.
var torchMagic = []byte{0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e}

var (
	zipLocal = []byte("PK\x03\x04")
	zipEmpty = []byte("PK\x05\x06")
	npyMagic = []byte("\x93NUMPY")
	utf8BOM  = []byte("\xef\xbb\xbf")
)

// Detect says which format a file of size bytes is, from head, its first
// min(size, HeadLen) bytes. The file's name plays no part. Pickle, JSON
// and safetensors, whose first bytes alone are common in other data (a raw
// float array may begin 0x80 0x03, an int64 array 5 then 0x7b, binary data
// '{'), must also read as their format for all of head: other content is
// Unknown, never torn.
func Detect(head []byte, size int64) Kind {
	switch {
	case size == 0:
		return Empty
	case len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= highestProtocol:
		if legacyPrefix(head) {
			return TorchLegacy
		}
		var s pickleStream
		s.Write(head)
		if s.garbled != nil {
			return Unknown
		}
		return Pickle
	case bytes.HasPrefix(head, zipLocal), bytes.HasPrefix(head, zipEmpty):
		return Zip
	case bytes.HasPrefix(head, npyMagic):
		return NPY
	case len(head) >= 9 && head[8] == '{':
		if n := binary.LittleEndian.Uint64(head); n >= 2 && n <= maxSafetensorsHeader {
			// The header must read as JSON too: an int64 array can
			// begin with a small number and a byte 0x7b.
			var s jsonStream
			s.Write(head[8:min(uint64(len(head)), 8+n)])
			if s.bad == nil {
				return Safetensors
			}
		}
	}
	t := bytes.TrimLeft(bytes.TrimPrefix(head, utf8BOM), " \t\r\n")
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		var s jsonStream
		s.Write(head)
		if s.bad != nil {
			return Unknown
		}
		return JSON
	}
	return Unknown
}
