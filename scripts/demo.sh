#!/usr/bin/env bash
# The local preempt-and-resume demo, with no cloud account and no Docker:
#   1. lifeboat runs a toy trainer and uploads its checkpoints to a store
#      (a directory by default; LIFEBOAT_DEMO_MINIO=1 uses a local MinIO
#      server, and any s3:// store works the same way),
#   2. a preemption's SIGTERM arrives in the middle of training: the trainer's
#      own handler saves and exits 0, lifeboat commits that checkpoint within
#      the grace budget and exits 143 so Kubernetes would retry the pod,
#   3. a new "pod" with an empty checkpoint directory starts: lifeboat restores
#      the newest complete checkpoint and the trainer resumes from its step.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_pkgs python3:python3

work=$(mktemp -d "${TMPDIR:-/tmp}/lifeboat-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building lifeboat"
go build -ldflags "$LIFEBOAT_LDFLAGS" -o "$work/lifeboat" ./cmd/lifeboat
lb=$work/lifeboat
store="file://$work/store"
# With LIFEBOAT_DEMO_MINIO=1 the store is a local MinIO server instead
# (built with `go install` the first time, ~6 minutes, then cached).
if [ "${LIFEBOAT_DEMO_MINIO:-0}" = 1 ]; then
	need_pkgs curl:curl
	scripts/minio.sh start "$work/minio" >&2
	trap 'scripts/minio.sh stop "$work/minio" >/dev/null 2>&1; rm -rf "$work"' EXIT
	. "$work/minio/env"
	export AWS_ENDPOINT_URL=$LIFEBOAT_TEST_S3_ENDPOINT AWS_ACCESS_KEY_ID=$LIFEBOAT_TEST_S3_ACCESS_KEY \
		AWS_SECRET_ACCESS_KEY=$LIFEBOAT_TEST_S3_SECRET_KEY AWS_REGION=us-east-1 LIFEBOAT_CREATE_BUCKET=true
	store="s3://lifeboat-demo/job"
fi
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# run_pod NAME: lifeboat run with the pod's own empty checkpoint directory.
# Lifeboat's own log (JSON on stderr) goes through examples/demo/events.py,
# which shows the events a person follows; the trainer's output is as is.
# Lifeboat's pid is written to $work/NAME.pid.
run_pod() {
	{ sh -c 'echo $$ >"$0"; exec "$@"' "$work/$1.pid" \
		"$lb" run --store "$store" --dir "$work/$1" --grace 20s --settle 1s --scan-interval 250ms \
		-- python3 -u examples/demo/train.py 2>&1 1>&3 3>&- |
		python3 -u examples/demo/events.py 1>&2; } 3>&1
}

log "pod 1: lifeboat run --store $store --dir pod1 -- python3 examples/demo/train.py"
run_pod pod1 &
bg=$!
sleep 2.5
pid=$(cat "$work/pod1.pid")
log "preemption: SIGTERM to lifeboat (pid $pid), as the kubelet sends it"
t0=$(now_ms)
set +e
kill -TERM "$pid"
wait "$bg"
code=$?
set -e
log "pod 1 ended with exit code $code after $(($(now_ms) - t0)) ms (143: preempted, a Job retries it; the trainer itself exited 0)"
[ "$code" = 143 ] || { log "unexpected exit code $code"; exit 1; }

log "the store now holds (lifeboat ls):"
"$lb" ls --store "$store" >&2

log "pod 2: a new pod, empty checkpoint directory, same command"
run_pod pod2
log "pod 2 finished training; store (lifeboat ls):"
"$lb" ls --store "$store" >&2
log "demo done: the checkpoint written at SIGTERM survived the preemption and training resumed from it"
