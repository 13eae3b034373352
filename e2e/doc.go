// Package e2e tests lifeboat as users run it: TestMain builds the real
// binary from cmd/lifeboat and a trainer stand-in (testdata/child), and the
// tests run lifeboat as a plain process (where it makes itself a child
// subreaper), as PID 1 of a new PID namespace and as an unprivileged user,
// against real stores (a directory, the MinIO server scripts/test.sh
// starts), real trainers (testdata: Python with Debian's PyTorch) and a
// Kubernetes API server where one is built. They read only what a user
// reads: exit codes, log lines, the termination log, the JSON of ls,
// verify and doctor (output_test.go), and what the store and --dir hold.
// The tests of package main's own functions are in cmd/lifeboat.
package e2e
