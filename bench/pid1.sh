#!/usr/bin/env bash
# Measures lifeboat, in both build flavours (static: CGO_ENABLED=0; gpu:
# cgo, glibc), against tini, dumb-init and catatonit side by side: start-up
# overhead, SIGTERM-to-child latency, time to reap 1000 orphans as PID 1,
# idle RSS. Prints a Markdown table with ratios to catatonit, then
# the same figures for the static lifeboat as built (asynchronous
# preemption off, so SIGURG is forwarded) against the same binary with
# Go's default preemption back on (GODEBUG=asyncpreemptoff=0).
#
#   bench/pid1.sh [pid1bench flags]     (root: PID namespaces are used)
#   bench/pid1.sh -runs 100             (fewer TERM->child runs: shorter)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_pkgs tini:tini dumb-init:dumb-init catatonit:catatonit hyperfine:hyperfine unshare:util-linux gcc:gcc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The two flavours as the Dockerfile builds them: static (CGO_ENABLED=0)
# and gpu (cgo; go-nvml's header needs -Wno-deprecated-declarations).
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $LIFEBOAT_LDFLAGS" -o "$work/lifeboat" ./cmd/lifeboat
CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
	go build -trimpath -ldflags "-s -w $LIFEBOAT_LDFLAGS" -o "$work/lifeboat-gpu" ./cmd/lifeboat
go build -o "$work/pid1bench" ./bench/pid1bench
echo "machine: $(nproc) cores, $(uname -r); $(tini --version 2>&1 | head -1); dumb-init $(dumb-init --version 2>&1 | head -1); $(catatonit --version 2>&1 | head -1)" >&2
"$work/pid1bench" -lifeboat "$work/lifeboat" -lifeboat-gpu "$work/lifeboat-gpu" "$@"
