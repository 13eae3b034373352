//go:build nethttp

package main

// Linked for their package initialisers only.
import (
	_ "net/http"
)
