# Shared helpers for lifeboat's scripts. Source it; it defines functions and
# constants only.

log() { printf '==> %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# LIFEBOAT_LDFLAGS are the linker flags of every lifeboat build
# (signals.LinkFlag; the Dockerfile spells them out): they turn the Go
# runtime's asynchronous preemption off in lifeboat, so the runtime never
# sends itself SIGURG and lifeboat forwards SIGURG like any other signal.
LIFEBOAT_LDFLAGS='-X runtime.godebugDefault=asyncpreemptoff=1 -X github.com/lifeboat-project/lifeboat/signals.recordedGODEBUG=asyncpreemptoff=1'

# apt_install installs the given Debian packages, updating apt's lists once
# per run. Scripts that run side by side (scripts/test.sh makes images while
# the Go tests run) take turns (flock -o: a daemon a package starts does not
# keep the lock), and wait for any other apt holding dpkg's lock.
apt_install() {
	local lock=${TMPDIR:-/tmp}/lifeboat-apt.lock
	if [ -z "${LIFEBOAT_APT_UPDATED:-}" ]; then
		DEBIAN_FRONTEND=noninteractive flock -o "$lock" apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
		export LIFEBOAT_APT_UPDATED=1
	fi
	DEBIAN_FRONTEND=noninteractive flock -o "$lock" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >&2
}

# need_pkgs installs the Debian packages that provide the given commands
# when any command is missing. Arguments are command:package pairs.
need_pkgs() {
	local missing=() pair
	for pair in "$@"; do
		command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
	done
	if ((${#missing[@]})); then
		log "installing ${missing[*]}"
		apt_install "${missing[@]}"
	fi
}

# need_pymods installs the Debian packages that provide the given Python
# modules to /usr/bin/python3 (the interpreter Debian's packages serve) when
# any module does not import. Arguments are module:package pairs.
need_pymods() {
	local pair pkgs=()
	for pair in "$@"; do
		/usr/bin/python3 -c "import ${pair%%:*}" >/dev/null 2>&1 || pkgs+=("${pair#*:}")
	done
	if ((${#pkgs[@]})); then
		log "installing ${pkgs[*]}"
		apt_install "${pkgs[@]}"
	fi
}

# ensure_dockerd installs docker.io and starts dockerd (own data root) when
# no daemon answers.
ensure_dockerd() {
	need_pkgs docker:docker.io dockerd:docker.io
	if docker info >/dev/null 2>&1; then
		return
	fi
	local root=${LIFEBOAT_DOCKER_ROOT:-/var/lib/lifeboat-docker}
	log "starting dockerd (data root $root)"
	mkdir -p "$root"
	nohup dockerd --data-root "$root" >"${TMPDIR:-/tmp}/lifeboat-dockerd.log" 2>&1 &
	local i
	for i in $(seq 1 120); do
		docker info >/dev/null 2>&1 && return
		sleep 0.5
	done
	log "dockerd did not start; its log:"
	tail -n 30 "${TMPDIR:-/tmp}/lifeboat-dockerd.log" >&2
	return 1
}

# apt_mirror SUITE prints the first Debian mirror apt is configured with
# for SUITE (deb822 .sources files or one-line .list files).
apt_mirror() {
	local f suite=$1
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v suite="$suite" '
			/^[ \t]*$/ { if (uri != "" && has) { print uri; done = 1; exit } uri = ""; has = 0; next }
			/^URIs:/ { uri = $2 }
			/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) has = 1 }
			END { if (!done && uri != "" && has) print uri }' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk -v suite="$suite" '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i ~ /:\/\//) { if ($(i+1) == suite) print $i; break } }' "$f"
	done
}

# debootstrap_tarball SUITE PACKAGES TARBALL makes (once) a minbase Debian
# root of SUITE with PACKAGES (comma-separated) and keeps it as the gzip
# tarball TARBALL; concurrent callers wait for the first one's result. The
# packages come from LIFEBOAT_DEBIAN_MIRROR, else from the mirror apt is
# configured with (the one this machine can reach).
debootstrap_tarball() {
	local suite=$1 include=$2 tarball=$3
	mkdir -p "$(dirname "$tarball")"
	(
		exec 9>"$tarball.lock"
		flock 9 # another run may be making the same tarball
		[ -s "$tarball" ] && exit 0
		need_pkgs debootstrap:debootstrap
		local mirror=${LIFEBOAT_DEBIAN_MIRROR:-}
		if [ -z "$mirror" ]; then
			mirror=$(apt_mirror "$suite")
			mirror=${mirror%%$'\n'*}
		fi
		[ -n "$mirror" ] || { log "no Debian mirror for $suite in apt's sources; set LIFEBOAT_DEBIAN_MIRROR"; exit 1; }
		local root start=$SECONDS
		root=$(mktemp -d "${TMPDIR:-/tmp}/lifeboat-rootfs.XXXXXX")
		chmod 755 "$root" # the image's / (mktemp made it 0700)
		log "debootstrap --variant=minbase $suite ($include) from $mirror"
		if ! debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" >"$root.log" 2>&1; then
			log "debootstrap failed; its log:"
			tail -n 30 "$root.log" >&2
			rm -rf "$root" "$root.log"
			exit 1
		fi
		rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/* "$root.log"
		tar --numeric-owner -C "$root" -c . | gzip -1 >"$tarball.tmp"
		mv -f "$tarball.tmp" "$tarball"
		rm -rf "$root"
		log "debootstrap and tarball took $((SECONDS - start))s ($(du -h "$tarball" | cut -f1))"
	)
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
	local port
	for _ in $(seq 100); do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			printf '%s\n' "$port"
			return
		fi
	done
	printf 'no free TCP port found on 127.0.0.1\n' >&2
	return 1
}

# pass, fail and expect count the checks of an end-to-end script in the
# caller's passed and failed. expect WHAT GOT WANT is one check.
pass() { passed=$((${passed:-0} + 1)); printf 'ok   %s\n' "$*"; }
fail() { failed=$((${failed:-0} + 1)); printf 'FAIL %s\n' "$*"; }
expect() {
	if [ "$2" = "$3" ]; then
		pass "$1 ($2)"
	else
		fail "$1: got '$2', want '$3'"
	fi
}

# start_minio DIR: start a MinIO server with its data in DIR
# (scripts/minio.sh start, from the repository root) and export the AWS_*
# variables that point lifeboat and the peer tools at it.
start_minio() {
	scripts/minio.sh start "$1"
	# shellcheck disable=SC1091
	. "$1/env"
	export AWS_ACCESS_KEY_ID=$LIFEBOAT_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$LIFEBOAT_TEST_S3_SECRET_KEY
	export AWS_ENDPOINT_URL=$LIFEBOAT_TEST_S3_ENDPOINT AWS_REGION=us-east-1
	# The server is plain http: a machine-wide CA bundle only trips clients
	# up. Nothing of the caller's own store settings may leak in either.
	unset AWS_CA_BUNDLE AWS_SESSION_TOKEN LIFEBOAT_STORE LIFEBOAT_DIR
}

# AWK_MEDIAN defines median(list), the median of the space-separated numbers
# in list, for an awk program to begin with (mawk has no include).
# shellcheck disable=SC2016
AWK_MEDIAN='
function median(list,   a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}'
