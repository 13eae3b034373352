# syntax=docker/dockerfile:1
#
# Multi-stage build of a static lifeboat binary into an image that holds
# nothing else. Derived trainer images copy /lifeboat out of it:
#
#   COPY --from=lifeboat:dev /lifeboat /usr/local/bin/lifeboat
#
# GO_IMAGE is any image with the Go toolchain at /usr/local/go (golang:1.26
# where a registry is reachable). scripts/docker-build.sh builds a local one
# from this machine's toolchain with `docker import`, because no image
# registry is reachable here, and passes it in.
ARG GO_IMAGE=golang:1.26
FROM ${GO_IMAGE} AS build
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

FROM scratch
COPY --from=build /out/lifeboat /lifeboat
ENTRYPOINT ["/lifeboat"]
CMD ["help"]
