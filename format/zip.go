package format

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Zip records (APPNOTE.TXT 4.3): the end of central directory record ends
// the file, preceded by the zip64 locator and zip64 record when present,
// and preceded by the central directory.
const (
	eocdSig       = 0x06054b50
	eocdLen       = 22
	maxComment    = 0xffff
	zip64LocSig   = 0x07064b50
	zip64LocLen   = 20
	zip64EOCDSig  = 0x06064b50
	zip64EOCDLen  = 56
	cdHeaderSig   = 0x02014b50
	cdHeaderLen   = 46
	zip64FixedLen = 12 // signature and size field, not counted in the record's size
)

// checkZip finds the end of central directory record that ends the file
// and checks that the central directory it points to lies in the file and
// ends where the end records begin. A cut zip has lost its end record; a
// zip with bytes appended no longer ends with one. It reads the tail and
// four bytes of the central directory.
func checkZip(r io.ReaderAt, size int64) error {
	if size < eocdLen {
		return torn("zip", "%d bytes is too short for an end-of-central-directory record", size)
	}
	tailLen := min(size, eocdLen+maxComment)
	tailAt := size - tailLen
	tail := make([]byte, tailLen)
	if err := readFull(r, tail, tailAt); err != nil {
		return err
	}
	// The last record whose comment ends exactly at the end of the file.
	eocd := -1
	for i := len(tail) - eocdLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(tail[i:]) == eocdSig &&
			int(binary.LittleEndian.Uint16(tail[i+20:])) == len(tail)-i-eocdLen {
			eocd = i
			break
		}
	}
	if eocd < 0 {
		return torn("zip", "no end-of-central-directory record ends the file (%d bytes): cut short, or bytes appended", size)
	}
	rec := tail[eocd:]
	eocdAt := tailAt + int64(eocd)
	entries := uint64(binary.LittleEndian.Uint16(rec[10:]))
	cdSize := uint64(binary.LittleEndian.Uint32(rec[12:]))
	cdOff := uint64(binary.LittleEndian.Uint32(rec[16:]))
	cdEnd := uint64(eocdAt) // where the central directory must end
	record := "end-of-central-directory record"

	if eocdAt >= zip64LocLen {
		loc := make([]byte, zip64LocLen)
		if err := readFull(r, loc, eocdAt-zip64LocLen); err != nil {
			return err
		}
		if binary.LittleEndian.Uint32(loc) == zip64LocSig {
			locAt := uint64(eocdAt - zip64LocLen)
			recAt := binary.LittleEndian.Uint64(loc[8:])
			if recAt > locAt || locAt-recAt < zip64EOCDLen {
				return torn("zip", "the zip64 locator at byte %d points to byte %d, not to a record before it", locAt, recAt)
			}
			rec64 := make([]byte, zip64EOCDLen)
			if err := readFull(r, rec64, int64(recAt)); err != nil {
				return err
			}
			if binary.LittleEndian.Uint32(rec64) != zip64EOCDSig {
				return torn("zip", "no zip64 end-of-central-directory record at byte %d, where its locator points", recAt)
			}
			if n := binary.LittleEndian.Uint64(rec64[4:]); n != locAt-recAt-zip64FixedLen {
				return torn("zip", "the zip64 end-of-central-directory record at byte %d says it is %d bytes, but its locator follows %d bytes after it",
					recAt, n+zip64FixedLen, locAt-recAt)
			}
			entries = binary.LittleEndian.Uint64(rec64[32:])
			cdSize = binary.LittleEndian.Uint64(rec64[40:])
			cdOff = binary.LittleEndian.Uint64(rec64[48:])
			cdEnd = recAt
			record = "zip64 end-of-central-directory record"
		}
	}

	if cdOff > cdEnd || cdSize != cdEnd-cdOff {
		return torn("zip", "the central directory (%d bytes at byte %d) does not end where the %s begins (byte %d)",
			cdSize, cdOff, record, cdEnd)
	}
	if entries == 0 {
		return nil
	}
	if cdSize < cdHeaderLen {
		return torn("zip", "a central directory of %d bytes cannot hold %d entries", cdSize, entries)
	}
	var sig [4]byte
	if err := readFull(r, sig[:], int64(cdOff)); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(sig[:]) != cdHeaderSig {
		return torn("zip", "no central directory header at byte %d, where the %s says the directory begins", cdOff, record)
	}
	return nil
}

// readFull reads len(p) bytes at off. A ReaderAt may return io.EOF with a
// full read at the end of the input; a short read means the file is
// shorter than the size it was checked at.
func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("format: read %d bytes at byte %d: %w", len(p), off, err)
}
