//go:build mpb

package main

// Linked for their package initialisers only.
import (
	_ "github.com/vbauerster/mpb/v8"
)
