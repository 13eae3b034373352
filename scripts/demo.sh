#!/usr/bin/env bash
# The local demo: lifeboat supervises a toy trainer, a preemption's SIGTERM
# arrives in the middle of training, the trainer's own handler saves and
# exits 0, and lifeboat exits 143 so Kubernetes would retry the pod instead
# of marking it Completed. No cloud account, no Docker.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_pkgs python3:python3

work=$(mktemp -d "${TMPDIR:-/tmp}/lifeboat-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building lifeboat"
go build -o "$work/lifeboat" ./cmd/lifeboat

log "starting: lifeboat run --grace 10s -- python3 examples/demo/train.py"
DEMO_OUT=$work "$work/lifeboat" run --grace 10s --log-format text --termination-log "$work/termination-log" \
	-- python3 -u examples/demo/train.py &
pid=$!
sleep 2
log "preemption: sending SIGTERM to lifeboat (pid $pid), as the kubelet would"
start=$(date +%s%N)
kill -TERM "$pid"
set +e
wait "$pid"
code=$?
set -e
end=$(date +%s%N)
log "lifeboat exited $code after $(((end - start) / 1000000)) ms (143: preempted, the Job retries; the trainer itself exited 0)"
log "trainer saved step $(cat "$work/saved_step")"
log "termination log: $(cat "$work/termination-log")"
[ "$code" = 143 ] || { log "unexpected exit code $code"; exit 1; }
