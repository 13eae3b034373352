#!/usr/bin/env bash
# storage.sh: upload and download throughput of storage/s3 next to s5cmd, mc
# and rclone, against one local MinIO server, in one run.
#
#   bench/storage.sh            # from the repository root
#
# Workloads: one 1 GiB file, and 64 files of 16 MiB. Each tool uploads them
# to its own prefix and downloads them back; each round runs every tool in
# turn, starting with a different one. Prints, as a Markdown table, the
# median and best MB/s over the rounds, the ratio of medians to the best
# peer, client CPU (user+system, from /usr/bin/time) and MinIO's CPU (from
# /proc) per GiB moved, and peak RSS; then lifeboat's peak RSS for one
# upload and one download at each of several object sizes. Environment:
#   ROUNDS=N        rounds (default 5)
#   BENCH_DIR=DIR   scratch space (default: a new temp dir, removed after)
#   RSS_SIZES_MIB   object sizes of the peak-RSS table (default "256 1024 4096")
#   LIFEBOAT_CACHE  where tool binaries are cached (see scripts/minio.sh)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. scripts/lib.sh # start_minio, AWK_MEDIAN
ROUNDS=${ROUNDS:-5}
RSS_SIZES_MIB=${RSS_SIZES_MIB:-256 1024 4096}
CACHE=${LIFEBOAT_CACHE:-$HOME/.cache/lifeboat}
S5CMD_VERSION=v2.3.0

log() { printf 'storage.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing; install the Debian package 'time'"
command -v rclone >/dev/null || die "rclone is missing; install the Debian package 'rclone'"

minio=$(scripts/minio.sh install)
mc=$(scripts/minio.sh install-mc)

# s5cmd, built from a wrapper module at a pinned version and cached.
s5cmd=$CACHE/bin/s5cmd
if ! go version -m "$s5cmd" 2>/dev/null | grep -q "mod	github.com/peak/s5cmd/v2	$S5CMD_VERSION"; then
	log "building s5cmd $S5CMD_VERSION"
	w=$(mktemp -d)
	(cd "$w" && go mod init w >/dev/null 2>&1 && go get "github.com/peak/s5cmd/v2@$S5CMD_VERSION" >&2 &&
		go build -o "$s5cmd" github.com/peak/s5cmd/v2 >&2)
	rm -rf "$w"
fi

work=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$work"
cleanup() {
	scripts/minio.sh stop "$work/minio" || true
	[[ -n ${BENCH_DIR:-} ]] || rm -rf "$work"
}
trap cleanup EXIT

log "building storagebench"
go build -o "$work/storagebench" ./bench/storagebench

log "writing test data"
mkdir -p "$work/src/small"
head -c $((1 << 30)) /dev/urandom >"$work/src/big"
for i in $(seq -w 0 63); do
	head -c $((16 << 20)) /dev/urandom >"$work/src/small/f$i"
done
BIG_BYTES=$((1 << 30))
SMALL_BYTES=$((64 * (16 << 20)))

start_minio "$work/minio"
EP=$AWS_ENDPOINT_URL
export MC_CONFIG_DIR=$work/mc
"$mc" alias set bench "$EP" "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >/dev/null
export RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Minio RCLONE_CONFIG_BENCH_ENDPOINT=$EP
export RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY
export RCLONE_CONFIG_BENCH_REGION=us-east-1
BUCKET=bench
"$mc" mb --ignore-existing bench/$BUCKET >/dev/null

# cmd TOOL OP WORKLOAD: the command line for one transfer.
cmd() {
	local tool=$1 op=$2 wl=$3 src dst
	local remote=$BUCKET/$tool/$wl out=$work/out/$tool-$wl
	case $wl in
	big) src=$work/src/big ;;
	small) src=$work/src/small ;;
	esac
	case $tool/$op in
	lifeboat/up) echo "$work/storagebench -op upload -src $src -dst s3://$remote" ;;
	lifeboat/down) echo "$work/storagebench -op download -src s3://$remote -dst $out" ;;
	s5cmd/up)
		if [[ $wl == big ]]; then echo "$s5cmd --endpoint-url $EP cp $src s3://$remote/big"
		else echo "$s5cmd --endpoint-url $EP cp $src/* s3://$remote/"; fi ;;
	s5cmd/down) echo "$s5cmd --endpoint-url $EP cp s3://$remote/* $out/" ;;
	mc/up)
		if [[ $wl == big ]]; then echo "$mc cp --quiet $src bench/$remote/big"
		else echo "$mc cp --quiet --recursive $src/ bench/$remote/"; fi ;;
	mc/down) echo "$mc cp --quiet --recursive bench/$remote/ $out/" ;;
	rclone/up)
		if [[ $wl == big ]]; then echo "rclone copyto $src bench:$remote/big"
		else echo "rclone copy $src bench:$remote"; fi ;;
	rclone/down) echo "rclone copy bench:$remote $out" ;;
	esac
}

set -f # s5cmd expands its own wildcards
MINIO_PID=$(cat "$work/minio/pid")
# cpu_ms PID: user+system CPU time of PID so far, in milliseconds.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%d\n", ($14 + $15) * 1000 / hz }' "/proc/$1/stat"; }

# measure TOOL OP WORKLOAD: run one transfer and append its wall seconds,
# client CPU seconds, peak RSS (KiB) and the server's CPU seconds to
# $work/results.
measure() {
	local tool=$1 op=$2 wl=$3 bytes=$BIG_BYTES c s0 s1
	[[ $wl == small ]] && bytes=$SMALL_BYTES
	if [[ $op == down ]]; then
		rm -rf "$work/out/$tool-$wl"
		mkdir -p "$work/out/$tool-$wl"
	fi
	sync # no dirty pages of an earlier transfer throttle this one
	c=$(cmd "$tool" "$op" "$wl")
	s0=$(cpu_ms "$MINIO_PID")
	# shellcheck disable=SC2086
	/usr/bin/time -f '%e %U %S %M' -o "$work/time.txt" $c >"$work/cmd.log" 2>&1 ||
		{ cat "$work/cmd.log" >&2; die "$tool $op $wl failed"; }
	s1=$(cpu_ms "$MINIO_PID")
	if [[ $op == down ]]; then
		local got
		got=$(du -sb "$work/out/$tool-$wl" | cut -f1)
		[[ $got -ge $bytes ]] || die "$tool downloaded $got bytes of $bytes"
		rm -rf "$work/out/$tool-$wl"
	fi
	read -r secs user sys rss <"$work/time.txt"
	log "$tool $op $wl: $(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.1f MB/s", b / s / 1e6 }'), client CPU $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }') s, server CPU $(((s1 - s0) / 1000)).$(printf '%03d' $(((s1 - s0) % 1000))) s"
	echo "$tool $op $wl $bytes $secs $user $sys $rss $(((s1 - s0)))" >>"$work/results"
}

# Every round moves each workload through every tool in turn (uploads
# first, then downloads), starting with a different tool each round, so
# that a slow moment of the shared machine does not fall on one tool only.
: >"$work/results"
TOOLS=(lifeboat s5cmd mc rclone)
for round in $(seq "$ROUNDS"); do
	shift_by=$(((round - 1) % ${#TOOLS[@]}))
	order=("${TOOLS[@]:shift_by}" "${TOOLS[@]:0:shift_by}")
	for wl in big small; do
		log "round $round of $ROUNDS, $wl: ${order[*]}"
		for op in up down; do
			for tool in "${order[@]}"; do
				measure "$tool" "$op" "$wl"
			done
		done
		for tool in "${TOOLS[@]}"; do
			"$mc" rm --recursive --force "bench/$BUCKET/$tool/$wl" >/dev/null
		done
	done
done

# The table: median and best MB/s of the rounds, the median's ratio to the
# best peer's median, median client and server CPU seconds per GiB moved,
# and the largest peak RSS.
awk -v tools="${TOOLS[*]}" -v rounds="$ROUNDS" -v cores="$(nproc)" "$AWK_MEDIAN"'
{
	k = $1 "/" $2 "/" $3; gib = $4 / 2^30
	mbs[k] = mbs[k] " " $4 / $5 / 1e6
	ccpu[k] = ccpu[k] " " ($6 + $7) / gib
	scpu[k] = scpu[k] " " $9 / 1000 / gib
	if ($8 > rss[k]) rss[k] = $8
	if (!(k in best) || $4 / $5 / 1e6 > best[k]) best[k] = $4 / $5 / 1e6
}
END {
	nt = split(tools, tl, " ")
	printf "\n| tool | op | workload | MB/s (median) | MB/s (best) | vs best peer (medians) | client CPU s/GiB | server CPU s/GiB | peak RSS MiB |\n"
	printf "|---|---|---|---:|---:|---:|---:|---:|---:|\n"
	split("big small", wls, " "); split("up down", ops, " ")
	for (w = 1; w <= 2; w++) for (o = 1; o <= 2; o++) {
		peer = 0
		for (t = 2; t <= nt; t++) { m = median(mbs[tl[t] "/" ops[o] "/" wls[w]]); if (m > peer) peer = m }
		for (t = 1; t <= nt; t++) {
			k = tl[t] "/" ops[o] "/" wls[w]
			printf "| %s | %s | %s | %.1f | %.1f | %.2fx | %.2f | %.2f | %d |\n", tl[t], ops[o], wls[w], median(mbs[k]), best[k], median(mbs[k]) / peer, median(ccpu[k]), median(scpu[k]), rss[k] / 1024
		}
	}
	printf "\nbig: one 1 GiB file; small: 64 files of 16 MiB. %d rounds, %d cores, MinIO on 127.0.0.1 on the same cores.\n", rounds, cores
}' "$work/results"

# Peak RSS of lifeboat's side by object size: one upload and one download
# of each size, files made from the 1 GiB one, so that the table shows
# whether memory grows with the object.
log "peak RSS by object size: ${RSS_SIZES_MIB} MiB"
printf '\n| object size | lifeboat upload peak RSS MiB | lifeboat download peak RSS MiB |\n|---:|---:|---:|\n'
for mib in $RSS_SIZES_MIB; do
	f=$work/src/rss-$mib
	for _ in $(seq $(((mib + 1023) / 1024))); do cat "$work/src/big"; done >"$f"
	truncate -s $((mib << 20)) "$f"
	sync
	/usr/bin/time -f '%M' -o "$work/up.txt" "$work/storagebench" -op upload -src "$f" -dst "s3://$BUCKET/rss/$mib" >/dev/null 2>&1 ||
		die "upload of $mib MiB failed"
	rm -f "$f"
	/usr/bin/time -f '%M' -o "$work/down.txt" "$work/storagebench" -op download -src "s3://$BUCKET/rss/$mib" -dst "$work/out/rss" >/dev/null 2>&1 ||
		die "download of $mib MiB failed"
	rm -rf "$work/out/rss"
	"$mc" rm --recursive --force "bench/$BUCKET/rss/$mib" >/dev/null
	printf '| %d MiB | %d | %d |\n' "$mib" $(($(cat "$work/up.txt") / 1024)) $(($(cat "$work/down.txt") / 1024))
done
