package format

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"strconv"
	"strings"
)

// maxNPYHeader bounds the .npy header read into memory (numpy writes a
// few hundred bytes; its own reader refuses more than 10,000 by default).
const maxNPYHeader = 1 << 20

// checkNPY checks one or more arrays of numpy's .npy format back to back
// (np.save called once or several times on one file): the magic string,
// a version, the header length, the header (a Python dict literal with
// 'descr', 'fortran_order' and 'shape'), then the data, whose size the
// shape and dtype give. Object and structured dtypes are ErrUnchecked.
func checkNPY(r io.ReaderAt, size int64) error {
	for off, n := int64(0), 1; ; n++ {
		end, err := npyArray(r, off, size)
		if err != nil {
			return err
		}
		if end == size {
			return nil
		}
		head := make([]byte, min(size-end, int64(len(npyMagic))))
		if err := readFull(r, head, end); err != nil {
			return err
		}
		if !bytes.Equal(head, npyMagic) {
			return unchecked("npy", "%d bytes no check recognises follow array %d, which ends at byte %d", size-end, n, end)
		}
		off = end
	}
}

func npyArray(r io.ReaderAt, off, size int64) (int64, error) {
	if size-off < 10 {
		return 0, torn("npy", "cut at byte %d, inside the header of the array at byte %d", size, off)
	}
	var pre [12]byte
	if err := readFull(r, pre[:min(12, size-off)], off); err != nil {
		return 0, err
	}
	var hlen, start int64
	switch pre[6] {
	case 1:
		hlen, start = int64(binary.LittleEndian.Uint16(pre[8:])), off+10
	case 2, 3:
		if size-off < 12 {
			return 0, torn("npy", "cut at byte %d, inside the header of the array at byte %d", size, off)
		}
		hlen, start = int64(binary.LittleEndian.Uint32(pre[8:])), off+12
	default:
		return 0, unchecked("npy", "format version %d.%d", pre[6], pre[7])
	}
	if hlen > maxNPYHeader {
		return 0, unchecked("npy", "a header of %d bytes", hlen)
	}
	if hlen > size-start {
		return 0, torn("npy", "cut at byte %d, inside the %d-byte header at byte %d", size, hlen, start)
	}
	h := make([]byte, hlen)
	if err := readFull(r, h, start); err != nil {
		return 0, err
	}
	header := string(h)
	item, ok := npyItemSize(npyField(header, "descr"))
	if !ok {
		return 0, unchecked("npy", "dtype %s", npyField(header, "descr"))
	}
	count, ok := npyCount(npyField(header, "shape"))
	if !ok {
		return 0, torn("npy", "the header at byte %d has no readable shape: %q", start, header)
	}
	data := start + hlen
	if count > 0 && item > (math.MaxInt64-data)/count {
		return 0, torn("npy", "the shape %s is too large", npyField(header, "shape"))
	}
	end := data + count*item
	if end > size {
		return 0, torn("npy", "cut at byte %d: the array of shape %s and dtype %s at byte %d needs %d bytes of data from byte %d",
			size, npyField(header, "shape"), npyField(header, "descr"), off, count*item, data)
	}
	return end, nil
}

// npyField returns the text of key's value in a header dict literal
// ("'<f4'", "(3, 4)"), or "".
func npyField(header, key string) string {
	_, v, ok := strings.Cut(header, "'"+key+"':")
	if !ok {
		return ""
	}
	v = strings.TrimSpace(v)
	switch {
	case strings.HasPrefix(v, "'"):
		if end := strings.IndexByte(v[1:], '\''); end >= 0 {
			return v[:end+2]
		}
	case strings.HasPrefix(v, "("):
		if end := strings.IndexByte(v, ')'); end >= 0 {
			return v[:end+1]
		}
	}
	return ""
}

// npyItemSize is the size of one element of a simple dtype ("'<f4'",
// "'|b1'", "'<U10'", "'<M8[ns]'"); false for object and structured dtypes.
func npyItemSize(descr string) (int64, bool) {
	d, ok := strings.CutPrefix(descr, "'")
	if d, ok = strings.CutSuffix(d, "'"); !ok || d == "" {
		return 0, false
	}
	if strings.ContainsAny(d[:1], "<>|=") {
		d = d[1:]
	}
	if unit := strings.IndexByte(d, '['); unit >= 0 {
		d = d[:unit]
	}
	if len(d) < 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(d[1:], 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	switch d[0] {
	case 'b', 'i', 'u', 'f', 'c', 'S', 'a', 'V', 'M', 'm':
		return n, true
	case 'U':
		return 4 * n, true
	}
	return 0, false
}

// npyCount is the number of elements of a shape tuple ("(3, 4)", "()").
func npyCount(shape string) (int64, bool) {
	s, ok := strings.CutPrefix(shape, "(")
	if s, ok = strings.CutSuffix(s, ")"); !ok {
		return 0, false
	}
	count := int64(1)
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSuffix(strings.TrimSpace(f), "L")
		if f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return 0, false
		}
		if n != 0 && count > math.MaxInt64/n {
			return 0, false
		}
		count *= n
	}
	return count, true
}
