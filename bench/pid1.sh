#!/usr/bin/env bash
# Measures lifeboat against tini, dumb-init and catatonit side by side:
# start-up overhead, SIGTERM-to-child latency, time to reap 1000 orphans as
# PID 1, idle RSS. Prints a Markdown table with ratios to catatonit, then
# the same figures for lifeboat as built (asynchronous preemption off, so
# SIGURG is forwarded) against the same binary with Go's default
# preemption back on (GODEBUG=asyncpreemptoff=0).
#
#   bench/pid1.sh            (root: PID namespaces are used)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_pkgs tini:tini dumb-init:dumb-init catatonit:catatonit hyperfine:hyperfine unshare:util-linux
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The release form: static, as in the image (Dockerfile).
CGO_ENABLED=0 go build -ldflags "$LIFEBOAT_LDFLAGS" -o "$work/lifeboat" ./cmd/lifeboat
go build -o "$work/pid1bench" ./bench/pid1bench
echo "machine: $(nproc) cores, $(uname -r); $(tini --version 2>&1 | head -1); dumb-init $(dumb-init --version 2>&1 | head -1); $(catatonit --version 2>&1 | head -1)" >&2
"$work/pid1bench" -lifeboat "$work/lifeboat" "$@"
