#!/usr/bin/env bash
# minio.sh: build and run the S3 servers the integration tests and the
# storage benchmark use: MinIO, and versitygw (an S3 gateway to a
# directory) as a second, different server.
#
#   scripts/minio.sh install        build (or reuse) minio; print its path
#   scripts/minio.sh install-mc     build (or reuse) mc; print its path
#   scripts/minio.sh install-versitygw   build (or reuse) versitygw; print its path
#   scripts/minio.sh start DIR      start a MinIO server with data in DIR;
#                                   writes DIR/env (source it) and DIR/pid
#   scripts/minio.sh start-versitygw DIR   the same for versitygw
#   scripts/minio.sh stop DIR       stop the server started in DIR
#
# Binaries are built with `go install` at pinned versions into
# ${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}/bin and reused while
# `go version -m` shows the pinned version. Only the final path goes to
# stdout; progress goes to stderr.
set -euo pipefail

MINIO_MODULE=github.com/minio/minio
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
MC_MODULE=github.com/minio/mc
MC_VERSION=v0.0.0-20250313080218-cf909e1063a9
VERSITYGW_MODULE=github.com/versity/versitygw
VERSITYGW_VERSION=v1.8.0

CACHE=${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}
BIN=$CACHE/bin

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh" # free_port; log and die are this script's own
log() { printf 'minio.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# built BIN MODULE VERSION: does BIN exist and was it built from MODULE@VERSION?
built() {
	[[ -x $1 ]] && go version -m "$1" 2>/dev/null |
		awk -v m="$2" -v v="$3" '$1 == "mod" && $2 == m && $3 == v { ok = 1 } END { exit !ok }'
}

# install NAME MODULE VERSION [PKG]: build MODULE@VERSION (its package PKG,
# when not the module's root) into $BIN/NAME unless the cached binary
# matches, then print the path.
install() {
	local name=$1 module=$2 version=$3 out=$BIN/$1 pkg=$2${4:+/$4}
	if built "$out" "$module" "$version"; then
		printf '%s\n' "$out"
		return
	fi
	command -v go >/dev/null || die "go is not on PATH; it is needed to build $name"
	mkdir -p "$BIN"
	local tmp
	tmp=$(mktemp -d "$BIN/.build-$name.XXXXXX")
	log "building $name from $module@$version into $BIN (this takes several minutes)"
	GOBIN=$tmp CGO_ENABLED=0 go install "$pkg@$version" >&2 &
	local pid=$! start=$SECONDS
	while kill -0 "$pid" 2>/dev/null; do
		sleep 15
		kill -0 "$pid" 2>/dev/null && log "still building $name ($((SECONDS - start))s)"
	done
	if ! wait "$pid"; then
		rm -rf "$tmp"
		die "building $name failed"
	fi
	mv -f "$tmp/$name" "$out" # atomic: concurrent installs each produce a whole binary
	rm -rf "$tmp"
	built "$out" "$module" "$version" || die "$out does not report $module $version"
	log "built $name in $((SECONDS - start))s"
	printf '%s\n' "$out"
}

# random_word N: N lower-case hex characters after a letter prefix, so the
# value never starts with "env" (MinIO reads env* values as references).
random_word() {
	printf '%s%s\n' "$2" "$(od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n')"
}

# start_minio PORT USER PASS DIR: start MinIO in the background; $! is it.
start_minio() {
	local console
	console=$(free_port)
	MINIO_ROOT_USER=$2 MINIO_ROOT_PASSWORD=$3 MINIO_BROWSER=off \
		MINIO_UPDATE=off MINIO_CI_CD=1 \
		setsid "$(install minio "$MINIO_MODULE" "$MINIO_VERSION")" server --quiet --address "127.0.0.1:$1" \
		--console-address "127.0.0.1:$console" "$4/data" \
		</dev/null >"$4/server.log" 2>&1 &
}

# start_versitygw PORT USER PASS DIR: start versitygw on a directory (its
# posix backend, which keeps metadata in extended attributes) in the
# background; $! is it.
start_versitygw() {
	ROOT_ACCESS_KEY=$2 ROOT_SECRET_KEY=$3 \
		setsid "$(install versitygw "$VERSITYGW_MODULE" "$VERSITYGW_VERSION" cmd/versitygw)" --port "127.0.0.1:$1" \
		posix "$4/data" </dev/null >"$4/server.log" 2>&1 &
}

# ready KIND PORT: does the server answer?
ready() {
	case $1 in
	minio) curl -fsS -o /dev/null "http://127.0.0.1:$2/minio/health/ready" 2>/dev/null ;;
	# Any HTTP answer (an anonymous request is refused) means it serves.
	*) curl -sS -o /dev/null "http://127.0.0.1:$2/" 2>/dev/null ;;
	esac
}

# start KIND DIR: start a server of KIND (minio or versitygw) with data in
# DIR, and write DIR/env for the tests.
start() {
	local kind=$1 dir=${2:?usage: minio.sh start DIR}
	mkdir -p "$dir/data"
	dir=$(cd "$dir" && pwd)
	if [[ -f $dir/pid ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
		die "a server from $dir is already running (pid $(cat "$dir/pid"))"
	fi
	# Build before the attempts, so that none of them times out on it.
	if [[ $kind == minio ]]; then
		install minio "$MINIO_MODULE" "$MINIO_VERSION" >/dev/null
	else
		install versitygw "$VERSITYGW_MODULE" "$VERSITYGW_VERSION" cmd/versitygw >/dev/null
	fi
	local user pass
	user=$(random_word 10 lb)
	pass=$(random_word 20 s)
	local attempt port pid
	for attempt in 1 2 3 4 5; do
		port=$(free_port)
		"start_$kind" "$port" "$user" "$pass" "$dir"
		pid=$!
		local i
		for i in $(seq 300); do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if ready "$kind" "$port"; then
				printf '%s\n' "$pid" >"$dir/pid"
				umask 077
				cat >"$dir/env" <<-ENV
					export LIFEBOAT_TEST_S3_ENDPOINT=http://127.0.0.1:$port
					export LIFEBOAT_TEST_S3_ACCESS_KEY=$user
					export LIFEBOAT_TEST_S3_SECRET_KEY=$pass
				ENV
				log "$kind (pid $pid) ready at http://127.0.0.1:$port, data in $dir/data"
				return
			fi
			sleep 0.1
		done
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		log "attempt $attempt: $kind did not become ready on port $port; log:"
		tail -n 5 "$dir/server.log" >&2 || true
	done
	die "could not start $kind; see $dir/server.log"
}

stop() {
	local dir=${1:?usage: minio.sh stop DIR}
	[[ -f $dir/pid ]] || { log "no $dir/pid; nothing to stop"; return; }
	local pid
	pid=$(cat "$dir/pid")
	if kill "$pid" 2>/dev/null; then
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/pid"
	log "server (pid $pid) stopped"
}

case ${1:-} in
install) install minio "$MINIO_MODULE" "$MINIO_VERSION" ;;
install-mc) install mc "$MC_MODULE" "$MC_VERSION" ;;
install-versitygw) install versitygw "$VERSITYGW_MODULE" "$VERSITYGW_VERSION" cmd/versitygw ;;
start) start minio "${2:-}" ;;
start-versitygw) start versitygw "${2:-}" ;;
stop) stop "${2:-}" ;;
*) die "usage: minio.sh install | install-mc | install-versitygw | start DIR | start-versitygw DIR | stop DIR" ;;
esac
