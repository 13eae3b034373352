#!/usr/bin/env bash
# ranks.sh: how lifeboat's store traffic grows with the number of ranks of
# a job, against one local MinIO server, in one run.
#
#   bench/ranks.sh            # from the repository root
#
# For 1, 8, 32, 128 and 512 ranks (bench/ranksbench has the details), prints
# Markdown tables of:
#   1. the time from the last rank's commit until checkpoint.Latest returns
#      the step, and the requests per rank per commit, by kind;
#   2. the requests per rank per second while the ranks watch for a
#      job-wide stop (coord) and nothing happens;
#   3. the cost (LIST pages, GETs, time) of restore's "latest" and of ls as
#      steps x ranks grow, with rank 0 pruning to --keep 3, of every rank's
#      "latest" at once, and of rank 0's prune; and once of "latest" and ls
#      over 1,000 ranks x 3 steps;
#   4. the requests of every rank's restore at once (a job's restart):
#      LIST pages and GETs of manifests and completion records;
#   5. the requests per rank of each commit of PREFILL_RANKS ranks into a
#      prefix pre-filled with PREFILL chunks (what a job with 1 GiB per
#      rank has stored), to compare with 1.
# Each size's rows are printed as soon as it is measured, and every table
# again at the end.
# The ranks run in one process, each with its own S3 client, Uploader and
# directory; every client counts its requests. Environment:
#   RANKS=LIST      numbers of ranks, comma-separated (default 1,8,32,128,512)
#   STEPS=N         steps every rank commits (default 4)
#   LATEST_RANKS=N  ranks of the one large "latest" measurement (default 1000, 0: none)
#   PREFILL=N       chunks stored beforehand for 5. (default 100000, 0: none)
#   PREFILL_RANKS=N ranks of 5. (default 32)
#   IDLE_ONLY=1     measure only 2. (the idle watching), at RANKS
#   WATCH_WINDOW=D  how long the ranks watch in 2. (default 5s, at a 500ms interval)
#   BENCH_DIR=DIR   scratch space (default: a new temp dir, removed after)
#   LIFEBOAT_CACHE  where tool binaries are cached (see scripts/minio.sh)
set -euo pipefail

cd "$(dirname "$0")/.."
RANKS=${RANKS:-1,8,32,128,512}
STEPS=${STEPS:-4}
LATEST_RANKS=${LATEST_RANKS:-1000}

# shellcheck disable=SC1091
. scripts/lib.sh # start_minio
log() { printf 'ranks.sh: %s\n' "$*" >&2; }

scripts/minio.sh install >/dev/null

work=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$work"
cleanup() {
	scripts/minio.sh stop "$work/minio" || true
	[[ -n ${BENCH_DIR:-} ]] || rm -rf "$work"
}
trap cleanup EXIT

log "building ranksbench"
go build -o "$work/ranksbench" ./bench/ranksbench

start_minio "$work/minio"
log "machine: $(nproc) cores, $(uname -r)"
idle=()
[[ ${IDLE_ONLY:-} != 1 ]] || idle=(-idle-only)
"$work/ranksbench" -work "$work/runs" -ranks "$RANKS" -steps "$STEPS" -keep 3 -latest-ranks "$LATEST_RANKS" -watch-window "${WATCH_WINDOW:-5s}" \
	-prefill "${PREFILL:-100000}" -prefill-ranks "${PREFILL_RANKS:-32}" "${idle[@]}"
