//go:build !cgo

package gpu

import (
	"errors"
	"strings"
	"testing"
)

func TestOpenWithoutCgo(t *testing.T) {
	_, err := Open()
	if !errors.Is(err, ErrNoNVML) || !strings.Contains(err.Error(), "NVML support not compiled in (this is lifeboat's static flavour") {
		t.Fatalf("Open = %v, want ErrNoNVML saying cgo is off", err)
	}
}
