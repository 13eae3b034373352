#!/usr/bin/env bash
# latency.sh: checkpoint upload and verified restore through a link with a
# round-trip time, for several worker counts, next to mc.
#
#   bench/latency.sh            # from the repository root; root (drops caches)
#
# A local MinIO answers within microseconds; object storage in a cloud
# takes milliseconds per request, and a checkpoint is many 8 MiB chunks, so
# the number of requests in flight decides the speed there. This script
# puts bench/latencyproxy (a delay line) between the clients and one local
# MinIO and, for each one-way delay in DELAYS (default "0ms 5ms 25ms", so
# round trips of 0, 10 and 50 ms), times ROUNDS (default 3) of:
#   - upload: `lifeboat run --store ... --workers N -- cp FILE DIR/` (the
#     run ends after the final upload committed), against `mc cp FILE`;
#   - restore: `lifeboat restore --workers N` into an empty directory, with
#     the default check (crc32c) and with --verify-restore sha256, against
#     `mc cp` of the same bytes as one object;
# for N in WORKERS (default "4 8 16 32"), with a 1 GiB file (SIZE=BYTES).
# Prints a Markdown table of medians, with the client's CPU seconds (user +
# system, /usr/bin/time) per GiB.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. scripts/lib.sh # start_minio, AWK_MEDIAN
DELAYS=${DELAYS:-0ms 5ms 25ms}
WORKERS=${WORKERS:-4 8 16 32}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-$((1 << 30))}

log() { printf 'latency.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
[[ $(id -u) == 0 ]] || die "run as root: the page cache is dropped before each restore"
[[ -x /usr/bin/time ]] || need_pkgs /usr/bin/time:time

minio=$(scripts/minio.sh install)
mc=$(scripts/minio.sh install-mc)
: "$minio"
work=$(mktemp -d)
proxy_pid=
cleanup() {
	[[ -z $proxy_pid ]] || kill "$proxy_pid" 2>/dev/null || true
	scripts/minio.sh stop "$work/minio" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

log "building lifeboat and latencyproxy"
go build -ldflags "$LIFEBOAT_LDFLAGS" -o "$work/lifeboat" ./cmd/lifeboat
go build -o "$work/latencyproxy" ./bench/latencyproxy
head -c "$SIZE" /dev/urandom >"$work/latest.pdparams"

start_minio "$work/minio"
direct=$AWS_ENDPOINT_URL
export MC_CONFIG_DIR=$work/mc

# timed NAME CMD...: append "NAME seconds cpu-seconds" to $work/results.
timed() {
	local name=$1 t0 t1 secs cpu
	shift
	sync
	t0=$(date +%s.%N)
	/usr/bin/time -f '%U %S' -o "$work/cpu" "$@" >"$work/cmd.log" 2>&1 || { cat "$work/cmd.log" >&2; die "$name failed"; }
	t1=$(date +%s.%N)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	cpu=$(awk '{ printf "%.3f", $1 + $2 }' "$work/cpu")
	echo "$name $secs $cpu" >>"$work/results"
	log "$name: $secs s, $cpu s CPU"
}

: >"$work/results"
for delay in $DELAYS; do
	"$work/latencyproxy" -upstream "${direct#http://}" -delay "$delay" >"$work/proxy.addr" 2>"$work/proxy.log" &
	proxy_pid=$!
	for _ in $(seq 50); do [[ -s $work/proxy.addr ]] && break; sleep 0.1; done
	ep=http://$(head -1 "$work/proxy.addr")
	export AWS_ENDPOINT_URL=$ep MC_HOST_far="http://$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY@${ep#http://}"
	for round in $(seq "$ROUNDS"); do
		log "delay $delay, round $round of $ROUNDS"
		for n in $WORKERS; do
			store=s3://latency/d$delay-r$round-w$n
			rm -rf "$work/up" && mkdir -p "$work/up"
			timed "$delay up lifeboat-w$n" "$work/lifeboat" run --store "$store" --create-bucket --dir "$work/up" \
				--workers "$n" --log-level warn -- cp "$work/latest.pdparams" "$work/up/"
			rm -rf "$work/down" && mkdir -p "$work/down"
			sync && echo 3 >/proc/sys/vm/drop_caches
			timed "$delay down lifeboat-w$n" "$work/lifeboat" restore --store "$store" --dir "$work/down" \
				--workers "$n" --log-level warn
			cmp -s "$work/latest.pdparams" "$work/down/latest.pdparams" || die "restore with $n workers differs"
			rm -rf "$work/down" && mkdir -p "$work/down"
			sync && echo 3 >/proc/sys/vm/drop_caches
			timed "$delay down lifeboat-sha256-w$n" "$work/lifeboat" restore --store "$store" --dir "$work/down" \
				--workers "$n" --log-level warn --verify-restore sha256
			cmp -s "$work/latest.pdparams" "$work/down/latest.pdparams" || die "sha256 restore with $n workers differs"
		done
		timed "$delay up mc" "$mc" cp --quiet "$work/latest.pdparams" "far/latency/mc-d$delay-r$round/latest.pdparams"
		rm -rf "$work/down" && mkdir -p "$work/down"
		sync && echo 3 >/proc/sys/vm/drop_caches
		timed "$delay down mc" "$mc" cp --quiet "far/latency/mc-d$delay-r$round/latest.pdparams" "$work/down/latest.pdparams"
		cmp -s "$work/latest.pdparams" "$work/down/latest.pdparams" || die "mc download differs"
	done
	kill "$proxy_pid"
	wait "$proxy_pid" 2>/dev/null || true
	proxy_pid=
done

awk -v size="$SIZE" -v rounds="$ROUNDS" "$AWK_MEDIAN"'
{ k = $1 " " $2 " " $3; if (!(k in t)) order[++n] = k; t[k] = t[k] " " $4; c[k] = c[k] " " $5 }
END {
	printf "| one-way delay | op | client | seconds (median) | MB/s | client CPU s per GiB (median) |\n|---|---|---|---:|---:|---:|\n"
	for (i = 1; i <= n; i++) {
		split(order[i], f, " "); m = median(t[order[i]])
		printf "| %s | %s | %s | %.2f | %.0f | %.2f |\n", f[1], f[2], f[3], m, size / m / 1e6, median(c[order[i]]) * 1073741824 / size
	}
	printf "\n%d-byte file, median of %d rounds; round trip = 2 x the one-way delay.\n", size, rounds
}' "$work/results"
