//go:build !cgo

package gpu

import "fmt"

// Open reports that this binary cannot talk to NVML: go-nvml needs cgo and
// the static flavour is built with CGO_ENABLED=0. The error wraps ErrNoNVML,
// so the caller plans unchecked, as on a machine without a driver.
func Open() (Driver, error) {
	return nil, fmt.Errorf("gpu: NVML support not compiled in (this is lifeboat's static flavour, built with CGO_ENABLED=0; use the gpu flavour): %w", ErrNoNVML)
}
