#!/usr/bin/env bash
# Builds the lifeboat image from the Dockerfile with a local Go image made
# from this machine's Go toolchain (no registry needed), starting dockerd
# when none is running.
#
#   scripts/docker-build.sh [TAG]     (default lifeboat:dev)
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-lifeboat:dev}
. scripts/lib.sh
ensure_dockerd
need_pkgs busybox:busybox-static

goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
goimage="lifeboat-go:${gover}-1"
if ! docker image inspect "$goimage" >/dev/null 2>&1; then
	log "making $goimage from $goroot (docker import)"
	stage=$(mktemp -d)
	trap 'rm -rf "$stage"' EXIT
	mkdir -p "$stage/usr/local" "$stage/etc/ssl/certs" "$stage/tmp" "$stage/bin"
	# A static busybox gives the build stage the /bin/sh that RUN needs.
	cp "$(command -v busybox)" "$stage/bin/busybox"
	ln -s busybox "$stage/bin/sh"
	cp -a "$goroot" "$stage/usr/local/go"
	rm -rf "$stage/usr/local/go/pkg/obj" "$stage/usr/local/go/test" "$stage/usr/local/go/api"
	cp /etc/ssl/certs/ca-certificates.crt "$stage/etc/ssl/certs/"
	chmod 1777 "$stage/tmp"
	tar -C "$stage" -c . | docker import - "$goimage" >/dev/null
fi
log "building $tag"
# Host networking lets the build stage reach the Go module proxy the way
# this machine does.
DOCKER_BUILDKIT=0 docker build -q --network host --build-arg GO_IMAGE="$goimage" \
	--build-arg VERSION="$(git describe --always --dirty 2>/dev/null || echo dev)" -t "$tag" . >/dev/null
docker run --rm "$tag" version
# The image's binary as PID 1 of a container, supervising a child (itself).
docker run --rm "$tag" run --log-level warn -- /lifeboat version
