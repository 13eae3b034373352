#!/usr/bin/env bash
# volcano-build.sh: build (or reuse) Volcano's scheduler and controller
# manager, which scripts/k8s-e2e.sh runs against its one-node cluster, and
# find the module's CRDs.
#
#   scripts/volcano-build.sh install   build (or reuse) both; print their directory
#   scripts/volcano-build.sh dir       fetch the module; print its directory
#
# The binaries are the module's own main packages (volcano.sh/volcano at
# $VERSION, fetched through the Go module proxy: cmd/scheduler and
# cmd/controller-manager), built inside the module with its own go.mod and
# go.sum (its replace directives pin the k8s.io modules, so `go install`
# refuses it), so their dependencies are exactly the release's. They go to
# ${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}/volcano/<key>/ as vc-scheduler
# and vc-controller-manager, the key naming the Volcano version, the Go
# version and the build flags, and are reused while the key matches. One
# build at a time: a second caller waits for the first one's result; the
# directory appears by one rename, whole. Only the final path goes to
# stdout; progress goes to stderr. The admission webhook manager is not
# built: scripts/k8s-e2e.sh runs the Job without it.
#
# The version is the one deploy/gang_test.go checks deploy/volcano against.
set -euo pipefail

VERSION=${LIFEBOAT_VOLCANO_VERSION:-v1.10.0}
MODULE=volcano.sh/volcano
FLAGS=(-trimpath -ldflags=-s\ -w)

CACHE=${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}

log() { printf 'volcano-build.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

key() {
	printf '%s-%s-%s-%s\n' "$VERSION" "$(go env GOVERSION)" "$(go env GOARCH)" \
		"$(printf '%s ' "${FLAGS[@]}" | sha256sum | cut -c1-12)"
}

# moddir: the module's directory in the module cache, fetched if needed.
moddir() {
	local dir
	dir=$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -f $dir/cmd/scheduler/main.go ]] || die "could not fetch $MODULE@$VERSION"
	printf '%s\n' "$dir"
}

install() {
	command -v go >/dev/null || die "go is not on PATH; it is needed to build Volcano's scheduler and controllers"
	local out
	out=$CACHE/volcano/$(key)
	if [[ -x $out/vc-scheduler && -x $out/vc-controller-manager ]]; then
		printf '%s\n' "$out"
		return
	fi
	mkdir -p "$CACHE/volcano"
	exec 9>"$CACHE/volcano/.lock"
	flock 9
	if [[ -x $out/vc-scheduler && -x $out/vc-controller-manager ]]; then
		printf '%s\n' "$out"
		return
	fi
	local start=$SECONDS dir
	# Global, not local: the EXIT trap runs after install has returned.
	tmp=$(mktemp -d "$CACHE/volcano/.build.XXXXXX")
	trap 'rm -rf "${tmp:-}"' EXIT
	dir=$(moddir)
	log "building Volcano's scheduler and controller manager ($MODULE@$VERSION) into $out"
	(cd "$dir" && CGO_ENABLED=0 go build "${FLAGS[@]}" -o "$tmp/" ./cmd/scheduler ./cmd/controller-manager) >&2 ||
		die "building $MODULE@$VERSION failed"
	mv "$tmp/scheduler" "$tmp/vc-scheduler"
	mv "$tmp/controller-manager" "$tmp/vc-controller-manager"
	rm -rf "$out"
	mv -T "$tmp" "$out"
	log "built Volcano's scheduler and controller manager in $((SECONDS - start))s"
	printf '%s\n' "$out"
}

case ${1:-} in
install) install ;;
dir) moddir ;;
*) die "usage: volcano-build.sh install|dir" ;;
esac
