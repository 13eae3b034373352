#!/usr/bin/env bash
# jobset-build.sh: build (or reuse) JobSet's controller, which
# scripts/k8s-e2e.sh runs against its one-node cluster, and find the
# module's CRD and webhook manifests.
#
#   scripts/jobset-build.sh install   build (or reuse) the controller; print its path
#   scripts/jobset-build.sh dir       fetch the module; print its directory
#
# The controller is the module's own main package (sigs.k8s.io/jobset at
# $VERSION, fetched through the Go module proxy), built inside the module
# with its own go.mod and go.sum, so its dependencies are exactly the
# release's. The binary goes to
# ${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}/jobset/<key>/jobset-controller,
# the key naming the JobSet version, the Go version and the build flags,
# and is reused while the key matches. One build at a time: a second caller
# waits for the first one's result; the binary appears by one rename, whole.
# Only the final path goes to stdout; progress goes to stderr.
#
# The version is the one deploy/gang_test.go checks deploy/jobset against.
set -euo pipefail

VERSION=${LIFEBOAT_JOBSET_VERSION:-v0.10.1}
MODULE=sigs.k8s.io/jobset
FLAGS=(-trimpath -ldflags=-s\ -w)

CACHE=${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}

log() { printf 'jobset-build.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

key() {
	printf '%s-%s-%s-%s\n' "$VERSION" "$(go env GOVERSION)" "$(go env GOARCH)" \
		"$(printf '%s ' "${FLAGS[@]}" | sha256sum | cut -c1-12)"
}

# moddir: the module's directory in the module cache, fetched if needed.
moddir() {
	local dir
	dir=$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -f $dir/main.go ]] || die "could not fetch $MODULE@$VERSION"
	printf '%s\n' "$dir"
}

install() {
	command -v go >/dev/null || die "go is not on PATH; it is needed to build JobSet's controller"
	local out
	out=$CACHE/jobset/$(key)/jobset-controller
	if [[ -x $out ]]; then
		printf '%s\n' "$out"
		return
	fi
	mkdir -p "$CACHE/jobset"
	exec 9>"$CACHE/jobset/.lock"
	flock 9
	if [[ -x $out ]]; then
		printf '%s\n' "$out"
		return
	fi
	local start=$SECONDS dir
	# Global, not local: the EXIT trap runs after install has returned.
	tmp=$(mktemp -d "$CACHE/jobset/.build.XXXXXX")
	trap 'rm -rf "${tmp:-}"' EXIT
	dir=$(moddir)
	log "building JobSet's controller ($MODULE@$VERSION) into ${out%/*}"
	(cd "$dir" && CGO_ENABLED=0 go build "${FLAGS[@]}" -o "$tmp/jobset-controller" .) >&2 ||
		die "building $MODULE@$VERSION failed"
	mkdir -p "${out%/*}"
	mv -f "$tmp/jobset-controller" "$out"
	log "built JobSet's controller in $((SECONDS - start))s"
	printf '%s\n' "$out"
}

case ${1:-} in
install) install ;;
dir) moddir ;;
*) die "usage: jobset-build.sh install|dir" ;;
esac
