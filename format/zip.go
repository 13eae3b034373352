package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Zip records (APPNOTE.TXT 4.3): the end of central directory record ends
// the file, preceded by the zip64 locator and zip64 record when present,
// and preceded by the central directory.
const (
	eocdSig        = 0x06054b50
	eocdLen        = 22
	maxComment     = 0xffff
	zip64LocSig    = 0x07064b50
	zip64LocLen    = 20
	zip64EOCDSig   = 0x06064b50
	zip64EOCDLen   = 56
	cdHeaderSig    = 0x02014b50
	cdHeaderLen    = 46
	localHeaderSig = 0x04034b50
	zip64FixedLen  = 12 // signature and size field, not counted in the record's size
)

// checkZip checks a file of one or more zip archives back to back, as
// torch.save writes them into a PyTorch distributed checkpoint's shard.
// From the end of the file, each archive's end-of-central-directory record
// must end where the next archive begins (or the file ends), and its
// central directory and first local header must lie where the record says;
// the first archive must begin at byte 0. A cut archive has lost its end
// record; an archive with bytes appended no longer ends with one. Bytes
// before a whole archive that are not an archive (an item no check
// recognises) make the file ErrUnchecked, not torn. Per archive it reads
// the end record (its tail when it has a comment) and two headers.
func checkZip(r io.ReaderAt, size int64) error {
	end, n := size, 0
	for end > 0 || n == 0 {
		start, err := zipEndingAt(r, end)
		if err != nil {
			var te *tornError
			if n == 0 || !errors.As(err, &te) {
				return err
			}
			return unchecked("zip", "the %d bytes before the %d whole archive(s) from byte %d on are not a zip archive (%s)", end, n, end, te.what)
		}
		n++
		end = start
	}
	return nil
}

// zipEndingAt checks the zip archive whose end record ends at byte end of
// the file and returns the byte where the archive begins.
func zipEndingAt(r io.ReaderAt, end int64) (int64, error) {
	if end < eocdLen {
		return 0, torn("zip", "%d bytes is too short for an end-of-central-directory record", end)
	}
	var rec []byte
	var eocdAt int64
	// Most archives have no comment: the record is the last 22 bytes.
	last := make([]byte, eocdLen)
	if err := readFull(r, last, end-eocdLen); err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint32(last) == eocdSig && binary.LittleEndian.Uint16(last[20:]) == 0 {
		rec, eocdAt = last, end-eocdLen
	} else {
		tailLen := min(end, eocdLen+maxComment)
		tailAt := end - tailLen
		tail := make([]byte, tailLen)
		if err := readFull(r, tail, tailAt); err != nil {
			return 0, err
		}
		// The last record whose comment ends exactly at end.
		eocd := -1
		for i := len(tail) - eocdLen; i >= 0; i-- {
			if binary.LittleEndian.Uint32(tail[i:]) == eocdSig &&
				int(binary.LittleEndian.Uint16(tail[i+20:])) == len(tail)-i-eocdLen {
				eocd = i
				break
			}
		}
		if eocd < 0 {
			return 0, torn("zip", "no end-of-central-directory record ends the archive at byte %d: cut short, or bytes appended", end)
		}
		rec, eocdAt = tail[eocd:], tailAt+int64(eocd)
	}
	entries := uint64(binary.LittleEndian.Uint16(rec[10:]))
	cdSize := uint64(binary.LittleEndian.Uint32(rec[12:]))
	cdOff := uint64(binary.LittleEndian.Uint32(rec[16:]))
	cdEnd := uint64(eocdAt) // where the central directory must end
	record := "end-of-central-directory record"

	if eocdAt >= zip64LocLen {
		loc := make([]byte, zip64LocLen)
		if err := readFull(r, loc, eocdAt-zip64LocLen); err != nil {
			return 0, err
		}
		if binary.LittleEndian.Uint32(loc) == zip64LocSig {
			locAt := uint64(eocdAt - zip64LocLen)
			rec64, recAt, err := zip64Record(r, locAt, binary.LittleEndian.Uint64(loc[8:]))
			if err != nil {
				return 0, err
			}
			entries = binary.LittleEndian.Uint64(rec64[32:])
			cdSize = binary.LittleEndian.Uint64(rec64[40:])
			cdOff = binary.LittleEndian.Uint64(rec64[48:])
			cdEnd = recAt
			record = "zip64 end-of-central-directory record"
		}
	}

	if cdSize > cdEnd {
		return 0, torn("zip", "the central directory (%d bytes) is longer than the %d bytes before the %s", cdSize, cdEnd, record)
	}
	cdStart := cdEnd - cdSize
	if cdOff > cdStart {
		return 0, torn("zip", "the %s puts the central directory at byte %d of its archive, but it lies at byte %d of the file",
			record, cdOff, cdStart)
	}
	start := int64(cdStart - cdOff)
	if entries == 0 {
		return start, nil
	}
	if cdSize < cdHeaderLen {
		return 0, torn("zip", "a central directory of %d bytes cannot hold %d entries", cdSize, entries)
	}
	var sig [4]byte
	if err := readFull(r, sig[:], int64(cdStart)); err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint32(sig[:]) != cdHeaderSig {
		return 0, torn("zip", "no central directory header at byte %d, where the %s says the directory begins", cdStart, record)
	}
	if err := readFull(r, sig[:], start); err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint32(sig[:]) != localHeaderSig {
		return 0, torn("zip", "no local file header at byte %d, where the archive ending at byte %d must begin", start, end)
	}
	return start, nil
}

// zip64Record reads the zip64 end-of-central-directory record of the
// locator at locAt, which says the record is at byte at of its archive
// (an offset in the file only for an archive at byte 0). It returns the
// record and its offset in the file.
func zip64Record(r io.ReaderAt, locAt, at uint64) ([]byte, uint64, error) {
	rec := make([]byte, zip64EOCDLen)
	// Just before the locator first: where every writer puts it, and the
	// only place to find it in an archive that does not begin at byte 0.
	for _, recAt := range []uint64{locAt - zip64EOCDLen, at} {
		if locAt < zip64EOCDLen || recAt > locAt || locAt-recAt < zip64EOCDLen {
			continue
		}
		if err := readFull(r, rec, int64(recAt)); err != nil {
			return nil, 0, err
		}
		if binary.LittleEndian.Uint32(rec) == zip64EOCDSig && binary.LittleEndian.Uint64(rec[4:]) == locAt-recAt-zip64FixedLen {
			return rec, recAt, nil
		}
	}
	return nil, 0, torn("zip", "no zip64 end-of-central-directory record where the locator at byte %d points (byte %d of its archive)", locAt, at)
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
