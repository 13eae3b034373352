#!/usr/bin/env bash
# ec2-metadata-mock.sh: build AWS's amazon-ec2-metadata-mock, which the
# tests of `--notices aws` run on 127.0.0.1 (IMDSv2 tokens, spot
# interruption notices, rebalance recommendations).
#
#   scripts/ec2-metadata-mock.sh install    build (or reuse) the mock; print its path
#
# The binary is built with `go install` at a pinned version into
# ${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}/bin and reused while
# `go version -m` shows that version. Only the final path goes to stdout;
# progress goes to stderr. The tests find it through LIFEBOAT_TEST_EC2_MOCK,
# which scripts/test.sh sets.
set -euo pipefail

MODULE=github.com/aws/amazon-ec2-metadata-mock
VERSION=v1.13.0
PACKAGE=$MODULE/cmd/ec2-metadata-mock
NAME=ec2-metadata-mock

CACHE=${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}
BIN=$CACHE/bin

log() { printf 'ec2-metadata-mock.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# built BIN: does BIN exist and was it built from $MODULE@$VERSION?
built() {
	[[ -x $1 ]] && go version -m "$1" 2>/dev/null |
		awk -v m="$MODULE" -v v="$VERSION" '$1 == "mod" && $2 == m && $3 == v { ok = 1 } END { exit !ok }'
}

install() {
	local out=$BIN/$NAME
	if built "$out"; then
		printf '%s\n' "$out"
		return
	fi
	command -v go >/dev/null || die "go is not on PATH; it is needed to build $NAME"
	mkdir -p "$BIN"
	local tmp start=$SECONDS
	tmp=$(mktemp -d "$BIN/.build-$NAME.XXXXXX")
	log "building $NAME from $PACKAGE@$VERSION into $BIN"
	if ! GOBIN=$tmp CGO_ENABLED=0 go install "$PACKAGE@$VERSION" >&2; then
		rm -rf "$tmp"
		die "building $NAME failed"
	fi
	mv -f "$tmp/$NAME" "$out" # atomic: concurrent installs each produce a whole binary
	rm -rf "$tmp"
	built "$out" || die "$out does not report $MODULE $VERSION"
	log "built $NAME in $((SECONDS - start))s"
	printf '%s\n' "$out"
}

case ${1:-} in
install) install ;;
*) die "usage: ec2-metadata-mock.sh install" ;;
esac
