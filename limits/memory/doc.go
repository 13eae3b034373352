// Package memory keeps the trainer's memory use from taking lifeboat down
// with it.
//
// Inside a container with a memory limit, lifeboat (PID 1) and the trainer
// share one memory cgroup. When the trainer runs out of memory the kernel's
// OOM killer may pick any process in it, and when it picks PID 1 the
// container dies without uploading the last checkpoint. This package splits
// lifeboat's cgroup into two leaves:
//
//	<lifeboat's cgroup>/lifeboat   lifeboat itself (and, on cgroup v2, the
//	                               other processes that shared its cgroup)
//	<lifeboat's cgroup>/trainer    the trainer and every process it starts,
//	                               limited to the container's limit less a
//	                               reserve for lifeboat (default 64 MiB)
//
// so the trainer hits its own limit first and only the trainer's processes
// are candidates for the OOM kill. Kills in the trainer's cgroup are counted
// and reported (OOMKills, OOMKillCount).
//
// It handles cgroup v1 (the memory controller on its own hierarchy), hybrid
// hosts (memory on v1 while a cgroup2 hierarchy is mounted as well; the v1
// memory hierarchy is used) and cgroup v2. Where cgroupfs is read-only (an
// unprivileged pod) or the memory controller is not delegated, Setup returns
// an error wrapping ErrUnavailable and lifeboat runs as before.
//
// The kernel-facing inputs are paths (Config.Root, Config.ProcSelf), so the
// parsers and the cgroup v2 layout are tested on trees written into a
// temporary directory; cgroup files are created and written through
// github.com/containerd/cgroups/v3.
package memory
