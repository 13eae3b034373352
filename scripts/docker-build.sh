#!/usr/bin/env bash
# Builds the lifeboat images of both flavours from the Dockerfile, with a
# local build image (Debian minbase with gcc, plus this machine's Go
# toolchain) instead of one from a registry, starting dockerd when none is
# running, and checks each image's binary, also as PID 1 of a container.
#
#   scripts/docker-build.sh [TAG]     (default lifeboat:dev; the gpu flavour is TAG-gpu)
#
# The build image's Debian root is made once with debootstrap and kept as a
# tarball under ${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}/docker. Its
# packages come from LIFEBOAT_DEBIAN_MIRROR when set, else from the mirror
# apt is configured with (scripts/lib.sh debootstrap_tarball).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-lifeboat:dev}
gputag=$tag-gpu
. scripts/lib.sh
ensure_dockerd

CACHE=${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}
SUITE=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
buildimage="lifeboat-build:${gover}-${SUITE}-1"

# debian_tarball makes (once) the Debian root of the build image: minbase
# with gcc and the C library's headers for cgo. It prints the tarball's
# path.
debian_tarball() {
	local tarball=$CACHE/docker/debian-$SUITE-minbase-gcc.tar.gz
	debootstrap_tarball "$SUITE" gcc,libc6-dev,ca-certificates "$tarball" >&2 || return 1
	echo "$tarball"
}

if ! docker image inspect "$buildimage" >/dev/null 2>&1; then
	tarball=$(debian_tarball)
	log "making $buildimage from $tarball and $goroot (docker import)"
	stage=$(mktemp -d)
	trap 'rm -rf "$stage"' EXIT
	tar --numeric-owner -C "$stage" -xzf "$tarball"
	mkdir -p "$stage/usr/local"
	cp -a "$goroot" "$stage/usr/local/go"
	rm -rf "$stage/usr/local/go/pkg/obj" "$stage/usr/local/go/test" "$stage/usr/local/go/api"
	# This machine's CA bundle: the build reaches the Go module proxy as
	# this machine does, through whatever TLS it trusts.
	cp /etc/ssl/certs/ca-certificates.crt "$stage/etc/ssl/certs/ca-certificates.crt"
	chmod 1777 "$stage/tmp"
	tar --numeric-owner -C "$stage" -c . | docker import \
		--change 'ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$buildimage" >/dev/null
fi

version=$(git describe --always --dirty 2>/dev/null || echo dev)
# Host networking lets the build stages reach the Go module proxy the way
# this machine does. The legacy builder builds every stage before the
# target, so the second build is all cached.
for target in static:"$tag" gpu:"$gputag"; do
	log "building ${target#*:} (--target ${target%%:*})"
	DOCKER_BUILDKIT=0 docker build -q --network host --target "${target%%:*}" \
		--build-arg GO_IMAGE="$buildimage" --build-arg GLIBC_IMAGE="$buildimage" \
		--build-arg VERSION="$version" -t "${target#*:}" . >/dev/null
done

# check_flavour IMAGE FLAVOUR: the image's lifeboat says it is FLAVOUR, and
# runs as PID 1 of a container, supervising a child (itself).
check_flavour() {
	local out
	out=$(docker run --rm "$1" version)
	echo "$out"
	case $out in
	"lifeboat $version $2 "*) ;;
	*)
		log "$1: lifeboat version printed '$out'; want the $2 flavour"
		return 1
		;;
	esac
	docker run --rm "$1" run --log-level warn -- /lifeboat version >/dev/null
}
check_flavour "$tag" static
check_flavour "$gputag" gpu
