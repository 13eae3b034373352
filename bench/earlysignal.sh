#!/usr/bin/env bash
# earlysignal.sh: how long after its exec a SIGTERM still kills lifeboat
# uncaught (docs/RELIABILITY.md, "The first moment"), in both build
# flavours, as PID 1 of a new PID namespace and not, next to the floor of
# any Go program that does the same (bench/earlysignalbench/floor).
#
#   bench/earlysignal.sh [earlysignalbench flags]      (root)
#   BASE=REV bench/earlysignal.sh                      (REV's lifeboat too)
#   RT=1 bench/earlysignal.sh                          (at real-time priority)
#
# BASE builds both flavours of that revision (git archive) beside the
# current ones. RT runs the bench and every init it starts under
# `chrt -f 20`, so that other load on the machine does not stretch the
# windows (docs/RELIABILITY.md gives both).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_pkgs gcc:gcc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"

flavours() { # flavours SRC OUT: OUT-static and OUT-gpu built from SRC
	(cd "$1" && CGO_ENABLED=0 go build -trimpath -ldflags "$LIFEBOAT_LDFLAGS" -o "$2-static" ./cmd/lifeboat)
	(cd "$1" && CGO_ENABLED=1 go build -trimpath -ldflags "$LIFEBOAT_LDFLAGS" -o "$2-gpu" ./cmd/lifeboat)
}
flavours . "$work/lifeboat"
CGO_ENABLED=0 go build -trimpath -o "$work/floor" ./bench/earlysignalbench/floor
go build -o "$work/bench" ./bench/earlysignalbench
args=(-lifeboat "$work/lifeboat-static" -lifeboat-gpu "$work/lifeboat-gpu" -floor "$work/floor")
if [ -n "${BASE:-}" ]; then
	mkdir "$work/base"
	git archive "$BASE" | tar -x -C "$work/base"
	flavours "$work/base" "$work/base"
	args+=(-base "$work/base-static" -base-gpu "$work/base-gpu")
fi
echo "machine: $(nproc) cores, $(uname -r); $(go version)${BASE:+; base $BASE}${RT:+; real-time priority}" >&2
if [ -n "${RT:-}" ]; then
	chrt -f 20 "$work/bench" "${args[@]}" "$@"
else
	"$work/bench" "${args[@]}" "$@"
fi
