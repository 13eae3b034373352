package main

import (
	"fmt"
	"runtime"
)

// The two build flavours (README, "Build flavours"). Which one a binary is
// follows from whether it was built with cgo (version_cgo.go,
// version_nocgo.go), and so whether limits/gpu's NVML driver, which go-nvml
// builds only with cgo, is in it.
const (
	// flavourStatic is CGO_ENABLED=0: one static binary that needs no libc
	// (FROM scratch, sidecars, nodes without GPUs). GPU requests are passed
	// on to the trainer unchecked.
	flavourStatic = "static"
	// flavourGPU is built with cgo and linked against glibc, so go-nvml can
	// load libnvidia-ml.so.1 at run time and GPU plans are checked.
	flavourGPU = "gpu"
)

// flavour is this binary's build flavour.
func flavour() string {
	if cgoEnabled {
		return flavourGPU
	}
	return flavourStatic
}

// versionLine is what `lifeboat version` prints: the version, the flavour
// and what it means, and the platform.
func versionLine() string {
	what := "CGO_ENABLED=0, no libc needed; no NVML: GPU requests are passed on unchecked"
	if cgoEnabled {
		what = "cgo, glibc; NVML loaded from libnvidia-ml.so.1 at run time"
	}
	return fmt.Sprintf("lifeboat %s %s (%s) %s/%s %s", version, flavour(), what, runtime.GOOS, runtime.GOARCH, runtime.Version())
}
