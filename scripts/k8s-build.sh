#!/usr/bin/env bash
# k8s-build.sh: build (or reuse) the Kubernetes binaries that
# scripts/k8s-e2e.sh runs a one-node cluster from: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kubectl.
#
#   scripts/k8s-build.sh install    build (or reuse) them; print their directory
#
# Kubernetes is built from the Go module proxy through a small wrapper module
# that requires k8s.io/kubernetes at $VERSION and replaces each k8s.io staging
# module it requires at v0.0.0 with the matching v0.x release. The binaries go
# to ${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}/k8s/<key>, the key naming the
# Kubernetes version, the Go version and the build flags, and are reused while
# the key matches. Building them cold takes about 25 CPU-minutes. Only the
# final directory goes to stdout; progress goes to stderr.
#
# Kubernetes stays on 1.34: from 1.35 the kubelet refuses cgroup v1 by default
# and drops a fallback that containerd 1.6 (Debian's) needs.
set -euo pipefail

VERSION=${LIFEBOAT_K8S_VERSION:-v1.34.4}
STAGING=v0.${VERSION#v1.}
COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
FLAGS=(-trimpath -ldflags=-s\ -w)

CACHE=${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}

log() { printf 'k8s-build.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

key() {
	local gover
	gover=$(go env GOVERSION)
	printf '%s-%s-%s-%s\n' "$VERSION" "$gover" "$(go env GOARCH)" \
		"$(printf '%s ' "${FLAGS[@]}" "${COMMANDS[@]}" | sha256sum | cut -c1-12)"
}

complete() {
	local dir=$1 c
	for c in "${COMMANDS[@]}"; do
		[[ -x $dir/$c ]] || return 1
	done
}

install() {
	command -v go >/dev/null || die "go is not on PATH; it is needed to build Kubernetes"
	local out
	out=$CACHE/k8s/$(key)
	if complete "$out"; then
		printf '%s\n' "$out"
		return
	fi
	mkdir -p "$CACHE/k8s"
	# One build at a time: a second caller waits for the first one's result.
	exec 9>"$CACHE/k8s/.lock"
	flock 9
	if complete "$out"; then
		printf '%s\n' "$out"
		return
	fi
	local start=$SECONDS
	# Global, not local: the EXIT trap runs after install has returned.
	tmp=$(mktemp -d "$CACHE/k8s/.build.XXXXXX")
	trap 'rm -rf "${tmp:-}"' EXIT
	log "building Kubernetes $VERSION (${COMMANDS[*]}) into $out; cold this takes about 25 CPU-minutes"
	mkdir -p "$tmp/mod" "$tmp/bin"
	(
		cd "$tmp/mod"
		go mod init lifeboat-k8s-build >/dev/null 2>&1
		go mod edit -require "k8s.io/kubernetes@$VERSION"
		local gomod staging
		gomod=$(go mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
		[[ -f $gomod ]] || die "could not fetch k8s.io/kubernetes@$VERSION's go.mod"
		# Every k8s.io module that Kubernetes requires at v0.0.0 is one of its
		# staging modules, published at the matching v0.x release.
		for staging in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 }' "$gomod"); do
			go mod edit -replace "$staging=$staging@$STAGING"
		done
		cat >tools.go <<-'EOF'
			//go:build tools

			package tools

			import (
				_ "k8s.io/kubernetes/cmd/kube-apiserver"
				_ "k8s.io/kubernetes/cmd/kube-controller-manager"
				_ "k8s.io/kubernetes/cmd/kube-scheduler"
				_ "k8s.io/kubernetes/cmd/kubelet"
				_ "k8s.io/kubernetes/cmd/kubectl"
			)
		EOF
		go mod tidy >&2
		local c
		for c in "${COMMANDS[@]}"; do
			log "go build $c"
			CGO_ENABLED=0 go build "${FLAGS[@]}" -o "$tmp/bin/$c" "k8s.io/kubernetes/cmd/$c" >&2
		done
	) || die "building Kubernetes $VERSION failed"
	rm -rf "$out"
	mv "$tmp/bin" "$out"
	complete "$out" || die "$out is missing binaries after the build"
	log "built Kubernetes $VERSION in $((SECONDS - start))s"
	printf '%s\n' "$out"
}

case ${1:-} in
install) install ;;
*) die "usage: k8s-build.sh install" ;;
esac
