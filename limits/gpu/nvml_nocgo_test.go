//go:build !cgo

package gpu

import (
	"errors"
	"strings"
	"testing"
)

func TestOpenWithoutCgo(t *testing.T) {
	_, err := Open()
	if !errors.Is(err, ErrNoNVML) || !strings.Contains(err.Error(), "NVML support not compiled in (built with CGO_ENABLED=0)") {
		t.Fatalf("Open = %v, want ErrNoNVML saying cgo is off", err)
	}
}
