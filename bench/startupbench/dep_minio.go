//go:build minio

package main

// Linked for their package initialisers only.
import (
	_ "github.com/minio/minio-go/v7"
	_ "github.com/minio/minio-go/v7/pkg/credentials"
)
