package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strings"
)

// torch's legacy format (torch.save with _use_new_zipfile_serialization=
// False, torch/serialization.py _legacy_save) is five pickles: the magic
// number, the protocol version, sys_info, the object (whose persistent
// ids ('storage', torch.<Type>Storage, key, location, numel, view) name
// each storage), and the sorted list of storage keys. Then, per key in that
// order, the storage: its element count as 8 little-endian bytes, then its
// elements.

// maxLegacyPickles bounds the bytes of the five pickles held in memory; a
// save whose pickles are larger is ErrUnchecked (the death rule judges it).
const maxLegacyPickles = 256 << 20

// storageElemSize is the element size of each storage type torch 1.x
// pickles (torch/storage.py).
var storageElemSize = map[string]int64{
	"DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2,
	"LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1,
	"ByteStorage": 1, "BoolStorage": 1, "ComplexDoubleStorage": 16, "ComplexFloatStorage": 8,
	"QUInt8Storage": 1, "QInt8Storage": 1, "QInt32Storage": 4, "QUInt4x2Storage": 1,
	"QUInt2x4Storage": 1, "UntypedStorage": 1,
}

// checkTorchLegacy checks one or more legacy saves back to back: each
// save's storages must end where the next save begins, or at the end of
// the file. It reads the pickles and 8 bytes per storage.
func checkTorchLegacy(r io.ReaderAt, size int64) error {
	for off, n := int64(0), 0; ; n++ {
		end, err := legacySave(r, off, size)
		if err != nil {
			return err
		}
		if end == size {
			return nil
		}
		head := make([]byte, min(size-end, HeadLen))
		if err := readFull(r, head, end); err != nil {
			return err
		}
		if Detect(head, size-end) != TorchLegacy {
			return unchecked("torch-legacy", "%d bytes no check recognises follow the storages of save %d, which end at byte %d", size-end, n+1, end)
		}
		off = end
	}
}

// legacySave checks the legacy save at off and returns where it ends.
func legacySave(r io.ReaderAt, off, size int64) (int64, error) {
	var vm pickleVM
	var vals [5]*pval
	var pids []*pval
	pos := 0
	for window := min(size-off, 64<<10); ; window = min(size-off, 4*window) {
		buf := make([]byte, window)
		if err := readFull(r, buf, off); err != nil {
			return 0, err
		}
		vm.pids = nil
		var err error
		pos = 0
		for k := range vals {
			var n int
			n, vals[k], err = vm.run(buf[pos:])
			if err != nil {
				break
			}
			if k == 3 {
				pids = vm.pids
			}
			pos += n
		}
		switch {
		case err == nil:
		case errors.Is(err, errPickleCut) && window < size-off && window < maxLegacyPickles:
			continue
		case errors.Is(err, errPickleCut) && window == size-off:
			return 0, torn("torch-legacy", "cut at byte %d, inside its pickles", size)
		case errors.Is(err, errPickleCut):
			return 0, unchecked("torch-legacy", "its pickles are over %d bytes", maxLegacyPickles)
		case errors.Is(err, errPickleOdd):
			return 0, unchecked("torch-legacy", "%v", err)
		default:
			var te *tornError
			if errors.As(err, &te) {
				return 0, torn("torch-legacy", "%s (in the pickles of the save at byte %d)", te.what, off)
			}
			return 0, err
		}
		break
	}

	elem := map[string]int64{}
	for _, p := range pids {
		if p.kind != pTuple || len(p.items) < 5 || p.items[0].kind != pStr || p.items[0].s != "storage" {
			return 0, unchecked("torch-legacy", "a persistent id that is not a storage")
		}
		typ, key := p.items[1], p.items[2]
		if typ.kind != pGlobal || key.kind != pStr {
			return 0, unchecked("torch-legacy", "a storage's persistent id without its type and key")
		}
		name, ok := strings.CutPrefix(typ.s, "torch ")
		size, known := storageElemSize[name]
		if !ok || !known {
			return 0, unchecked("torch-legacy", "storage type %q of unknown element size", typ.s)
		}
		elem[key.s] = size
	}
	keys := vals[4]
	if keys == nil || keys.kind != pList {
		return 0, unchecked("torch-legacy", "the fifth pickle is not the list of storage keys")
	}
	at := off + int64(pos)
	var b [8]byte
	for k, key := range keys.items {
		es, ok := elem[key.s]
		if key.kind != pStr || !ok {
			return 0, unchecked("torch-legacy", "storage key %q is not in the object's persistent ids", key.s)
		}
		if size-at < 8 {
			return 0, torn("torch-legacy", "cut at byte %d, before the element count of storage %d of %d", size, k+1, len(keys.items))
		}
		if err := readFull(r, b[:], at); err != nil {
			return 0, err
		}
		n := binary.LittleEndian.Uint64(b[:])
		if n > math.MaxInt64/uint64(es) {
			return 0, torn("torch-legacy", "storage %d of %d at byte %d has an element count of %d", k+1, len(keys.items), at, n)
		}
		need := int64(n) * es
		if need > size-at-8 {
			return 0, torn("torch-legacy", "cut at byte %d, inside storage %d of %d (%d bytes from byte %d)", size, k+1, len(keys.items), need, at+8)
		}
		at += 8 + need
	}
	return at, nil
}

// legacyPrefix reports whether head, after PROTO and an optional FRAME, is
// the magic-number pickle of a legacy save.
func legacyPrefix(head []byte) bool {
	if len(head) < 2 || head[0] != 0x80 {
		return false
	}
	rest := head[2:]
	if len(rest) >= 9 && rest[0] == 0x95 {
		rest = rest[9:]
	}
	return bytes.HasPrefix(rest, torchMagic)
}
