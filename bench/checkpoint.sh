#!/usr/bin/env bash
# checkpoint.sh: lifeboat's checkpoint path next to mc, against one local
# MinIO server, in one run.
#
#   bench/checkpoint.sh            # from the repository root, as root
#
# Measures, each RUNS times, and prints Markdown tables with medians and
# ratios (bench/ckptbench has the details):
#   1. SIGTERM to durable: `lifeboat run --store --dir -- TRAINER`, whose
#      SIGTERM handler writes a 1 GiB backup/latest.pdparams and exits 0,
#      until lifeboat exits after the final commit; minus the trainer's
#      write, against `mc cp` of the same file to the same server;
#   2. re-upload of an unchanged checkpoint (checkpoint.Uploader on
#      storage/s3): bytes moved and time against the first upload;
#   3. verified `lifeboat restore` into an empty directory, with the
#      default check (crc32c) and with --verify-restore sha256, against
#      `mc cp` of the same bytes to local disk and `mc cp` plus an fsync,
#      page cache dropped before each;
#   4. the cost of the format checks: 64 state_dict-shaped pickles uploaded
#      with the checks on and off, and the checks alone over the same bytes;
#   5. SIGTERM to durable as in 1, with the trainer writing its save at each
#      of RATES (MB/s; 0 is as fast as it goes), against the trainer's write
#      time and `mc cp` of the finished file, in the same run.
# Peak RSS is from /usr/bin/time -v. Environment:
#   RUNS=N          runs of each measurement (default 3)
#   SIZE=BYTES      checkpoint size (default 1073741824)
#   RATES=LIST      measurement 5's write rates in MB/s (default 0,300,100;
#                   empty skips it)
#   RATES_ONLY=1    run measurement 5 alone
#   BEFORE=PATH     measurement 5 also times this lifeboat binary (an
#                   earlier version) at each rate, in the same runs
#   RESTORE_ONLY=1  measurements 1 (which stores the checkpoint) and 3 only
#   BENCH_DIR=DIR   scratch space (default: a new temp dir, removed after)
#   LIFEBOAT_CACHE  where tool binaries are cached (see scripts/minio.sh)
set -euo pipefail

cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SIZE=${SIZE:-$((1 << 30))}
RATES=${RATES-0,300,100}
RATES_ONLY=${RATES_ONLY:-0}

# shellcheck disable=SC1091
. scripts/lib.sh # need_pkgs, start_minio
log() { printf 'checkpoint.sh: %s\n' "$*" >&2; }
[[ -x /usr/bin/time ]] || need_pkgs /usr/bin/time:time

mc=$(scripts/minio.sh install-mc)
scripts/minio.sh install >/dev/null

work=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$work"
cleanup() {
	scripts/minio.sh stop "$work/minio" || true
	[[ -n ${BENCH_DIR:-} ]] || rm -rf "$work"
}
trap cleanup EXIT

log "building lifeboat and ckptbench"
go build -ldflags "$LIFEBOAT_LDFLAGS" -o "$work/lifeboat" ./cmd/lifeboat
go build -o "$work/ckptbench" ./bench/ckptbench

start_minio "$work/minio"
EP=$AWS_ENDPOINT_URL
export MC_CONFIG_DIR=$work/mc MC_HOST_ckpt="http://$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY@${EP#http://}"

log "machine: $(nproc) cores, $(uname -r), mc $("$mc" --version 2>/dev/null | head -1)"
"$work/ckptbench" -lifeboat "$work/lifeboat" -mc "$mc" -mc-alias ckpt -work "$work/runs" -server-pid "$(cat "$work/minio/pid")" \
	-runs "$RUNS" -size "$SIZE" -rates "$RATES" -rates-only="$([[ $RATES_ONLY == 1 ]] && echo true || echo false)" \
	-before "${BEFORE:-}" ${RESTORE_ONLY:+-restore-only}
