//go:build !cgo

package gpu

import "fmt"

// Open reports that this binary cannot talk to NVML: go-nvml needs cgo and
// the release binary is built with CGO_ENABLED=0. The error wraps ErrNoNVML,
// so the caller plans unchecked, as on a machine without a driver.
func Open() (Driver, error) {
	return nil, fmt.Errorf("gpu: NVML support not compiled in (built with CGO_ENABLED=0): %w", ErrNoNVML)
}
