//go:build retryablehttp

package main

// Linked for their package initialisers only.
import (
	_ "github.com/hashicorp/go-retryablehttp"
)
