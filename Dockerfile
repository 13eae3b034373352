# syntax=docker/dockerfile:1
#
# Multi-stage build of lifeboat in its two flavours (README, "Build
# flavours"), each a target:
#
#   docker build --target static -t lifeboat:VERSION .       (the last stage, also the default)
#   docker build --target gpu    -t lifeboat:VERSION-gpu .
#
# static: CGO_ENABLED=0, one statically linked binary in an image that holds
#   nothing else (FROM scratch). For sidecars, init containers and trainers
#   without GPUs; GPU requests are passed on to the trainer unchecked.
# gpu: built with cgo and linked against glibc, so that go-nvml can load
#   libnvidia-ml.so.1 at run time and lifeboat checks GPUs with NVML. It runs
#   in images with glibc (Paddle's are). A binary needs the newest glibc
#   symbol version it was linked against: built on glibc 2.34 or newer it
#   would need 2.34 and not start on Ubuntu 20.04 (2.31). So it is built on
#   GLIBC_IMAGE, Debian bullseye (glibc 2.31), where it asks for nothing
#   newer than GLIBC_2.3.3. Its image is GLIBC_IMAGE with /lifeboat.
#
# Trainer images copy /lifeboat out of either (images/paddle, images/example
# take the gpu one):
#
#   COPY --from=lifeboat:dev-gpu /lifeboat /usr/local/bin/lifeboat
#
# Both build for linux/amd64 and linux/arm64 (GH200, Grace):
# `docker buildx build --platform linux/amd64,linux/arm64 --target ...`
# runs every stage as the target platform (under QEMU on another machine),
# so the gpu stage compiles with that platform's own gcc.
# scripts/cross-test.sh cross-compiles all four binaries without Docker
# and tests the arm64 ones.
#
# GO_IMAGE is any image with the Go toolchain at /usr/local/go (golang:1.26
# where a registry is reachable). scripts/docker-build.sh builds a local
# Debian image with gcc and this machine's Go toolchain, because no image
# registry is reachable here, and passes it as both GO_IMAGE and
# GLIBC_IMAGE. GLIBC_IMAGE needs apt-get unless it already has gcc.
ARG GO_IMAGE=golang:1.26
ARG GLIBC_IMAGE=debian:bullseye-slim

FROM ${GO_IMAGE} AS go

FROM ${GO_IMAGE} AS build-static
ENV PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 GOFLAGS=-trimpath HOME=/tmp GOCACHE=/tmp/gocache GOMODCACHE=/tmp/gomod
WORKDIR /src
# No `go mod download`: go.mod also lists test-only modules (Kubernetes
# API types for the manifest tests), and the build fetches only what the
# binary imports.
COPY . .
ARG VERSION=dev
# The -X runtime.godebugDefault pair is signals.LinkFlag (LIFEBOAT_LDFLAGS in
# scripts/lib.sh): asynchronous preemption off, so SIGURG is forwarded too.
RUN go build -ldflags "-s -w -X main.version=${VERSION} -X runtime.godebugDefault=asyncpreemptoff=1 -X github.com/lifeboat-project/lifeboat/signals.recordedGODEBUG=asyncpreemptoff=1" -o /out/lifeboat ./cmd/lifeboat

FROM ${GLIBC_IMAGE} AS build-gpu
RUN command -v gcc >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev ca-certificates && rm -rf /var/lib/apt/lists/*; }
COPY --from=go /usr/local/go /usr/local/go
# go-nvml's header marks many NVML calls deprecated; without
# -Wno-deprecated-declarations cgo prints a warning for each.
ENV PATH=/usr/local/go/bin:$PATH CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" GOFLAGS=-trimpath HOME=/tmp GOCACHE=/tmp/gocache GOMODCACHE=/tmp/gomod
WORKDIR /src
# The modules the static build fetched, so they are fetched once.
COPY --from=build-static /tmp/gomod /tmp/gomod
COPY . .
ARG VERSION=dev
RUN go build -ldflags "-s -w -X main.version=${VERSION} -X runtime.godebugDefault=asyncpreemptoff=1 -X github.com/lifeboat-project/lifeboat/signals.recordedGODEBUG=asyncpreemptoff=1" -o /out/lifeboat ./cmd/lifeboat

FROM ${GLIBC_IMAGE} AS gpu
COPY --from=build-gpu /out/lifeboat /lifeboat
ENTRYPOINT ["/lifeboat"]
CMD ["help"]

FROM scratch AS static
COPY --from=build-static /out/lifeboat /lifeboat
ENTRYPOINT ["/lifeboat"]
CMD ["help"]
