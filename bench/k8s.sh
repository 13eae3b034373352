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
# Each run also times the same preemption with a bare shell as the trainer
# container's PID 1 (no lifeboat, nothing saved or restored: the scenario
# `bench-bare`), from the urgent pod's creation to the replacement's shell
# running; the last line gives lifeboat's share as the difference of the
# medians.
# The same preemption is also timed for a gang: deploy/jobset's JobSet of
# two pods on two GPUs, run by JobSet's controller (the scenario
# `bench-gang`; the urgent pod takes one GPU and preempts one rank, the
# other stops through the store, JobSet recreates the gang), and for
# deploy/volcano's Volcano Job of two pods run by Volcano's scheduler and
# controller manager (the scenario `bench-volcano`; the urgent pod preempts
# one rank, Volcano restarts the job at once; a run where vc-scheduler
# placed the new gang before kube-scheduler placed the urgent pod prints a
# `k8s-bench-volcano-raced` line instead). The plain Job's run and each
# gang's print one line each, `k8s-bench-job`, `k8s-bench-gang` and
# `k8s-bench-volcano`, from the urgent pod's creation to every rank
# resumed, in four consecutive phases:
#   scheduler  to the first lifeboat's SIGTERM
#   lifeboat   SIGTERM to the last rank's lifeboat exit: lifeboat's share
#              (the trainers' saves, the job-wide stop, the final uploads)
#   engine     the last exit to the last new pod's container running, in
#              two parts: recreate, to the last new pod's creation (the
#              API's whole seconds): the Job, JobSet or Volcano controller's
#              restart delay; start, from there: the urgent pod's 1 s on the GPU,
#              the scheduler, the sandbox
#   restore    to the last rank's trainer running from the restored step
# Prints one line per run and the medians. Not a test: nothing fails on a
# slow number. LIFEBOAT_K8S_REUSE_IMAGES=1 as for scripts/k8s-e2e.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
runs=${1:-5}
scenarios=()
for ((i = 0; i < runs; i++)); do scenarios+=(bench bench-bare bench-gang bench-volcano); done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
scripts/k8s-e2e.sh "${scenarios[@]}" | tee "$out" | grep '^k8s-bench'
echo "machine: $(nproc) cores, $(uname -r)"
awk "$AWK_MEDIAN"'
/^k8s-bench:/ { runs++; for (i = 2; i <= NF; i++) { split($i, kv, "="); sub(/s$/, "", kv[2]); v[kv[1]] = v[kv[1]] " " kv[2]; if (!(kv[1] in seen)) { seen[kv[1]] = 1; order[++n] = kv[1] } } }
END { printf "median of %d runs:", runs; for (i = 1; i <= n; i++) printf " %s=%.3fs", order[i], median(v[order[i]]); print "" }' "$out"
awk "$AWK_MEDIAN"'
/^k8s-bench-bare:/ { sub(/^total=/, "", $2); sub(/s$/, "", $2); v = v " " $2; n++ }
/^k8s-bench:/ { for (i = 2; i <= NF; i++) if ($i ~ /^total=/) { t = $i; sub(/^total=/, "", t); sub(/s$/, "", t); w = w " " t } }
END { if (n) printf "bare shell trainer, median of %d runs: total=%.3fs; with lifeboat: total=%.3fs; lifeboat adds %.3fs\n", n, median(v), median(w), median(w) - median(v) }' "$out"
for kind in job gang volcano; do
	awk -v kind="$kind" "$AWK_MEDIAN"'
$1 == "k8s-bench-" kind ":" { runs++; for (i = 3; i <= NF; i++) { split($i, kv, "="); sub(/s$/, "", kv[2]); v[kv[1]] = v[kv[1]] " " kv[2]; if (!(kv[1] in seen)) { seen[kv[1]] = 1; order[++n] = kv[1] } } ranks = $2 }
END { if (runs) { printf "%s (%s), median of %d runs:", kind, ranks, runs; for (i = 1; i <= n; i++) printf " %s=%.3fs", order[i], median(v[order[i]]); print "" } }' "$out"
done
