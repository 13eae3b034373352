# Shared helpers for lifeboat's scripts. Source it; it defines functions only.

log() { printf '==> %s\n' "$*" >&2; }

# need_pkgs installs the Debian packages that provide the given commands
# when any command is missing. Arguments are command:package pairs.
need_pkgs() {
	local missing=() pair
	for pair in "$@"; do
		command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
	done
	if ((${#missing[@]})); then
		log "installing ${missing[*]}"
		if [ -z "${LIFEBOAT_APT_UPDATED:-}" ]; then
			DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
			export LIFEBOAT_APT_UPDATED=1
		fi
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
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
