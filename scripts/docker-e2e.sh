#!/usr/bin/env bash
# docker-e2e.sh: lifeboat as PID 1 of a real Docker container, preempted
# with `docker stop` and resumed in a fresh container from the store.
#
#   scripts/docker-e2e.sh
#
# No image registry is needed. The base image (Debian minbase + python3) is
# made with debootstrap from the Debian mirror apt is configured with, and
# imported as lifeboat-e2e-base:SUITE; its rootfs tarball is kept under
# ${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}/e2e, so later runs (and a fresh
# dockerd) skip the debootstrap. lifeboat:dev-gpu (the trainer's lifeboat) comes from
# scripts/docker-build.sh; the trainer image from images/e2e/Dockerfile.
#
# Each cycle: run the example trainer detached with --dir on a tmpfs, wait
# for a committed checkpoint, `docker stop`, check exit code 143 (no
# SIGKILL), run a second container with an empty tmpfs and check that the
# trainer resumed from the checkpoint committed at the stop. Cycles: a
# host directory bind-mounted as a file:// store, and MinIO on the host
# (--network host) unless LIFEBOAT_E2E_S3=0: the server LIFEBOAT_TEST_S3_*
# names (scripts/test.sh starts one), else one from scripts/minio.sh.
#
# LIFEBOAT_E2E_REUSE_IMAGE=1 uses the existing lifeboat:dev and :dev-gpu instead of
# running scripts/docker-build.sh (scripts/test.sh has just built it).
# LIFEBOAT_E2E_IMAGES_ONLY=1 makes the images and stops there (scripts/test.sh
# makes them while the Go tests run).
# Exits non-zero when a check fails; the last line is
# `docker-e2e: N passed, N failed`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

CACHE=${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}
SUITE=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
BASE_IMAGE=lifeboat-e2e-base:$SUITE
TRAINER_IMAGE=lifeboat-e2e-trainer:dev
TRAIN=(python3 train.py --steps 1000000 --save-every 100 --step-time 0.01)
STOP_TIMEOUT=30

# ensure_base imports BASE_IMAGE from the cached rootfs tarball, making the
# tarball with debootstrap first when there is none.
ensure_base() {
	if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
		log "base image $BASE_IMAGE exists"
		return
	fi
	local tarball=$CACHE/e2e/debian-$SUITE-minbase-python3.tar.gz
	debootstrap_tarball "$SUITE" python3 "$tarball" || return 1
	log "importing $tarball as $BASE_IMAGE"
	docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["/bin/bash"]' "$tarball" "$BASE_IMAGE" >/dev/null
}

passed=0
failed=0
containers=()
work=
minio_dir=
timings=()

finish() {
	local rc=$?
	set +e
	if ((${#containers[@]})); then
		docker rm -f -v "${containers[@]}" >/dev/null 2>&1
	fi
	[ -n "$minio_dir" ] && scripts/minio.sh stop "$minio_dir" >/dev/null 2>&1
	[ -n "$work" ] && rm -rf "$work"
	if ((rc != 0 && failed == 0)); then
		fail "the script stopped early (exit $rc; see above)"
	fi
	((${#timings[@]})) && log "timings: ${timings[*]}"
	echo "docker-e2e: $passed passed, $failed failed"
	((failed == 0)) || exit 1
	exit "$rc"
}
trap finish EXIT

# timed NAME CMD...: runs CMD and records how long it took.
timed() {
	local name=$1 t0=$SECONDS rc=0
	shift
	"$@" || rc=$?
	timings+=("$name=$((SECONDS - t0))s")
	return "$rc"
}

# wait_log CONTAINER REGEX SECONDS: waits until the container's output
# (stdout and stderr) has a line matching REGEX; fails when the container
# exits first or the time runs out.
wait_log() {
	local c=$1 re=$2 i
	for ((i = 0; i < $3 * 4; i++)); do
		docker logs "$c" 2>&1 | grep -Eq -- "$re" && return 0
		if [ "$(docker inspect -f '{{.State.Running}}' "$c" 2>/dev/null)" != true ]; then
			docker logs "$c" 2>&1 | grep -Eq -- "$re" && return 0
			log "$c exited before printing /$re/"
			return 1
		fi
		sleep 0.25
	done
	log "$c printed no /$re/ in $3s"
	return 1
}

# last_field CONTAINER EVENT FIELD: FIELD of the last JSON log line of
# lifeboat's EVENT (numbers and booleans only).
last_field() {
	docker logs "$1" 2>&1 | grep -F "\"msg\":\"$2\"" | tail -n 1 |
		sed -n "s/.*\"$3\":\\([^,}]*\\).*/\\1/p"
}

dump_logs() {
	log "last lines of $1:"
	docker logs "$1" 2>&1 | tail -n 40 | sed 's/^/    /' >&2
}

# cycle NAME STORE DOCKER-RUN-OPTIONS...: preempts a trainer with docker
# stop once it has committed a checkpoint to STORE, then checks that a new
# container with an empty checkpoint directory resumes from the checkpoint
# committed at the stop.
cycle() {
	local name=$1 store=$2
	shift 2
	local c1=lifeboat-e2e-$$-$name-1 c2=lifeboat-e2e-$$-$name-2
	containers+=("$c1" "$c2")
	# --tmpfs: each container's /ckpt starts empty and dies with it, so
	# what the second one resumes from can only come from the store.
	local opts=(--tmpfs /ckpt -e LIFEBOAT_STORE="$store" -e LIFEBOAT_SETTLE=1s -e LIFEBOAT_SCAN_INTERVAL=500ms "$@")
	log "[$name] first run, store $store"
	docker run -d --name "$c1" "${opts[@]}" "$TRAINER_IMAGE" "${TRAIN[@]}" >/dev/null
	if ! wait_log "$c1" '"msg":"checkpoint.committed"' 90; then
		fail "[$name] first run committed no checkpoint"
		dump_logs "$c1"
		return
	fi
	pass "[$name] first run committed step $(last_field "$c1" checkpoint.committed step)"

	local cmdline
	cmdline=$(docker exec "$c1" cat /proc/1/cmdline | tr '\0' ' ')
	expect "[$name] PID 1 is lifeboat" "${cmdline%% -- *}" "/usr/local/bin/lifeboat run"
	expect "[$name] lifeboat reports pid1" "$(last_field "$c1" supervisor.started pid1)" true

	local t0 t1
	t0=$(date +%s%N)
	docker stop -t "$STOP_TIMEOUT" "$c1" >/dev/null
	t1=$(date +%s%N)
	local ms=$(((t1 - t0) / 1000000))
	log "[$name] docker stop -t $STOP_TIMEOUT took ${ms}ms"
	timings+=("$name-stop=${ms}ms")
	expect "[$name] exit code after docker stop" "$(docker inspect -f '{{.State.ExitCode}}' "$c1")" 143
	expect "[$name] not OOM-killed" "$(docker inspect -f '{{.State.OOMKilled}}' "$c1")" false
	# lifeboat logged its own exit, so it was not SIGKILLed.
	expect "[$name] lifeboat exited by itself" "$(last_field "$c1" supervisor.exit code)" 143
	local term_step committed
	term_step=$(docker logs "$c1" 2>&1 | sed -n 's/^trainer: SIGTERM at step \([0-9]*\):.*/\1/p' | tail -n 1)
	committed=$(last_field "$c1" checkpoint.committed step)
	if [ -z "$term_step" ]; then
		fail "[$name] the trainer did not save on SIGTERM"
		dump_logs "$c1"
		return
	fi
	pass "[$name] the trainer saved on SIGTERM at step $term_step; lifeboat's last commit is store step $committed"
	local stopping_line committed_line
	stopping_line=$(docker logs "$c1" 2>&1 | grep -n '"msg":"supervisor.stopping"' | tail -n 1 | cut -d: -f1)
	committed_line=$(docker logs "$c1" 2>&1 | grep -n '"msg":"checkpoint.committed"' | tail -n 1 | cut -d: -f1)
	if [ -n "$stopping_line" ] && [ -n "$committed_line" ] && ((committed_line > stopping_line)); then
		pass "[$name] the checkpoint saved at the stop was committed before exit"
	else
		fail "[$name] no checkpoint.committed after supervisor.stopping"
		dump_logs "$c1"
	fi

	log "[$name] second run, empty /ckpt"
	# The image's ENTRYPOINT (lifeboat run --) runs this command as its
	# trainer: it shows what lifeboat exported, then execs the trainer.
	docker run -d --name "$c2" "${opts[@]}" "$TRAINER_IMAGE" bash -c \
		'echo "e2e: LIFEBOAT_RESUME_STEP=${LIFEBOAT_RESUME_STEP:-none} LIFEBOAT_RESUME_DIR=${LIFEBOAT_RESUME_DIR:-none}"; exec "$@"' \
		bash "${TRAIN[@]}" >/dev/null
	if ! wait_log "$c2" '^trainer: (resumed from|no checkpoint)' 90; then
		fail "[$name] second run: the trainer did not start"
		dump_logs "$c2"
		return
	fi
	local out
	out=$(docker logs "$c2" 2>&1)
	expect "[$name] lifeboat restored the step committed at the stop" \
		"$(sed -n 's/^e2e: LIFEBOAT_RESUME_STEP=\([^ ]*\) .*/\1/p' <<<"$out")" "$committed"
	expect "[$name] the trainer resumed at the step it saved on SIGTERM" \
		"$(sed -n 's/^trainer: resumed from .* at step \([0-9]*\) .*/\1/p' <<<"$out")" "$term_step"
	docker stop -t "$STOP_TIMEOUT" "$c2" >/dev/null
	expect "[$name] second run's exit code after docker stop" "$(docker inspect -f '{{.State.ExitCode}}' "$c2")" 143
}

t_all=$SECONDS
ensure_dockerd
timed base ensure_base
if [ "${LIFEBOAT_E2E_REUSE_IMAGE:-0}" = 1 ] && docker image inspect lifeboat:dev >/dev/null 2>&1 &&
	docker image inspect lifeboat:dev-gpu >/dev/null 2>&1; then
	log "using the existing lifeboat:dev and lifeboat:dev-gpu"
else
	log "building lifeboat:dev (scripts/docker-build.sh)"
	timed lifeboat-image scripts/docker-build.sh >&2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/lifeboat-e2e.XXXXXX")
mkdir -p "$work/store"
log "building $TRAINER_IMAGE from images/e2e/Dockerfile"
if ! timed trainer-image env DOCKER_BUILDKIT=0 docker build -q -f images/e2e/Dockerfile \
	--build-arg BASE="$BASE_IMAGE" --build-arg LIFEBOAT_IMAGE=lifeboat:dev-gpu -t "$TRAINER_IMAGE" . >"$work/build.log" 2>&1; then
	cat "$work/build.log" >&2
	fail "building $TRAINER_IMAGE"
	exit 1
fi
if [ "${LIFEBOAT_E2E_IMAGES_ONLY:-0}" = 1 ]; then
	log "images ready; LIFEBOAT_E2E_IMAGES_ONLY=1 leaves out the cycles"
	exit 0
fi
timed cycle-file cycle file "file:///store" -v "$work/store:/store"
if [ -n "$(find "$work/store" -type f | head -n 1)" ]; then
	pass "[file] the host directory holds the store ($(find "$work/store" -type f | wc -l) files)"
else
	fail "[file] the host directory is empty"
fi

if [ "${LIFEBOAT_E2E_S3:-1}" != 0 ]; then
	if [ -z "${LIFEBOAT_TEST_S3_ENDPOINT:-}" ]; then
		minio_dir=$work/minio
		scripts/minio.sh start "$minio_dir" >&2
		# shellcheck disable=SC1091
		. "$minio_dir/env"
	fi
	# --network host: the container reaches the server on 127.0.0.1.
	timed cycle-s3 cycle s3 "s3://lifeboat-e2e/run-$$-$RANDOM" --network host -e LIFEBOAT_CREATE_BUCKET=true \
		-e AWS_ENDPOINT_URL="$LIFEBOAT_TEST_S3_ENDPOINT" -e AWS_REGION=us-east-1 \
		-e AWS_ACCESS_KEY_ID="$LIFEBOAT_TEST_S3_ACCESS_KEY" -e AWS_SECRET_ACCESS_KEY="$LIFEBOAT_TEST_S3_SECRET_KEY"
fi
timings+=("total=$((SECONDS - t_all))s")
