#!/usr/bin/env bash
# startup.sh: where lifeboat's start-up time goes, next to catatonit.
#
#   bench/startup.sh
#
# Builds bench/startupbench (the smallest Go program that runs a child) as
# it is, with lifeboat's supervisor, and with each of lifeboat's heavier
# dependencies linked in, plus lifeboat itself (static, as in the image),
# and times `X /bin/true` for all of them and catatonit in one hyperfine
# run (-N, 300 runs, 20 warm-up). Prints a Markdown table of each one's
# overhead over plain /bin/true (medians), its ratio to catatonit's, and
# what it adds to the Go floor. Installs catatonit and hyperfine from
# Debian's packages when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_pkgs catatonit:catatonit hyperfine:hyperfine
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

build() { # build NAME TAGS PACKAGE [LDFLAGS]
	CGO_ENABLED=0 go build -trimpath -tags "$2" -ldflags "${4:-}" -o "$work/$1" "$3"
}
VARIANTS=(go-floor notify supervisor nethttp retryablehttp mpb cgroups prometheus minio all-deps)
for v in "${VARIANTS[@]}"; do
	case $v in
	go-floor) tags= ;;
	all-deps) tags=minio,prometheus,cgroups,retryablehttp,mpb ;;
	*) tags=$v ;;
	esac
	build "$v" "$tags" ./bench/startupbench
done
build lifeboat "" ./cmd/lifeboat "$LIFEBOAT_LDFLAGS"

cmds=(/bin/true "catatonit -- /bin/true")
for v in "${VARIANTS[@]}"; do cmds+=("$work/$v /bin/true"); done
cmds+=("$work/lifeboat run --log-level error -- /bin/true")
echo "machine: $(nproc) cores, $(uname -r); $(catatonit --version 2>&1 | head -1); $(go version)" >&2
hyperfine -N --warmup 20 --runs 300 --style none --export-csv "$work/h.csv" "${cmds[@]}" >&2

# h.csv: command,mean,stddev,median,user,system,min,max (seconds)
awk -F, -v work="$work/" '
NR == 1 { next }
{ name = $1; sub(work, "", name); sub(/ .*/, "", name); med[NR] = $4 * 1000; names[NR] = name; n = NR }
END {
	base = med[2]; cat = med[3] - base; floor = med[4] - base
	printf "| program | start-up overhead (ms, median) | vs catatonit | added to the Go floor (ms) |\n|---|---:|---:|---:|\n"
	for (i = 3; i <= n; i++) {
		o = med[i] - base
		added = (i > 4) ? sprintf("%.2f", o - floor) : (i == 4 ? "(the floor)" : "")
		printf "| %s | %.2f | %.2fx | %s |\n", names[i], o, o / cat, added
	}
}' "$work/h.csv"
