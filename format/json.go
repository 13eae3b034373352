package format

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// checkJSON requires one whole JSON value and nothing after it but white
// space. It reads the file as a stream of tokens, so memory is bounded by
// the longest string, not the file.
func checkJSON(r io.ReaderAt, size int64) error {
	dec := json.NewDecoder(bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 64<<10))
	depth, values := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if values == 1 && depth == 0 {
				return nil
			}
			return fmt.Errorf("format: json: cut at byte %d (%d levels open): %w", dec.InputOffset(), depth, ErrTorn)
		}
		if err != nil {
			return fmt.Errorf("format: json: at byte %d: %v: %w", dec.InputOffset(), err, ErrTorn)
		}
		if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
			depth++
		} else if ok {
			depth--
		}
		if depth == 0 {
			values++
			if values > 1 {
				return fmt.Errorf("format: json: more than one value (at byte %d): %w", dec.InputOffset(), ErrTorn)
			}
		}
	}
}
