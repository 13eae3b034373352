#!/usr/bin/env bash
# storage.sh: upload and download throughput of storage/s3 next to s5cmd, mc
# and rclone, against one local MinIO server, in one run.
#
#   bench/storage.sh            # from the repository root
#
# Workloads: one 1 GiB file, and 64 files of 16 MiB. Each tool uploads them
# to its own prefix and downloads them back. Prints MB/s, the ratio to the
# best peer and peak RSS (from /usr/bin/time -v). Environment:
#   ROUNDS=N        run every measurement N times and keep the best (default 1)
#   BENCH_DIR=DIR   scratch space (default: a new temp dir, removed after)
#   LIFEBOAT_CACHE  where tool binaries are cached (see scripts/minio.sh)
set -euo pipefail

cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-1}
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

scripts/minio.sh start "$work/minio"
# shellcheck disable=SC1091
. "$work/minio/env"
EP=$LIFEBOAT_TEST_S3_ENDPOINT
export AWS_ACCESS_KEY_ID=$LIFEBOAT_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$LIFEBOAT_TEST_S3_SECRET_KEY
export AWS_ENDPOINT_URL=$EP AWS_REGION=us-east-1
# The server is plain http; a machine-wide CA bundle only trips rclone up.
unset AWS_CA_BUNDLE
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
declare -A MBS RSS
TOOLS=(lifeboat s5cmd mc rclone)
for round in $(seq "$ROUNDS"); do
	for wl in big small; do
		bytes=$BIG_BYTES
		[[ $wl == small ]] && bytes=$SMALL_BYTES
		for tool in "${TOOLS[@]}"; do
			for op in up down; do
				rm -rf "$work/out/$tool-$wl"
				mkdir -p "$work/out/$tool-$wl"
				sync
				c=$(cmd "$tool" "$op" "$wl")
				log "round $round: $tool $op $wl"
				# shellcheck disable=SC2086
				/usr/bin/time -v -o "$work/time.txt" $c >"$work/cmd.log" 2>&1 ||
					{ cat "$work/cmd.log" >&2; die "$tool $op $wl failed"; }
				secs=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s }' "$work/time.txt")
				rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$work/time.txt")
				mbs=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.1f", b / s / 1e6 }')
				if [[ $op == down ]]; then
					got=$(du -sb "$work/out/$tool-$wl" | cut -f1)
					[[ $got -ge $bytes ]] || die "$tool downloaded $got bytes of $bytes"
				fi
				k=$tool/$op/$wl
				log "$k: $mbs MB/s, peak RSS $((rss / 1024)) MiB"
				if [[ -z ${MBS[$k]:-} ]] || awk -v a="$mbs" -v b="${MBS[$k]}" 'BEGIN { exit !(a > b) }'; then
					MBS[$k]=$mbs
					RSS[$k]=$rss
				fi
			done
			rm -rf "$work/out/$tool-$wl"
			"$mc" rm --recursive --force "bench/$BUCKET/$tool/$wl" >/dev/null
		done
	done
done

printf '\n%-10s %-6s %-8s %10s %14s %12s\n' tool op workload "MB/s" "vs best peer" "peak RSS MiB"
for wl in big small; do
	for op in up down; do
		best=0
		for tool in s5cmd mc rclone; do
			best=$(awk -v a="${MBS[$tool/$op/$wl]}" -v b="$best" 'BEGIN { print (a > b) ? a : b }')
		done
		for tool in "${TOOLS[@]}"; do
			k=$tool/$op/$wl
			printf '%-10s %-6s %-8s %10s %13.2fx %12d\n' "$tool" "$op" "$wl" "${MBS[$k]}" \
				"$(awk -v a="${MBS[$k]}" -v b="$best" 'BEGIN { print a / b }')" $((RSS[$k] / 1024))
		done
	done
done
printf '\nbig: one 1 GiB file; small: 64 files of 16 MiB. %s cores, MinIO on 127.0.0.1 with data in %s.\n' "$(nproc)" "$work"
