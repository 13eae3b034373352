//go:build cgo

package main

// cgoEnabled: built with cgo, the gpu flavour (version.go).
const cgoEnabled = true
