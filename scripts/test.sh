#!/usr/bin/env bash
# Runs lifeboat's whole test suite: installs what the tests need, builds (or
# reuses) and starts a MinIO server on 127.0.0.1, runs `go test -race ./...`
# against it, runs the Python tests, builds the Docker image and runs the
# preempt-and-resume cycle in real Docker, and stops the server.
#
#   scripts/test.sh [go test flags...]      e.g. scripts/test.sh -run TestExitCodes ./e2e/
#
# With CI set (or LIFEBOAT_TEST_DISALLOW_SKIP=1) a test that would skip for a
# missing prerequisite fails instead. LIFEBOAT_TEST_DOCKER=0 leaves out the
# image build; LIFEBOAT_K8S_E2E=0 leaves out the preemption on a one-node
# Kubernetes cluster (scripts/k8s-e2e.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

need_pkgs unshare:util-linux flock:util-linux python3:python3 sh:dash curl:curl git:git etcd:etcd-server
# Real frameworks as real parts: the tests save and load with Debian's
# PyTorch and numpy.
need_pymods torch:python3-torch numpy:python3-numpy

work=$(mktemp -d "${TMPDIR:-/tmp}/lifeboat-test.XXXXXX")
prepare_pid=
cleanup() {
	# A failed phase leaves prepare's builds running: stop them all.
	{ [ -n "$prepare_pid" ] && kill -TERM -- "-$prepare_pid" 2>/dev/null && wait "$prepare_pid"; } 2>/dev/null || true
	scripts/minio.sh stop "$work/minio" >/dev/null 2>&1 || true
	scripts/minio.sh stop "$work/versitygw" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

log "MinIO server"
scripts/minio.sh install >/dev/null
scripts/minio.sh start "$work/minio" >&2
# shellcheck disable=SC1091
. "$work/minio/env"
LIFEBOAT_TEST_EC2_MOCK=$(scripts/ec2-metadata-mock.sh install)
export LIFEBOAT_TEST_EC2_MOCK

docker=0
[ "${LIFEBOAT_TEST_DOCKER:-1}" != 0 ] && docker=1

# prepare builds what the later phases need: Kubernetes' components (the
# Go tests of the Kubernetes API, the end to end), JobSet's controller,
# Volcano's scheduler and controller manager, versitygw, and the
# Docker images. The whole suite runs it beside the Go tests: those spend
# most of their time waiting on processes and servers, and a cold build
# (7 to 21 minutes of Kubernetes, the images' debootstrap) fits inside it.
prepare() {
	log "Kubernetes binaries (scripts/k8s-build.sh)"
	scripts/k8s-build.sh install >"$work/k8s-bin"
	if [ "${LIFEBOAT_K8S_E2E:-1}" != 0 ]; then
		log "JobSet's controller (scripts/jobset-build.sh)"
		scripts/jobset-build.sh install >/dev/null
		log "Volcano's scheduler and controller manager (scripts/volcano-build.sh)"
		scripts/volcano-build.sh install >/dev/null
	fi
	log "versitygw"
	scripts/minio.sh install-versitygw >/dev/null
	if ((docker)); then
		log "Docker images (scripts/docker-build.sh, the end to end's trainer)"
		scripts/docker-build.sh
		LIFEBOAT_E2E_IMAGES_ONLY=1 LIFEBOAT_E2E_REUSE_IMAGE=1 LIFEBOAT_E2E_S3=0 scripts/docker-e2e.sh
	fi
	log "prepared"
}

# go-nvml's header marks many NVML calls deprecated; cgo would print a
# warning for each of them on every build of limits/gpu.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
# The timeout guards against a hang, not a speed: e2e alone takes
# about 23 minutes on 2 idle cores, and passed 30 on a machine loaded
# four times over.
if (($# > 0)); then
	LIFEBOAT_TEST_K8S_BIN=$(scripts/k8s-build.sh install); export LIFEBOAT_TEST_K8S_BIN
	log "go test -race $*"
	go test -race -count=1 -timeout 50m "$@"
else
	# The tests that start a Kubernetes API server (package deploy and
	# e2e's TestKubeAPI; RequireKubeBinaries) run once prepare has
	# built it; a new one belongs in the second list.
	set -m # prepare gets a process group of its own, which cleanup can stop
	prepare >"$work/prepare.log" 2>&1 &
	prepare_pid=$!
	set +m
	log "go test -race ./... but the Kubernetes API tests (Kubernetes and the images build beside it)"
	# shellcheck disable=SC2046
	go test -race -count=1 -timeout 50m -skip '^TestKubeAPI$' $(go list ./... | grep -v '/deploy$')
	log "waiting for the Kubernetes build and the images"
	prepare_rc=0
	wait "$prepare_pid" || prepare_rc=$?
	prepare_pid=
	cat "$work/prepare.log" >&2
	if ((prepare_rc != 0)); then
		log "building Kubernetes, versitygw or the images failed (exit $prepare_rc; its output is above)"
		exit 1
	fi
	LIFEBOAT_TEST_K8S_BIN=$(cat "$work/k8s-bin"); export LIFEBOAT_TEST_K8S_BIN
	log "go test -race: the Kubernetes API tests"
	go test -race -count=1 -timeout 20m ./deploy/
	go test -race -count=1 -timeout 20m -run '^TestKubeAPI$' ./e2e/
fi

if (($# == 0)); then
	# A second S3 server, not MinIO: the store's conformance suite, the S3
	# tests of checkpoint and coord, and the real binary's preempt and
	# resume cycle and conditional-write probe run against it too.
	log "the S3 suites against versitygw"
	scripts/minio.sh start-versitygw "$work/versitygw" >&2
	(
		# shellcheck disable=SC1091
		. "$work/versitygw/env"
		go test -race -count=1 -timeout 20m ./storage/s3/ ./checkpoint/ ./coord/
		go test -race -count=1 -timeout 20m -run '^(TestPreemptAndResume|TestConditionalWritesProbed)$' ./e2e/
	)
	log "Python helper and example trainer"
	scripts/python-test.sh
	log "fuzzing each target briefly (make fuzz runs them long)"
	for target in FuzzDecodeManifest:./checkpoint/ FuzzParseURL:./storage/ FuzzParseRewrite:./signals/ FuzzParseDevices:./limits/gpu/ FuzzPickleStream:./format/; do
		# Before Go 1.27, a race in go's fuzzing coordinator can report its
		# own -fuzztime deadline as a failure ("context deadline exceeded",
		# no failing input), more often on a busy machine: that, and only
		# that, is run again, up to three tries in all.
		for try in 1 2 3; do
			if out=$(go test -run '^$' -fuzz "^${target%%:*}\$" -fuzztime "${LIFEBOAT_FUZZTIME:-10s}" "${target#*:}" 2>&1); then
				printf '%s\n' "$out"
				break
			fi
			printf '%s\n' "$out"
			if ! grep -q 'context deadline exceeded' <<<"$out" || grep -q 'Failing input written to' <<<"$out" || ((try == 3)); then
				exit 1
			fi
			log "the fuzzing engine reported its own deadline as a failure; once more"
		done
	done
	log "the README's demo (scripts/demo.sh)"
	scripts/demo.sh >/dev/null 2>&1 || { log "scripts/demo.sh failed; run it to see why"; exit 1; }
	log "both build flavours for linux/amd64 and linux/arm64, the arm64 ones tested under qemu"
	scripts/cross-test.sh >&2
fi

if ((docker)) && (($# == 0)); then
	log "Docker end to end: preempt with docker stop, resume with docker run"
	LIFEBOAT_E2E_REUSE_IMAGE=1 scripts/docker-e2e.sh >&2
fi
if [ "${LIFEBOAT_K8S_E2E:-1}" != 0 ] && (($# == 0)); then
	log "Kubernetes end to end: preemption on a one-node cluster from deploy/k8s"
	# prepare has built lifeboat:dev and the trainer image.
	LIFEBOAT_K8S_REUSE_IMAGES=$docker scripts/k8s-e2e.sh >&2
fi
log "all tests passed"
