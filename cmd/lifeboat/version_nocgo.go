//go:build !cgo

package main

// cgoEnabled: built with CGO_ENABLED=0, the static flavour (version.go).
const cgoEnabled = false
