#!/usr/bin/env bash
# k8s.sh: where the time goes between a preemption and the resumed
# trainer, on the one-node Kubernetes cluster of scripts/k8s-e2e.sh.
#
#   bench/k8s.sh [RUNS]     (default 5)
#
# Each run (scripts/k8s-e2e.sh's `bench` scenario, all in one cluster):
# job.yaml trains and commits; a pod of a higher priority class that needs
# the one example.com/gpu (and runs for 1 s) is created; the time from its
# creation to the replacement's trainer printing the step it resumed from
# is split into:
#   scheduler              the urgent pod's creation to lifeboat's SIGTERM
#                          (supervisor.stopping): preemption and the kubelet
#   grace                  SIGTERM to the trainer's exit: its own save
#   flush                  the trainer's exit to lifeboat's exit: the commit
#   replacement_created    lifeboat's exit to the replacement pod's creation:
#                          the kubelet's report and the Job controller
#   replacement_scheduled  to its PodScheduled: the urgent pod's 1 s and the
#                          scheduler's retry of an unschedulable pod
#   container_start        to the restore's start: sandbox, container, the
#                          store opened
#   restore                resume.restored's own seconds
#   load                   resume.restored to the trainer's "resumed from"
# (the pod's creation and scheduling times are whole seconds: the API's).
# Prints one line per run and the medians. Not a test: nothing fails on a
# slow number. LIFEBOAT_K8S_REUSE_IMAGES=1 as for scripts/k8s-e2e.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
runs=${1:-5}
scenarios=()
for ((i = 0; i < runs; i++)); do scenarios+=(bench); done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
scripts/k8s-e2e.sh "${scenarios[@]}" | tee "$out" | grep '^k8s-bench:'
echo "machine: $(nproc) cores, $(uname -r)"
awk "$AWK_MEDIAN"'
/^k8s-bench:/ { runs++; for (i = 2; i <= NF; i++) { split($i, kv, "="); sub(/s$/, "", kv[2]); v[kv[1]] = v[kv[1]] " " kv[2]; if (!(kv[1] in seen)) { seen[kv[1]] = 1; order[++n] = kv[1] } } }
END { printf "median of %d runs:", runs; for (i = 1; i <= n; i++) printf " %s=%.3fs", order[i], median(v[order[i]]); print "" }' "$out"
