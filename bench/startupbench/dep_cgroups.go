//go:build cgroups

package main

// Linked for their package initialisers only.
import (
	_ "github.com/containerd/cgroups/v3/cgroup1"
	_ "github.com/containerd/cgroups/v3/cgroup2"
)
