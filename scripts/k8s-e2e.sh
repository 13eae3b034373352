#!/usr/bin/env bash
# k8s-e2e.sh: lifeboat's preemption scenarios on a real one-node Kubernetes
# cluster, run from the manifests in deploy/k8s.
#
#   scripts/k8s-e2e.sh [SCENARIO...]     default: all, in the order below
#
# The cluster: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and a kubelet (scripts/k8s-build.sh builds or reuses them)
# on containerd with runc and the bridge CNI plugin (Debian packages), all
# listening on 127.0.0.1 or on a bridge of their own, with certificates,
# state, logs and sockets in one temporary directory. containerd runs with
# its own root, state and socket beside any other containerd, and with
# restrict_oom_score_adj (a root without CAP_SYS_RESOURCE cannot raise a
# container's OOM score). No registry is used: the sandbox image is
# internal/cmd/pause built static, and the pod images (lifeboat:dev and the
# trainer) come from Docker (scripts/docker-build.sh, the image
# scripts/docker-e2e.sh builds) through `docker save | ctr images import`.
# The node advertises a fake extended resource, example.com/gpu, patched
# into its status through the API, so a GPU is what pods compete for.
# MinIO listens on the bridge's gateway address, which pods and this
# machine both reach; pods reach the API server at the kubernetes Service
# (10.96.0.1:443) through one DNAT rule to 127.0.0.1 (there is no
# kube-proxy). Preempted pods are deleted once they have ended, so every
# pod change is recorded from a watch and every container log file is
# hard-linked as soon as it appears.
#
# The manifests are used as shipped (priorityclasses.yaml, rbac.yaml,
# secret.example.yaml and the three Jobs) after an overlay that changes
# only what a cluster without a registry, DNS or GPUs needs, and sizes:
#   - images: lifeboat-example:dev (my-paddle-lifeboat:2.6 in
#     deploy/volcano) becomes the trainer image built here (the example
#     trainer on Debian, with `python`), every pull policy Never;
#   - the store: AWS_ENDPOINT_URL is the MinIO here, each store prefix gets
#     the scenario's namespace in front (s3://ckpt/NS/...), the Secret gets
#     the server's keys;
#   - sizes: the trainer's --steps and --save-every (and --pad-mb in c),
#     CPU and memory requests, one example.com/gpu per trainer (in place
#     of the nvidia.com/gpu of deploy/jobset and deploy/volcano);
#   - deploy/volcano's Job gets what Volcano's admission webhook, not run
#     here, would add when it is created (each task's minAvailable, its
#     replicas, and maxRetry, 3; the Job-level ones are in the manifest);
# and, where a scenario needs it (each says so below): the grace (e), a
# bad flag value (d), a trainer whose save never ends (e), an Indexed Job
# of two pods with LIFEBOAT_WORLD_SIZE=2 whose trainers start together,
# meeting in a directory of the node (f; g's JobSet and h's Volcano Job
# the same way, with their own WORLD_SIZE and VC_TASK_INDEX; the example
# trainer replaces paddle.distributed.launch in h, and neither
# MASTER_ADDR nor --master is used: the example trainer does not call
# torch.distributed, and the cluster has no DNS).
#
# Scenarios, each checked through the API, the containers' logs (read from
# the kubelet's log directory: the kubelet serves no logs on 127.0.0.1) and
# the store (`lifeboat ls`):
#   a   job.yaml: a higher-priority pod preempts the trainer; lifeboat
#       commits the SIGTERM save and exits 143; the Job counts no failure;
#       the replacement stays Pending while the GPU is taken, then resumes
#       from exactly the committed step; the Job completes; lifeboat's own
#       Events and checkpoint annotation are on the pods; the ServiceAccount
#       may do exactly what rbac.yaml grants, also from a pod
#   d   job.yaml with LIFEBOAT_WORKERS=-5: lifeboat exits 2 and the Job
#       fails at once (podFailurePolicy FailJob), with no retry
#   e   job.yaml with a 15 s grace and a trainer whose SIGTERM save never
#       finishes: lifeboat SIGKILLs it at its deadline, does not commit the
#       partial save, and the replacement resumes the previous committed step
#   b1  job-sidecar.yaml: the same preemption with the native sidecar
#   b2  job-init-restore.yaml: the same with the init-container restore
#   f   job.yaml as an Indexed Job of two pods (two GPUs): one is preempted,
#       the other stops through the store (coord), both resume one step:
#       the newest both committed
#   g   deploy/jobset/jobset.yaml, run by JobSet's controller (v0.10.1,
#       built by scripts/jobset-build.sh and run as a process of this
#       machine with its webhooks, jobset_up below), two pods on two GPUs,
#       the trainers starting together as in f: one is preempted, the other
#       stops through the store, both exit 143; JobSet recreates the whole
#       gang once both old pods are gone (restart attempt 1, counted in
#       status.restarts, not towards maxRestarts); one new pod waits for
#       the GPU, which the urgent pod holds until `lifeboat ls` has shown
#       the step the ranks agreed on at the stop (coord.flushed) complete;
#       both ranks resume that step; the JobSet completes
#   h   deploy/volcano/volcano.yaml, run by Volcano's scheduler and
#       controller manager (v1.10.0, built by scripts/volcano-build.sh and
#       run as processes of this machine with the module's CRDs and the
#       default Queue; not its admission webhook: volcano_up below), two
#       pods on two GPUs placed as one gang by vc-scheduler, the trainers
#       starting together as in f, the rank from VC_TASK_INDEX (the env
#       plugin), host names and hosts list from the svc plugin: the urgent
#       pod (kube-scheduler's) preempts one rank; Volcano's PodEvicted
#       policy restarts the job at once, deleting the other pod, so both
#       ranks get SIGTERM, flush the same common step and exit 143; the job's
#       retry count is 1 (RestartJob the only action taken); vc-scheduler
#       is stopped from the urgent pod's creation until it runs, then
#       started again, so that the urgent pod is placed before the new
#       gang (two schedulers share the freed GPUs); the new gang is
#       created once both old pods are gone and waits whole, neither pod
#       placed, while one GPU is free and until `lifeboat ls` has shown the
#       agreed step complete; both ranks resume that step; the Job
#       completes
#   c   job.yaml: the replacement is preempted while it restores (the
#       bridge is slowed so the restore takes a while); the Job still
#       counts no failure and the pod after it resumes the committed step
#
# Everything started is stopped on exit, also on failure: pods, the
# components, containerd's tasks and shims, mounts, cgroups, the bridge,
# the kubelet's iptables chains, the DNAT rule, containerd's CNI cache and
# the sysctls the kubelet and the bridge plugin change. On a
# failure the pods, events and the components' log tails are printed.
# LIFEBOAT_K8S_REUSE_IMAGES=1 uses lifeboat:dev and lifeboat-e2e-trainer:dev
# as they are (scripts/test.sh has just built them); otherwise
# scripts/docker-build.sh builds lifeboat:dev and the trainer image is
# rebuilt from it. LIFEBOAT_K8S_KEEP=1 leaves the temporary directory.
# The last line is `k8s-e2e: N passed, N failed`. The scenarios `bench`,
# `bench-bare`, `bench-gang` and `bench-volcano` (bench/k8s.sh) are not
# tests: they time one preemption, with lifeboat step by step, with a bare
# shell trainer as a baseline, of g's JobSet gang and of h's Volcano gang.
# JobSet's controller is built and started only when g or bench-gang is
# among the scenarios, Volcano's scheduler and controller manager only when
# h or bench-volcano is.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

SCENARIOS=("$@")
((${#SCENARIOS[@]})) || SCENARIOS=(a d e b1 b2 f g h c)

TRAINER_IMAGE=lifeboat-k8s-trainer:dev
PAUSE_IMAGE=lifeboat.invalid/pause:1
BRIDGE=lbk8s0
SUBNET=10.254.77
GW=$SUBNET.1
BUCKET=ckpt
# sysctls the kubelet (and the bridge plugin) set; put back on exit.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)

passed=0
failed=0
W=
K8S=
VOLCANO=
declare -A PIDS=()
declare -A SAVED_SYSCTL=()
IPT_BEFORE=
API_DNAT=()
CNI_CACHE_NEW=
CURRENT=

die() {
	fail "$*"
	exit 1
}

kc() { "$K8S/kubectl" --kubeconfig "$W/admin.kubeconfig" "$@"; }
ctr_() { ctr --address "$W/containerd/containerd.sock" "$@"; }

# wait_until SECONDS WHAT CMD...: polls CMD every half second.
wait_until() {
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs * 2; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	log "timed out after ${secs}s waiting for $what"
	return 1
}

# start NAME CMD...: starts a component in its own session, logging to
# $W/logs/NAME.log.
start() {
	local name=$1
	shift
	setsid "$@" </dev/null >"$W/logs/$name.log" 2>&1 &
	PIDS[$name]=$!
}

stop_pid() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

diagnostics() {
	log "diagnostics"
	if [ -n "$K8S" ] && [ -S "$W/containerd/containerd.sock" ] && kc get --raw /readyz >/dev/null 2>&1; then
		kc get nodes -o wide >&2 || true
		kc get pods -A -o wide >&2 || true
		kc get jobs -A -o wide >&2 || true
		local ns
		for ns in $(kc get ns -o name | sed 's|namespace/||' | grep '^sc-'); do
			kc get events -n "$ns" --sort-by=.lastTimestamp 2>/dev/null | tail -n 30 >&2 || true
			kc get jobs -n "$ns" -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status}{"\n"}{end}' >&2 || true
			kc get pods -n "$ns" -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.phase}{" "}{.status.conditions}{" "}{.status.containerStatuses}{" "}{.status.initContainerStatuses}{"\n"}{end}' >&2 || true
		done
	fi
	local f
	for f in "$W"/keep/*/*/*.log; do
		[ -f "$f" ] || continue
		log "${f#"$W"/keep/}:"
		tail -n 25 "$f" | sed 's/^/    /' >&2
	done
	for f in "$W"/logs/*.log; do
		[ -f "$f" ] || continue
		log "last lines of $(basename "$f"):"
		tail -n 15 "$f" | sed 's/^/    /' >&2
	done
}

# cleanup stops everything in the reverse order of starting it.
cleanup() {
	local rc=$?
	set +e
	((rc != 0 || failed > 0)) && [ -n "$W" ] && diagnostics
	if [ -n "${PIDS[kubelet]:-}" ] && kc get --raw /readyz >/dev/null 2>&1; then
		# Pods first, through the kubelet, so sandboxes and their network
		# namespaces are torn down the normal way.
		kc delete ns -l lifeboat-e2e=1 --wait=false >/dev/null 2>&1
		kc delete pods -A --all --grace-period=0 --force >/dev/null 2>&1
		wait_until 30 "the kubelet to stop every pod" no_tasks
	fi
	local name
	for name in "${!PIDS[@]}"; do
		case $name in watch-* | keep-logs) stop_pid "${PIDS[$name]}" ;; esac
	done
	[ -n "${PIDS[kubelet]:-}" ] && stop_pid "${PIDS[kubelet]}"
	if [ -S "$W/containerd/containerd.sock" ]; then
		local id
		for id in $(ctr_ -n k8s.io tasks ls -q 2>/dev/null); do
			ctr_ -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1
		done
		sleep 0.5
		for id in $(ctr_ -n k8s.io tasks ls -q 2>/dev/null); do
			ctr_ -n k8s.io tasks rm -f "$id" >/dev/null 2>&1
		done
	fi
	for name in jobset vc-scheduler vc-controller-manager controller-manager scheduler apiserver etcd containerd minio; do
		[ -n "${PIDS[$name]:-}" ] && stop_pid "${PIDS[$name]}"
	done
	if [ -n "$W" ]; then
		# Shims this containerd started (their -address is its socket).
		local p
		for p in /proc/[0-9]*; do
			if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -F -- "-address $W/containerd/containerd.sock" >/dev/null; then
				kill -KILL "${p#/proc/}" 2>/dev/null
			fi
		done
		# Mounts under the work directory, deepest first.
		local m
		for m in $(awk -v w="$W" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
			umount -l "$m" 2>/dev/null
		done
		find /var/log/containers -maxdepth 1 -type l -lname "$W/*" -delete 2>/dev/null
		rmdir /var/log/containers 2>/dev/null
	fi
	# The kubelet's QoS cgroups, deepest first, in every hierarchy.
	find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -depth -type d -exec rmdir {} \; 2>/dev/null
	((${#API_DNAT[@]})) && iptables -t nat -D "${API_DNAT[@]}" 2>/dev/null
	ip link del "$BRIDGE" 2>/dev/null
	if [ -n "$IPT_BEFORE" ]; then
		drop_chains iptables ""
		drop_chains ip6tables "6 "
	fi
	[ -n "$CNI_CACHE_NEW" ] && rm -rf /var/lib/cni
	local s
	for s in "${!SAVED_SYSCTL[@]}"; do
		sysctl -qw "$s=${SAVED_SYSCTL[$s]}" >/dev/null 2>&1
	done
	if [ -n "$W" ]; then
		if [ "${LIFEBOAT_K8S_KEEP:-0}" = 1 ]; then
			log "kept $W"
		else
			rm -rf "$W" 2>/dev/null
		fi
	fi
	if ((rc != 0 && failed == 0)); then
		fail "the script stopped early (exit $rc; see above)"
	fi
	echo "k8s-e2e: $passed passed, $failed failed"
	((failed == 0)) || exit 1
	exit "$rc"
}

# drop_chains IPTABLES PREFIX: removes the KUBE-* chains the kubelet made
# (not in $IPT_BEFORE) and the rules that jump to them.
drop_chains() {
	local ipt=$1 t c rule
	for t in mangle nat filter; do
		for c in $($ipt -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }'); do
			grep -qx -- "$2$t $c" "$IPT_BEFORE" && continue
			$ipt -t "$t" -S 2>/dev/null | grep -E -- "^-A [^ ]+ .*-j $c( |\$)" | while read -r rule; do
				eval "$ipt -t $t -D ${rule#-A }"
			done
			$ipt -t "$t" -F "$c" 2>/dev/null
			$ipt -t "$t" -X "$c" 2>/dev/null
		done
	done
}

no_tasks() { [ -z "$(ctr_ -n k8s.io tasks ls -q 2>/dev/null)" ]; }

# --- setup -----------------------------------------------------------------

need_pkgs etcd:etcd-server containerd:containerd runc:runc ctr:containerd \
	/usr/lib/cni/bridge:containernetworking-plugins openssl:openssl ip:iproute2 \
	tc:iproute2 iptables:iptables python3:python3 curl:curl
t_all=$SECONDS
log "Kubernetes binaries (scripts/k8s-build.sh)"
K8S=$(scripts/k8s-build.sh install)

W=$(mktemp -d "${TMPDIR:-/tmp}/lifeboat-k8s.XXXXXX")
chmod 755 "$W"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$W/logs" "$W/pki" "$W/containerd" "$W/cni/net.d" "$W/cni/ipam" "$W/kubelet" "$W/pod-logs" "$W/minio/data"

for s in "${SYSCTLS[@]}"; do
	SAVED_SYSCTL[$s]=$(sysctl -n "$s")
done
[ -e /var/lib/cni ] || CNI_CACHE_NEW=1 # containerd's CNI result cache
IPT_BEFORE=$W/iptables-chains
for t in mangle nat filter; do
	iptables -t "$t" -S 2>/dev/null | awk -v t="$t" '$1 == "-N" { print t, $2 }'
	ip6tables -t "$t" -S 2>/dev/null | awk -v t="$t" '$1 == "-N" { print 6, t, $2 }'
done >"$IPT_BEFORE"

# --- images ----------------------------------------------------------------

images() {
	ensure_dockerd
	if [ "${LIFEBOAT_K8S_REUSE_IMAGES:-0}" = 1 ] && docker image inspect lifeboat:dev lifeboat-e2e-trainer:dev >/dev/null 2>&1; then
		log "using the existing lifeboat:dev and lifeboat-e2e-trainer:dev"
	else
		scripts/docker-build.sh >&2
		local suite
		suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
		if ! docker image inspect "lifeboat-e2e-base:$suite" >/dev/null 2>&1; then
			log "no lifeboat-e2e-base:$suite: scripts/docker-e2e.sh makes it"
			LIFEBOAT_E2E_REUSE_IMAGE=1 LIFEBOAT_E2E_S3=0 scripts/docker-e2e.sh >&2
		fi
		# The trainer's lifeboat is the Dockerfile's default (the gpu flavour),
		# as scripts/docker-e2e.sh builds it.
		DOCKER_BUILDKIT=0 docker build -q -f images/e2e/Dockerfile --build-arg BASE="lifeboat-e2e-base:$suite" \
			-t lifeboat-e2e-trainer:dev . >/dev/null
	fi
	# The manifests run `python train.py`; Debian's python3 has no `python`.
	printf 'FROM lifeboat-e2e-trainer:dev\nRUN ln -s /usr/bin/python3 /usr/local/bin/python\n' |
		DOCKER_BUILDKIT=0 docker build -q -t "$TRAINER_IMAGE" - >/dev/null
	# The sandbox image: the pause program alone.
	mkdir -p "$W/pause"
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$W/pause/pause" ./internal/cmd/pause
	tar -C "$W/pause" -c pause | docker import --change 'ENTRYPOINT ["/pause"]' - "$PAUSE_IMAGE" >/dev/null
	docker save -o "$W/images.tar" lifeboat:dev "$TRAINER_IMAGE" "$PAUSE_IMAGE"
	# lifeboat on this machine, for `lifeboat ls`: the image's own binary.
	local c
	c=$(docker create lifeboat:dev)
	docker cp "$c:/lifeboat" "$W/lifeboat" >/dev/null
	docker rm "$c" >/dev/null
	docker image rm "$PAUSE_IMAGE" >/dev/null
}

# --- the cluster -----------------------------------------------------------

pki() {
	local p=$W/pki
	(
		cd "$p"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=lifeboat-e2e-ca 2>/dev/null
		openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
		printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' >san.ext
		openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 2 -extfile san.ext 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >token
		printf '%s,admin,admin,"system:masters"\n' "$(cat token)" >tokens.csv
	)
	chmod 600 "$p"/*
}

kubeconfig() {
	cat >"$W/admin.kubeconfig" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: e2e
		  cluster:
		    server: https://127.0.0.1:$API_PORT
		    certificate-authority: $W/pki/ca.crt
		users:
		- name: admin
		  user:
		    token: $(cat "$W/pki/token")
		contexts:
		- name: e2e
		  context: {cluster: e2e, user: admin}
		current-context: e2e
	EOF
	chmod 600 "$W/admin.kubeconfig"
}

containerd_up() {
	local c=$W/containerd
	cat >"$c/config.toml" <<-EOF
		version = 2
		root = "$c/root"
		state = "$c/state"
		[grpc]
		  address = "$c/containerd.sock"
		[ttrpc]
		  address = "$c/containerd.sock.ttrpc"
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$c/opt"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "$PAUSE_IMAGE"
		  restrict_oom_score_adj = true
		  netns_mounts_under_state_dir = true
		  enable_selinux = false
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "overlayfs"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        SystemdCgroup = false
		        Root = "$c/runc"
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "/usr/lib/cni"
		    conf_dir = "$W/cni/net.d"
	EOF
	cat >"$W/cni/net.d/10-lifeboat-e2e.conflist" <<-EOF
		{
		  "cniVersion": "0.4.0",
		  "name": "lifeboat-e2e",
		  "plugins": [{
		    "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
		    "ipam": {"type": "host-local", "dataDir": "$W/cni/ipam",
		      "ranges": [[{"subnet": "$SUBNET.0/24", "gateway": "$GW"}]], "routes": [{"dst": "0.0.0.0/0"}]}
		  }]
		}
	EOF
	start containerd containerd --config "$c/config.toml"
	wait_until 30 containerd ctr_ version
	ctr_ -n k8s.io images import "$W/images.tar" >/dev/null
	rm -f "$W/images.tar"
}

# The bridge exists before the first pod so MinIO can listen on its
# gateway address; the bridge plugin takes it over.
bridge_up() {
	ip link add "$BRIDGE" type bridge
	ip addr add "$GW/24" dev "$BRIDGE"
	ip link set "$BRIDGE" up
}

minio_up() {
	local bin
	bin=$(scripts/minio.sh install)
	MINIO_PORT=$(free_port)
	MINIO_USER=lb$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
	MINIO_PASS=s$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	ENDPOINT=http://$GW:$MINIO_PORT
	MINIO_ROOT_USER=$MINIO_USER MINIO_ROOT_PASSWORD=$MINIO_PASS MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CI_CD=1 \
		start minio "$bin" server --quiet --address "$GW:$MINIO_PORT" --console-address "$GW:$(free_port)" "$W/minio/data"
	wait_until 60 MinIO curl -fsS "$ENDPOINT/minio/health/ready"
	# Ready can come before the object layer is (503 on a busy machine).
	wait_until 60 "the bucket $BUCKET" make_bucket || die "MinIO did not create bucket $BUCKET"
}
make_bucket() {
	local sig=(--aws-sigv4 aws:amz:us-east-1:s3 --user "$MINIO_USER:$MINIO_PASS")
	curl -fsS -X PUT "${sig[@]}" "$ENDPOINT/$BUCKET" || curl -fsS -I "${sig[@]}" "$ENDPOINT/$BUCKET"
}

control_plane_up() {
	local etcd_port etcd_peer
	etcd_port=$(free_port)
	etcd_peer=$(free_port)
	API_PORT=$(free_port)
	start etcd etcd --name e2e --data-dir "$W/etcd" \
		--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
		--listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
		--initial-cluster "e2e=http://127.0.0.1:$etcd_peer" --unsafe-no-fsync
	wait_until 30 etcd curl -fsS "http://127.0.0.1:$etcd_port/health"
	local p=$W/pki
	start apiserver "$K8S/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
		--tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --cert-dir "$W/apiserver" \
		--token-auth-file "$p/tokens.csv" --authorization-mode RBAC \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$p/sa.pub" \
		--service-account-signing-key-file "$p/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
		--endpoint-reconciler-type none --enable-priority-and-fairness=false --profiling=false
	kubeconfig
	wait_until 90 kube-apiserver kc get --raw /readyz
	start controller-manager "$K8S/kube-controller-manager" --kubeconfig "$W/admin.kubeconfig" \
		--leader-elect=false --secure-port 0 --service-account-private-key-file "$p/sa.key" \
		--root-ca-file "$p/ca.crt" --use-service-account-credentials=false --profiling=false
	start scheduler "$K8S/kube-scheduler" --kubeconfig "$W/admin.kubeconfig" \
		--leader-elect=false --secure-port 0 --profiling=false
	# Pods reach the API as in any cluster, at the kubernetes Service
	# (10.96.0.1:443): with no kube-proxy, one DNAT rule from the bridge to
	# the apiserver on 127.0.0.1 (route_localnet on the bridge only).
	sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
	API_DNAT=(PREROUTING -i "$BRIDGE" -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination "127.0.0.1:$API_PORT")
	iptables -t nat -A "${API_DNAT[@]}"
}

kubelet_up() {
	NODE=lifeboat-e2e
	cat >"$W/kubelet/config.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		address: 127.0.0.1
		port: $(free_port)
		readOnlyPort: 0
		healthzPort: 0
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: true}
		authorization: {mode: Webhook}
		cgroupDriver: cgroupfs
		failCgroupV1: false
		failSwapOn: false
		containerRuntimeEndpoint: unix://$W/containerd/containerd.sock
		podLogsDir: $W/pod-logs
		evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		serializeImagePulls: false
		maxPods: 30
		nodeStatusUpdateFrequency: 2s
	EOF
	start kubelet "$K8S/kubelet" --config "$W/kubelet/config.yaml" --kubeconfig "$W/admin.kubeconfig" \
		--root-dir "$W/kubelet" --cert-dir "$W/kubelet/pki" --hostname-override "$NODE" --v 1
	wait_until 90 "node $NODE Ready" node_ready
}

# jobset_up: JobSet's controller (scripts/jobset-build.sh builds it from
# the sigs.k8s.io/jobset module) as a process of this machine, with the
# module's own CRD, and its webhooks served as in a JobSet installation:
# the JobSet defaulting and validating webhooks and the pod webhooks,
# registered from the module's manifests (the pod webhooks with the
# objectSelector of its kustomize patches, for JobSet's pods only). The
# only change: each webhook is called at the controller's address on
# 127.0.0.1 (clientConfig.url, there is no Service network) with a serving
# certificate of this cluster's CA, instead of the Service and the
# certificates the controller would rotate itself
# (internalCertManagement off).
jobset_up() {
	local bin mod port health
	bin=$(scripts/jobset-build.sh install)
	mod=$(scripts/jobset-build.sh dir)
	port=$(free_port)
	health=$(free_port)
	mkdir -p "$W/jobset/certs"
	(
		cd "$W/jobset/certs"
		openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj /CN=jobset-webhook 2>/dev/null
		printf 'subjectAltName=IP:127.0.0.1\n' >san.ext
		openssl x509 -req -in tls.csr -CA "$W/pki/ca.crt" -CAkey "$W/pki/ca.key" -CAcreateserial -out tls.crt -days 2 -extfile san.ext 2>/dev/null
	)
	cat >"$W/jobset/config.yaml" <<-EOF
		apiVersion: config.jobset.x-k8s.io/v1alpha1
		kind: Configuration
		leaderElection: {leaderElect: false}
		internalCertManagement: {enable: false}
		webhook: {host: 127.0.0.1, port: $port, certDir: $W/jobset/certs}
		metrics: {bindAddress: "0"}
		health: {healthProbeBindAddress: "127.0.0.1:$health"}
	EOF
	kc apply --server-side -f "$mod/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" >/dev/null
	# Served, not only accepted: a controller started before its kind is
	# in the API's discovery waits 10 s before it looks again.
	wait_until 30 "the JobSet API" kc get jobsets -A
	start jobset "$bin" --config "$W/jobset/config.yaml" --kubeconfig "$W/admin.kubeconfig" --zap-log-level=info
	wait_until 60 "JobSet's controller ready" curl -fsS "http://127.0.0.1:$health/readyz" || die "JobSet's controller did not become ready"
	kc patch --local -f "$mod/config/components/webhook/manifests.yaml" --type=merge -p '{}' -o json |
		python3 -c "$JOBSET_WEBHOOKS_PY" "$port" "$(base64 -w0 "$W/pki/ca.crt")" | kc apply -f - >/dev/null
}

# JOBSET_WEBHOOKS_PY PORT CA-BASE64 < the module's webhook configurations
# (JSON, one after the other) > a List of them, called at
# https://127.0.0.1:PORT.
JOBSET_WEBHOOKS_PY='
import json, sys
port, ca = sys.argv[1:3]
text, dec, i, items = sys.stdin.read(), json.JSONDecoder(), 0, []
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    d, i = dec.raw_decode(text, i)
    items.append(d)
assert len(items) == 2, items
for d in items:
    d["metadata"]["name"] = "jobset-" + d["metadata"]["name"]
    for w in d["webhooks"]:
        path = w["clientConfig"]["service"]["path"]
        w["clientConfig"] = {"url": "https://127.0.0.1:%s%s" % (port, path), "caBundle": ca}
        if w["name"] in ("mpod.kb.io", "vpod.kb.io"):
            w["objectSelector"] = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
'

# volcano_up: Volcano's controller manager and scheduler
# (scripts/volcano-build.sh builds them from the volcano.sh/volcano module)
# as processes of this machine, with the module's own CRDs, each with its
# defaults (the scheduler's built-in configuration: actions enqueue,
# allocate, backfill; the controller manager's every controller). The
# scheduler makes the default Queue, the controller manager opens it. The
# admission webhook manager is not run: deploy/volcano's Job is applied
# with what its mutating webhook would add (the overlay), and it holds
# nothing the validating webhook would refuse.
volcano_up() {
	local mod
	VOLCANO=$(scripts/volcano-build.sh install)
	mod=$(scripts/volcano-build.sh dir)
	kc apply --server-side -f "$mod/config/crd/volcano/bases" -f "$mod/config/crd/jobflow/bases" >/dev/null
	wait_until 30 "Volcano's APIs" eval 'kc get jobs.batch.volcano.sh -A && kc get queues.scheduling.volcano.sh && kc get podgroups.scheduling.volcano.sh -A && kc get jobflows.flow.volcano.sh -A'
	start vc-controller-manager "$VOLCANO/vc-controller-manager" --kubeconfig "$W/admin.kubeconfig" --leader-elect=false -v 3
	vc_scheduler_up
	wait_until 60 "Volcano's default Queue to open" eval '[ "$(kc get queues.scheduling.volcano.sh default -o jsonpath={.status.state})" = Open ]' ||
		die "Volcano's default Queue did not open"
}
# vc_scheduler_up: its socket for log levels in the work directory.
vc_scheduler_up() {
	mkdir -p "$W/volcano"
	start vc-scheduler env DEBUG_SOCKET_DIR="$W/volcano" "$VOLCANO/vc-scheduler" --kubeconfig "$W/admin.kubeconfig" \
		--leader-elect=false --cache-dumper=false
}

node_ready() {
	[ "$(kc get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# gpus N: the node advertises N example.com/gpu.
gpus() {
	kc patch node "$NODE" --subresource=status --type=json \
		-p "[{\"op\":\"add\",\"path\":\"/status/capacity/example.com~1gpu\",\"value\":\"$1\"},{\"op\":\"add\",\"path\":\"/status/allocatable/example.com~1gpu\",\"value\":\"$1\"}]" >/dev/null
	wait_until 30 "$1 GPUs allocatable" test "$(kc get node "$NODE" -o jsonpath='{.status.allocatable.example\.com/gpu}')" = "$1"
}

# --- the overlay -----------------------------------------------------------

# overlay NS OPTIONS-JSON < manifest JSON > manifest JSON: the changes the
# header lists, by container and variable name, never by position.
OVERLAY_PY='
import json, sys
ns, opts = sys.argv[1], json.loads(sys.argv[2])
doc = json.load(sys.stdin)
docs = doc["items"] if doc.get("kind") == "List" else [doc]

def store(v):
    assert v.startswith("s3://ckpt/"), v
    return "s3://ckpt/" + ns + "/" + v[len("s3://ckpt/"):]

def set_env(c, name, value):
    for e in c.setdefault("env", []):
        if e["name"] == name:
            e.pop("valueFrom", None)
            e["value"] = value
            return
    c["env"].append({"name": name, "value": value})

def set_arg(args, flag, value):
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]

def overlay_job(spec):
    pod = spec["template"]["spec"]
    if "grace" in opts:
        pod["terminationGracePeriodSeconds"] = opts["grace"]
    for k in ("completionMode", "completions", "parallelism"):
        if k in opts:
            spec[k] = opts[k]
    for c in pod.get("initContainers", []) + pod["containers"]:
        c["imagePullPolicy"] = "Never"
        if c["image"] in ("lifeboat-example:dev", "my-paddle-lifeboat:2.6"):
            c["image"] = opts["trainer_image"]
        args = c.get("args", [])
        if "--store" in args:
            args[args.index("--store") + 1] = store(args[args.index("--store") + 1])
        for e in c.get("env", []):
            if e["name"] == "AWS_ENDPOINT_URL":
                e["value"] = opts["endpoint"]
            elif e["name"] == "LIFEBOAT_STORE":
                e["value"] = store(e["value"])
        r = c.get("resources")
        if r:
            if r.get("requests", {}).get("cpu"):
                r["requests"]["cpu"] = "50m"
            if r.get("requests", {}).get("memory"):
                r["requests"]["memory"] = opts["memory"]
            if r.get("limits", {}).get("memory"):
                r["limits"]["memory"] = opts["memory"]
        if c["name"] != "trainer":
            continue
        r = c.setdefault("resources", {})
        r.setdefault("requests", {})["cpu"] = "100m"
        r.setdefault("limits", {})["example.com/gpu"] = "1"
        r["limits"].pop("nvidia.com/gpu", None)
        set_arg(args, "--steps", str(opts["steps"]))
        set_arg(args, "--save-every", str(opts["save_every"]))
        if "pad_mb" in opts:
            set_arg(args, "--pad-mb", str(opts["pad_mb"]))
        if "grace" in opts:
            set_env(c, "LIFEBOAT_GRACE", "%ds" % opts["grace"])
        for k, v in opts.get("env", {}).items():
            set_env(c, k, v)
        if "trainer_args" in opts:
            args[:] = opts["trainer_args"] + args[args.index("train.py") + 1:]
        if "rendezvous" in opts:
            c["env"].append({"name": "RENDEZVOUS_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}})
            c.setdefault("volumeMounts", []).append({"name": "rendezvous", "mountPath": "/rendezvous"})
            pod["volumes"].append({"name": "rendezvous", "hostPath": {"path": opts["rendezvous"], "type": "DirectoryOrCreate"}})
        if opts.get("bare"):
            # A baseline without lifeboat: a shell is PID 1, says it runs
            # and exits 143 on SIGTERM; nothing is saved or restored.
            c["command"] = ["/bin/sh", "-c", "trap \"exit 143\" TERM; echo \"trainer: no checkpoint (bare shell)\"; while :; do sleep 0.2; done"]
            c["args"] = []

for d in docs:
    if d["kind"] == "Secret":
        d["stringData"] = {"AWS_ACCESS_KEY_ID": opts["key"], "AWS_SECRET_ACCESS_KEY": opts["secret"]}
        continue
    if d["kind"] == "Job" and d["apiVersion"] == "batch/v1":
        specs = [d["spec"]]
    elif d["kind"] == "JobSet":
        specs = [r["template"]["spec"] for r in d["spec"]["replicatedJobs"]]
    elif d["kind"] == "Job" and d["apiVersion"].startswith("batch.volcano.sh/"):
        # What the admission webhook of Volcano (not run here) would add
        # on create, as its jobs/mutate does; deploy/volcano sets the
        # Job-level fields itself.
        js, specs = d["spec"], d["spec"]["tasks"]
        js.setdefault("queue", "default")
        js.setdefault("schedulerName", "volcano")
        js.setdefault("maxRetry", 3)
        js.setdefault("minAvailable", sum(t.get("minAvailable", t["replicas"]) for t in specs))
        for t in specs:
            t.setdefault("minAvailable", t["replicas"])
            t.setdefault("maxRetry", 3)
    else:
        continue
    for spec in specs:
        overlay_job(spec)
json.dump(doc, sys.stdout)
'

# apply_job NS FILE OPTIONS-JSON: applies deploy/k8s/FILE (deploy/FILE when
# FILE names a directory: jobset/jobset.yaml) through the overlay in
# namespace NS; the result is kept in $W/NS-BASENAME.json.
apply_job() {
	local ns=$1 file=$2 opts=$3 src=deploy/k8s/$2
	if [[ $file == */* ]]; then
		src=deploy/$file
		file=${file##*/}
	fi
	opts=$(python3 -c 'import json, sys
o = {"trainer_image": sys.argv[1], "endpoint": sys.argv[2], "key": sys.argv[3], "secret": sys.argv[4],
     "steps": 3000, "save_every": 200, "memory": "512Mi"}
o.update(json.loads(sys.argv[5]))
print(json.dumps(o))' "$TRAINER_IMAGE" "$ENDPOINT" "$MINIO_USER" "$MINIO_PASS" "$opts")
	kc create ns "$ns" >/dev/null
	kc label ns "$ns" lifeboat-e2e=1 >/dev/null
	kc apply -n "$ns" -f deploy/k8s/rbac.yaml >/dev/null
	kc patch --local -f deploy/k8s/secret.example.yaml --type=merge -p '{}' -o json |
		python3 -c "$OVERLAY_PY" "$ns" "$opts" | kc apply -n "$ns" -f - >/dev/null
	kc patch --local -f "$src" --type=merge -p '{}' -o json |
		python3 -c "$OVERLAY_PY" "$ns" "$opts" >"$W/$ns-$file.json"
	kc apply -n "$ns" -f "$W/$ns-$file.json" >/dev/null
}

# --- reading results -------------------------------------------------------

# pods NS: the Job's pods, oldest first, also those gone.
pods() { python3 -c "$POD_PY" "$W/$1.watch" "" ""; }

# nth_pod NS N [INDEX]: the name of the Job's Nth pod (1-based), of one
# completion index if given, in the order they were created, also if
# gone (a preempted pod is deleted once it has ended).
nth_pod() {
	python3 -c "$POD_PY" "$W/$1.watch" "" "${3:-}" 2>/dev/null | sed -n "${2}p"
}
has_pod() { [ -n "$(nth_pod "$@")" ]; }

# keep_logs hard-links every container log file of the kubelet's into
# $W/keep, so a pod's output stays readable after the kubelet removes a
# deleted pod's logs (a preempted pod is deleted once it has ended).
keep_logs() {
	local f k
	for f in "$W"/pod-logs/*/*/*.log; do
		[ -f "$f" ] || continue
		k=$W/keep/${f#"$W"/pod-logs/}
		[ -e "$k" ] && continue
		mkdir -p "${k%/*}"
		ln "$f" "$k" 2>/dev/null || true
	done
}
keep_logs_loop() {
	while :; do
		keep_logs
		sleep 0.3
	done
}

# podlog NS POD CONTAINER: the container's output (stdout and stderr), from
# the kubelet's log files.
podlog() {
	keep_logs
	local f dir=$W/keep/${1}_${2}_
	# NAME@UID (a Volcano Job's pod): the kubelet's directory of that pod.
	[[ $2 == *@* ]] && dir=$W/keep/${1}_${2%@*}_${2#*@}
	for f in $(ls "$dir"*/"$3"/ 2>/dev/null | sort -n); do
		cat "$dir"*/"$3/$f"
	done | sed -E 's/^[^ ]+ (stdout|stderr) [FP] //'
}
# (grep reads all of it: with pipefail, grep -q's early exit would fail
# the pipeline with podlog's SIGPIPE.)
log_has() { podlog "$1" "$2" "$3" | grep -E -- "$4" >/dev/null; }

# last_field NS POD CONTAINER EVENT FIELD: FIELD of lifeboat's last EVENT
# log line (numbers, booleans and strings).
last_field() {
	podlog "$1" "$2" "$3" | grep -F "\"msg\":\"$4\"" | tail -n 1 |
		sed -n -E "s/.*\"$5\":\"?([^,\"}]*)\"?.*/\\1/p"
}

# watch_pods NS: records every change of the namespace's pods in
# $W/NS.watch; pod() reads the last state of a pod from it, also after the
# pod is gone.
watch_pods() {
	setsid "$K8S/kubectl" --kubeconfig "$W/admin.kubeconfig" get pods -n "$1" -w -o json --output-watch-events \
		</dev/null >"$W/$1.watch" 2>&1 &
	PIDS[watch-$1]=$!
}
POD_PY='
import json, sys
f, name, expr = sys.argv[1:4]
text, dec, i, last, names = open(f).read(), json.JSONDecoder(), 0, None, []
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    try:
        ev, i = dec.raw_decode(text, i)
    except ValueError:
        break
    o = ev.get("object", ev)
    md = o.get("metadata", {})
    lb = md.get("labels", {})
    # A Volcano Job gives a restarted gang the old pods names: its pods
    # are NAME@UID.
    vc = "volcano.sh/job-name" in lb
    ref = "%s@%s" % (md.get("name"), md.get("uid")) if vc else md.get("name")
    if name and (ref == name if "@" in name else md.get("name") == name):
        last = o
    index = lb.get("volcano.sh/task-index" if vc else "batch.kubernetes.io/job-completion-index")
    if not name and ("batch.kubernetes.io/job-name" in lb or vc) and ref not in names and (not expr or index == expr):
        names.append(ref)
if not name:
    # With no pod name: the Job pods in the order they appeared (of one
    # completion index or Volcano task index, given as the expression).
    print("\n".join(names))
    sys.exit(0)
def cs(p, c):
    st = p.get("status", {})
    for s in st.get("containerStatuses", []) + st.get("initContainerStatuses", []):
        if s["name"] == c:
            return s
    return {}
def term(p, c):
    s = cs(p, c)
    return s.get("state", {}).get("terminated") or s.get("lastState", {}).get("terminated") or {}
def cond(p, t):
    for c in p.get("status", {}).get("conditions", []):
        if c["type"] == t:
            return c
    return {}
if last is None:
    sys.exit(1)
v = eval(expr, {"p": last, "cs": cs, "term": term, "cond": cond})
print("" if v is None else v)
'
# pod NS POD EXPR: EXPR (Python, over the pod p and the helpers cs, term,
# cond) on the pod's last recorded state.
pod() { python3 -c "$POD_PY" "$W/$1.watch" "$2" "$3"; }

phase() { pod "$1" "$2" 'p["status"].get("phase")'; }
phase_is() { [ "$(phase "$1" "$2")" = "$3" ]; }
running() { [ "$(pod "$1" "$2" "bool(cs(p, \"$3\").get(\"state\", {}).get(\"running\"))")" = True ]; }
terminated() { [ -n "$(pod "$1" "$2" "term(p, \"$3\").get(\"exitCode\")")" ]; }
exit_code() { pod "$1" "$2" "term(p, \"$3\").get(\"exitCode\")"; }
term_message() { pod "$1" "$2" "term(p, \"$3\").get(\"message\", \"\").strip()"; }
condition() { pod "$1" "$2" "cond(p, \"$3\").get(\"$4\")"; }
job_field() { kc get job -n "$1" "$2" -o jsonpath="{$3}"; }
job_condition() { [ "$(kc get job -n "$1" "$2" -o jsonpath="{.status.conditions[?(@.type==\"$3\")].status}")" = True ]; }
failed_count() { local n; n=$(job_field "$1" "$2" .status.failed); echo "${n:-0}"; }

# ls_json NS STORE-PATH: `lifeboat ls --json` of the scenario's store.
ls_json() {
	env -u AWS_SESSION_TOKEN -u AWS_CA_BUNDLE -u AWS_PROFILE -u AWS_SHARED_CREDENTIALS_FILE \
		AWS_ACCESS_KEY_ID=$MINIO_USER AWS_SECRET_ACCESS_KEY=$MINIO_PASS AWS_ENDPOINT_URL=$ENDPOINT AWS_REGION=us-east-1 \
		"$W/lifeboat" ls --store "s3://$BUCKET/$1/$2" --json
}

# complete NS STORE-PATH STEP: "complete" when `lifeboat ls` lists STEP as
# complete (every rank's manifest), else what it lists for STEP.
complete() {
	ls_json "$1" "$2" | python3 -c '
import json, sys
r = [r for r in json.load(sys.stdin) if r["step"] == int(sys.argv[1])]
print("complete" if any(x["complete"] for x in r) else ("incomplete" if r else "absent"))' "$3"
}

# newest NS STORE-PATH: "step id" of the complete checkpoint committed
# last, from `lifeboat ls --json` (one id per rank: the first).
newest() {
	ls_json "$1" "$2" | python3 -c '
import json, sys
c = [r for r in json.load(sys.stdin) if r["complete"]]
c.sort(key=lambda r: r["created"])
print("%d %s" % (c[-1]["step"], c[-1]["ids"][0]) if c else "none")'
}

# urgent NS NAME SECONDS [GPUS]: a pod of a higher priority class
# (normal-experiments) that needs GPUS (1) and ends after SECONDS.
urgent() {
	kc apply -n "$1" -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: Pod
		metadata: {name: $2}
		spec:
		  restartPolicy: Never
		  priorityClassName: normal-experiments
		  terminationGracePeriodSeconds: 5
		  containers:
		  - name: urgent
		    image: $TRAINER_IMAGE
		    imagePullPolicy: Never
		    command: [sleep, "$3"]
		    resources:
		      requests: {cpu: 10m}
		      limits: {example.com/gpu: "${4:-1}"}
	EOF
}

# new_ns NS: a namespace for one scenario, watched.
new_ns() {
	CURRENT=$1
	log "[$1] $2"
	watch_pods "$1"
}

# trainer_step NS POD: the step the trainer saved at its stop, from its
# output (its own SIGTERM handler, or the helper's stop).
trainer_step() {
	podlog "$1" "$2" trainer | sed -n -E 's/^trainer: (SIGTERM|stop requested) at step ([0-9]+).*/\2/p' | tail -n 1
}
resumed_step() {
	podlog "$1" "$2" trainer | sed -n -E 's/^trainer: resumed from .* at step ([0-9]+) .*/\1/p' | tail -n 1
}
trainer_started() { log_has "$1" "$2" trainer '^trainer: (resumed from|no checkpoint)'; }
# line NS POD CONTAINER EVENT: the line number of lifeboat's last EVENT.
line() { podlog "$1" "$2" "$3" | grep -n -F "\"msg\":\"$4\"" | tail -n 1 | cut -d: -f1; }

# check_rbac NS: the ServiceAccount may do exactly what rbac.yaml says.
check_rbac() {
	local sa=system:serviceaccount:$1:lifeboat want verb res
	for want in "yes create events" "yes create events.events.k8s.io" "yes get pods" "yes patch pods" \
		"no delete pods" "no list pods" "no update pods" "no get secrets" "no create pods"; do
		read -r want verb res <<<"$want"
		expect "[$1] ServiceAccount lifeboat: $verb $res" "$(kc auth can-i --as "$sa" -n "$1" "$verb" "$res" 2>/dev/null)" "$want"
	done
}

# API_PY runs in a pod as ServiceAccount lifeboat and calls the API the
# way lifeboat does from its pod (in-cluster: the Service's address, the
# token and CA the kubelet mounts): read and annotate its own pod, record an
# Event of each API group, and try to list pods. It prints one status code
# per call.
API_PY='
import datetime, json, os, ssl, urllib.error, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(sa + "/token").read()
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
base = "https://%s:%s" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
ns, name = os.environ["LIFEBOAT_POD_NAMESPACE"], os.environ["LIFEBOAT_POD_NAME"]
def call(what, method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + token, "Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=20) as r:
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
        print("api-error: %s %s" % (what, e.read()[:400]), flush=True)
    print("api: %s %d" % (what, code), flush=True)
pod = "/api/v1/namespaces/%s/pods/%s" % (ns, name)
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
call("get-own-pod", "GET", pod)
call("annotate-own-pod", "PATCH", pod, {"metadata": {"annotations": {"lifeboat.example/e2e": "1"}}}, "application/merge-patch+json")
call("create-event", "POST", "/api/v1/namespaces/%s/events" % ns, {"metadata": {"generateName": name + "-"},
     "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns}, "reason": "E2E", "message": "core/v1", "type": "Normal"})
call("create-events.k8s.io", "POST", "/apis/events.k8s.io/v1/namespaces/%s/events" % ns, {"metadata": {"generateName": name + "-"},
     "regarding": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns}, "reason": "E2E", "note": "events.k8s.io/v1",
     "type": "Normal", "action": "Checked", "reportingController": "lifeboat.example/e2e", "reportingInstance": name, "eventTime": now})
call("list-pods", "GET", "/api/v1/namespaces/%s/pods" % ns)
call("delete-own-pod", "DELETE", pod)
'

# check_api NS: a pod as ServiceAccount lifeboat reaches the API and may do
# exactly what rbac.yaml grants.
check_api() {
	local ns=$1
	kc apply -n "$ns" -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: Pod
		metadata: {name: api}
		spec:
		  restartPolicy: Never
		  serviceAccountName: lifeboat
		  containers:
		  - name: api
		    image: $TRAINER_IMAGE
		    imagePullPolicy: Never
		    command: [python3, -c, $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$API_PY")]
		    env:
		    - {name: LIFEBOAT_POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
		    - {name: LIFEBOAT_POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
		    resources: {requests: {cpu: 10m}}
	EOF
	wait_until 120 "the API pod to end" eval 'terminated "$ns" api api' || die "[$ns] the API pod did not end"
	local want what code
	for want in get-own-pod:200 annotate-own-pod:200 create-event:201 create-events.k8s.io:201 list-pods:403 delete-own-pod:403; do
		what=${want%%:*}
		code=$(podlog "$ns" api api | sed -n "s/^api: $what \([0-9]*\)$/\1/p")
		expect "[$ns] from a pod as ServiceAccount lifeboat: $what (HTTP status)" "$code" "${want#*:}"
	done
	expect "[$ns] the pod's annotation" "$(kc get pod -n "$ns" api -o jsonpath='{.metadata.annotations.lifeboat\.example/e2e}')" 1
	expect "[$ns] Events the pod recorded on itself" \
		"$(kc get events -n "$ns" --field-selector involvedObject.name=api,reason=E2E -o name | wc -l)" 2
}

# --- scenarios -------------------------------------------------------------

# preempt NS FILE KIND: a, b1, b2. KIND is run (job.yaml: lifeboat run
# uploads and restores), sidecar (job-sidecar.yaml) or init
# (job-init-restore.yaml). The trainer commits, an urgent pod preempts it,
# and the replacement resumes from the committed step once the GPU is free.
preempt() {
	local ns=$1 file=$2 kind=$3 job prefix up=trainer rs=trainer
	case $kind in
	sidecar) up=uploader rs=restore ;;
	init) rs=restore ;;
	esac
	gpus 1
	apply_job "$ns" "$file" '{}'
	job=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata"]["name"])' "$W/$ns-$file.json")
	prefix=$job
	wait_until 60 "the first pod" has_pod "$ns" 1 || die "[$ns] the Job made no pod"
	local p1 p2
	p1=$(nth_pod "$ns" 1)
	if ! wait_until 120 "a commit" log_has "$ns" "$p1" "$up" '"msg":"checkpoint.committed"'; then
		die "[$ns] $p1 committed no checkpoint"
	fi
	pass "[$ns] $p1 trains and committed step $(last_field "$ns" "$p1" "$up" checkpoint.committed step)"
	local t0=$SECONDS
	# The urgent pod holds the GPU for 60 s once it runs: far longer than
	# the dozen kubectl calls, on a busy machine, between its start and the
	# check below that $p2 waits for it.
	urgent "$ns" urgent 60
	wait_until 150 "$p1 to end" terminated "$ns" "$p1" trainer || die "[$ns] $p1 did not end after the preemption"
	log "[$ns] $p1 ended $((SECONDS - t0))s after the urgent pod was created"
	expect "[$ns] $p1 DisruptionTarget" "$(condition "$ns" "$p1" DisruptionTarget status)/$(condition "$ns" "$p1" DisruptionTarget reason)" True/PreemptionByScheduler
	expect "[$ns] $p1 trainer exit code" "$(exit_code "$ns" "$p1" trainer)" 143
	expect "[$ns] lifeboat exited by itself (supervisor.exit)" "$(last_field "$ns" "$p1" trainer supervisor.exit code)" 143
	local msg
	msg=$(term_message "$ns" "$p1" trainer)
	if [ -n "$msg" ]; then pass "[$ns] termination message: $msg"; else fail "[$ns] $p1 has no termination message"; fi
	local step committed_step
	step=$(trainer_step "$ns" "$p1")
	[ -n "$step" ] || die "[$ns] the trainer did not save at the stop"
	pass "[$ns] the trainer saved at the stop, at step $step"
	if [ "$kind" = sidecar ]; then
		wait_until 60 "the sidecar to end" terminated "$ns" "$p1" uploader || fail "[$ns] the sidecar did not end"
		local stopping
		stopping=$(line "$ns" "$p1" uploader sidecar.stopping)
		[ -n "$stopping" ] && pass "[$ns] the sidecar was stopped after the trainer (sidecar.stopping)" || fail "[$ns] no sidecar.stopping"
	else
		local stopping committed
		stopping=$(line "$ns" "$p1" trainer supervisor.stopping)
		committed=$(line "$ns" "$p1" trainer checkpoint.committed)
		if [ -n "$stopping" ] && [ -n "$committed" ] && ((committed > stopping)); then
			pass "[$ns] the save at the stop was committed before lifeboat exited"
		else
			fail "[$ns] no checkpoint.committed after supervisor.stopping"
		fi
	fi
	committed_step=$(last_field "$ns" "$p1" "$up" checkpoint.committed step)
	# With the helper the trainer names the step it saves at the stop.
	[ "$kind" = run ] || expect "[$ns] the step saved at the stop is the one committed" "$committed_step" "$step"
	local stored
	stored=$(newest "$ns" "$prefix")
	expect "[$ns] the store's newest complete checkpoint (lifeboat ls) is the step committed last" "${stored%% *}" "$committed_step"
	expect "[$ns] Job failures counted" "$(failed_count "$ns" "$job")" 0

	wait_until 60 "a replacement pod" has_pod "$ns" 2 || die "[$ns] the Job made no replacement"
	p2=$(nth_pod "$ns" 2)
	wait_until 60 "the urgent pod to run" phase_is "$ns" urgent Running || fail "[$ns] the urgent pod did not run"
	expect "[$ns] $p2 waits while the urgent pod holds the GPU" \
		"$(phase "$ns" "$p2")/$(condition "$ns" "$p2" PodScheduled reason)" Pending/Unschedulable
	wait_until 120 "the urgent pod to end" phase_is "$ns" urgent Succeeded || fail "[$ns] the urgent pod did not end"
	wait_until 120 "$p2's trainer to start" trainer_started "$ns" "$p2" || die "[$ns] $p2's trainer did not start"
	expect "[$ns] $p2 restored the newest checkpoint (resume.restored step manifest_id = lifeboat ls)" \
		"$(last_field "$ns" "$p2" "$rs" resume.restored step) $(last_field "$ns" "$p2" "$rs" resume.restored manifest_id)" "$stored"
	expect "[$ns] $p2's trainer resumed at the step saved at the stop" "$(resumed_step "$ns" "$p2")" "$step"
	wait_until 240 "the Job to complete" job_condition "$ns" "$job" Complete || die "[$ns] the Job did not complete"
	pass "[$ns] the Job completed"
	expect "[$ns] Job failures counted" "$(failed_count "$ns" "$job")" 0
	expect "[$ns] pods the Job made" "$(pods "$ns" | wc -l)" 2
	if [ "$kind" = run ]; then
		# lifeboat's own use of the API (package kube), with rbac.yaml's
		# permissions: Events on its pod and the checkpoint annotation.
		local reasons
		reasons=$(kc get events -n "$ns" --field-selector "involvedObject.name=$p1" -o jsonpath='{.items[*].reason}')
		for want in CheckpointCommitted PreemptedCommitted; do
			grep -qw "$want" <<<"$reasons" && pass "[$ns] lifeboat recorded Event $want on $p1" ||
				fail "[$ns] no Event $want on $p1 (it has: $reasons)"
		done
		reasons=$(kc get events -n "$ns" --field-selector "involvedObject.name=$p2" -o jsonpath='{.items[*].reason}')
		grep -qw CheckpointRestored <<<"$reasons" && pass "[$ns] lifeboat recorded Event CheckpointRestored on $p2" ||
			fail "[$ns] no Event CheckpointRestored on $p2 (it has: $reasons)"
		local ann
		ann=$(kc get pod -n "$ns" "$p2" -o jsonpath='{.metadata.annotations.lifeboat\.dev/checkpoint-step}')
		[[ $ann =~ ^[0-9]+$ ]] && pass "[$ns] lifeboat annotated $p2 with its checkpoint step ($ann)" ||
			fail "[$ns] $p2 has no lifeboat.dev/checkpoint-step annotation ('$ann')"
	fi
}

# config_error: d. A bad flag value fails the Job at once.
config_error() {
	local ns=sc-d
	gpus 1
	apply_job "$ns" job.yaml '{"env": {"LIFEBOAT_WORKERS": "-5"}}'
	wait_until 60 "the first pod" has_pod "$ns" 1 || die "[$ns] the Job made no pod"
	local p1
	p1=$(nth_pod "$ns" 1)
	wait_until 90 "the Job to fail" job_condition "$ns" train-example Failed || die "[$ns] the Job did not fail"
	expect "[$ns] $p1 trainer exit code" "$(exit_code "$ns" "$p1" trainer)" 2
	expect "[$ns] Job failure reason" "$(kc get job -n "$ns" train-example -o jsonpath='{.status.conditions[?(@.type=="Failed")].reason}')" PodFailurePolicy
	if log_has "$ns" "$p1" trainer '--workers \(LIFEBOAT_WORKERS\)'; then
		pass "[$ns] lifeboat named the flag: $(podlog "$ns" "$p1" trainer | grep -- '--workers (LIFEBOAT_WORKERS)' | head -n 1)"
	else
		fail "[$ns] lifeboat's output does not name --workers (LIFEBOAT_WORKERS)"
	fi
	sleep 3
	expect "[$ns] pods the Job made (no retry)" "$(pods "$ns" | wc -l)" 1
	expect "[$ns] the store is untouched" "$(newest "$ns" train-example)" none
}

# SLOW_SAVE wraps train.py so that its SIGTERM save never finishes: it
# writes the start of backup/latest.pdparams, keeps it open and sleeps.
SLOW_SAVE='
import os, sys, time, train
orig = train.save
def save(model, path, name, pad):
    if name != "latest":
        return orig(model, path, name, pad)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "latest.pdparams"), "wb") as f:
        f.write(b"\x80\x04\x95")
        f.flush()
        print("trainer: SIGTERM at step %d: saving, slowly" % model.step, flush=True)
        time.sleep(3600)
train.save = save
sys.exit(train.main(sys.argv[1:]))
'

# slow_save: e. The save at the stop outlives the grace period.
slow_save() {
	local ns=sc-e
	gpus 1
	apply_job "$ns" job.yaml "$(python3 -c 'import json,sys; print(json.dumps({"grace": 15, "trainer_args": ["python", "-c", sys.argv[1]]}))' "$SLOW_SAVE")"
	wait_until 60 "the first pod" has_pod "$ns" 1 || die "[$ns] the Job made no pod"
	local p1 p2
	p1=$(nth_pod "$ns" 1)
	wait_until 120 "a commit" log_has "$ns" "$p1" trainer '"msg":"checkpoint.committed"' || die "[$ns] $p1 committed no checkpoint"
	urgent "$ns" urgent 5
	wait_until 90 "$p1 to end" terminated "$ns" "$p1" trainer || die "[$ns] $p1 did not end"
	expect "[$ns] $p1 DisruptionTarget" "$(condition "$ns" "$p1" DisruptionTarget reason)" PreemptionByScheduler
	log_has "$ns" "$p1" trainer '^trainer: SIGTERM at step [0-9]+: saving, slowly' &&
		pass "[$ns] the trainer began its save at the stop" || fail "[$ns] the trainer did not begin a save"
	expect "[$ns] the trainer was SIGKILLed at lifeboat's deadline (exit code)" "$(exit_code "$ns" "$p1" trainer)" 137
	log_has "$ns" "$p1" trainer '"msg":"checkpoint.interrupted"' &&
		pass "[$ns] lifeboat reported the cut-short save (checkpoint.interrupted)" || fail "[$ns] no checkpoint.interrupted"
	local committed_step stored
	committed_step=$(last_field "$ns" "$p1" trainer checkpoint.committed step)
	stored=$(newest "$ns" train-example)
	expect "[$ns] the store's newest checkpoint (lifeboat ls) is the last committed before the stop" "${stored%% *}" "$committed_step"
	expect "[$ns] Job failures counted" "$(failed_count "$ns" train-example)" 0
	wait_until 90 "a replacement pod" has_pod "$ns" 2 || die "[$ns] the Job made no replacement"
	p2=$(nth_pod "$ns" 2)
	wait_until 120 "$p2's trainer to start" trainer_started "$ns" "$p2" || die "[$ns] $p2's trainer did not start"
	expect "[$ns] $p2 restored the previous committed checkpoint" \
		"$(last_field "$ns" "$p2" trainer resume.restored step) $(last_field "$ns" "$p2" trainer resume.restored manifest_id)" "$stored"
	expect "[$ns] $p2's trainer resumed at that step" "$(resumed_step "$ns" "$p2")" "$committed_step"
	kc delete job -n "$ns" train-example --wait=false >/dev/null
}

# RENDEZVOUS wraps train.py the way a multi-rank trainer starts
# (torch.distributed's init_process_group): it trains only once every rank
# of its incarnation is there, so a rank whose replacement starts first
# cannot run ahead alone and commit steps its peer's replacement would
# then restore. The ranks meet in /rendezvous (a directory of the node):
# each pod leaves its UID and the how-manieth pod of its index it is, and
# waits for a pod of the same count of every index.
RENDEZVOUS='
import os, sys, time, train
d = "/rendezvous"
index = os.environ.get("JOB_COMPLETION_INDEX") or os.environ["VC_TASK_INDEX"]
size = int(os.environ.get("LIFEBOAT_WORLD_SIZE") or os.environ["WORLD_SIZE"])
def arrivals(i):
    return [f for f in os.listdir(d) if f.startswith("rank-%s-" % i)]
# The pod UID, not the host name or the pod name: an Indexed Job gives
# every pod of an index the same host name, a Volcano Job the same pod
# name.
mine = "rank-%s-%s" % (index, os.environ["RENDEZVOUS_POD_UID"])
if mine not in arrivals(index):
    count = str(len(arrivals(index)) + 1)
    with open(os.path.join(d, "." + mine), "w") as f:
        f.write(count)
    os.rename(os.path.join(d, "." + mine), os.path.join(d, mine))
with open(os.path.join(d, mine)) as f:
    me = f.read()
def count(name):
    with open(os.path.join(d, name)) as f:
        return f.read()
while not all(any(count(n) == me for n in arrivals(i)) for i in range(size)):
    time.sleep(0.1)
print("trainer: rank %s met its %d ranks (pod %s of its index)" % (index, size, me), flush=True)
sys.exit(train.main(sys.argv[1:]))
'

# ranks: f. An Indexed Job of two pods; one is preempted, the other stops
# through the store; both resume one step.
ranks() {
	local ns=sc-f
	gpus 2
	apply_job "$ns" job.yaml "$(python3 -c 'import json,sys; print(json.dumps({"completionMode": "Indexed", "completions": 2, "parallelism": 2, "steps": 4000, "env": {"LIFEBOAT_WORLD_SIZE": "2"}, "rendezvous": sys.argv[2], "trainer_args": ["python", "-c", sys.argv[1]]}))' "$RENDEZVOUS" "$W/rendezvous-$ns")"
	wait_until 60 "two pods" has_pod "$ns" 1 1 || die "[$ns] the Job made no pods"
	wait_until 60 "two pods" has_pod "$ns" 1 0 || die "[$ns] the Job made one pod"
	local r0 r1
	r0=$(nth_pod "$ns" 1 0)
	r1=$(nth_pod "$ns" 1 1)
	both_committed() { log_has "$ns" "$r0" trainer '"msg":"checkpoint.committed"' && log_has "$ns" "$r1" trainer '"msg":"checkpoint.committed"'; }
	wait_until 120 "both ranks to commit" both_committed || die "[$ns] the ranks committed nothing"
	urgent "$ns" urgent 15
	wait_until 120 "both ranks to end" eval 'terminated "$ns" "$r0" trainer && terminated "$ns" "$r1" trainer' || die "[$ns] the ranks did not both end"
	local victim other
	if [ "$(condition "$ns" "$r0" DisruptionTarget reason)" = PreemptionByScheduler ]; then victim=$r0 other=$r1; else victim=$r1 other=$r0; fi
	expect "[$ns] one rank preempted" "$(condition "$ns" "$victim" DisruptionTarget reason)" PreemptionByScheduler
	expect "[$ns] the preempted rank's exit code" "$(exit_code "$ns" "$victim" trainer)" 143
	log_has "$ns" "$other" trainer '"msg":"coord.stop_seen"' &&
		pass "[$ns] the other rank saw the stop in the store (coord.stop_seen)" || fail "[$ns] no coord.stop_seen on $other"
	expect "[$ns] the other rank's exit code" "$(exit_code "$ns" "$other" trainer)" 143
	expect "[$ns] Job failures counted" "$(failed_count "$ns" train-example)" 0
	local n0 n1
	wait_until 150 "both ranks' replacements to start" eval 'has_pod "$ns" 2 0 && has_pod "$ns" 2 1 && trainer_started "$ns" "$(nth_pod "$ns" 2 0)" && trainer_started "$ns" "$(nth_pod "$ns" 2 1)"' ||
		die "[$ns] the replacements did not both start"
	n0=$(nth_pod "$ns" 2 0)
	n1=$(nth_pod "$ns" 2 1)
	local s0 s1
	s0="$(last_field "$ns" "$n0" trainer resume.restored step) $(resumed_step "$ns" "$n0")"
	s1="$(last_field "$ns" "$n1" trainer resume.restored step) $(resumed_step "$ns" "$n1")"
	[ "$s0" != " " ] || fail "[$ns] rank 0 restored nothing"
	expect "[$ns] both ranks resumed one step (restored step, trainer step)" "$s1" "$s0"
	expect "[$ns] the trainer resumed at the restored step" "${s0#* }" "${s0%% *}"
	# The stop leaves the newest step both ranks committed: the lower of
	# the two ranks' newest (each rank commits its own checkpoint of the
	# other's newest when that is older, beneath any SIGTERM save).
	local c0 c1
	c0=$(podlog "$ns" "$r0" trainer | sed -n -E 's/.*"msg":"checkpoint.committed".*"step":([0-9]+).*/\1/p' | sort -n | tail -n 1)
	c1=$(podlog "$ns" "$r1" trainer | sed -n -E 's/.*"msg":"checkpoint.committed".*"step":([0-9]+).*/\1/p' | sort -n | tail -n 1)
	expect "[$ns] the ranks resumed the newest step both committed (the lower of $c0 and $c1)" "${s0%% *}" "$((c0 < c1 ? c0 : c1))"
	wait_until 300 "the Job to complete" job_condition "$ns" train-example Complete || die "[$ns] the Job did not complete"
	pass "[$ns] the Job completed"
	expect "[$ns] Job failures counted" "$(failed_count "$ns" train-example)" 0
}

# gang_opts: deploy/jobset's JobSet as scenario f runs its Indexed Job: the
# trainers meet in a directory of the node before they train.
gang_opts() {
	python3 -c 'import json,sys; print(json.dumps({"steps": int(sys.argv[3]), "rendezvous": sys.argv[2], "trainer_args": ["python", "-c", sys.argv[1]]}))' \
		"$RENDEZVOUS" "$W/rendezvous-$1" "$2"
}
# all_committed NS POD...: each POD's lifeboat committed a checkpoint.
all_committed() {
	local ns=$1 p
	for p in "${@:2}"; do
		log_has "$ns" "$p" trainer '"msg":"checkpoint.committed"' || return 1
	done
}
jobset_field() { kc get jobset -n "$1" train-gang -o jsonpath="{$2}"; }
jobset_condition() { [ "$(jobset_field "$1" ".status.conditions[?(@.type==\"$2\")].status")" = True ]; }

# gang_started NS N: both ranks of the JobSet's Nth gang have pods whose
# trainers started.
gang_started() {
	has_pod "$1" "$2" 0 && has_pod "$1" "$2" 1 &&
		trainer_started "$1" "$(nth_pod "$1" "$2" 0)" && trainer_started "$1" "$(nth_pod "$1" "$2" 1)"
}

# recreated_after NS OLD... -- NEW...: in the pod watch, every OLD pod's
# deletion comes before every NEW pod's creation (pods by name, or
# NAME@UID).
recreated_after() {
	python3 - "$W/$1.watch" "${@:2}" <<-'PY'
		import json, sys
		text, dec, i, n, seen = open(sys.argv[1]).read(), json.JSONDecoder(), 0, 0, {}
		sep = sys.argv.index("--")
		old, new = sys.argv[2:sep], sys.argv[sep + 1:]
		while True:
		    while i < len(text) and text[i].isspace():
		        i += 1
		    if i >= len(text):
		        break
		    ev, i = dec.raw_decode(text, i)
		    n += 1
		    md = ev["object"]["metadata"]
		    seen.setdefault((ev["type"], md["name"]), n)
		    seen.setdefault((ev["type"], "%s@%s" % (md["name"], md.get("uid"))), n)
		deleted = [seen.get(("DELETED", p)) for p in old]
		added = [seen.get(("ADDED", p)) for p in new]
		if None in deleted or None in added or max(deleted) > min(added):
		    print("deleted %s, added %s (watch event numbers)" % (deleted, added))
		    sys.exit(1)
	PY
}

# gang: g. deploy/jobset's JobSet, run by JobSet's controller: one rank is
# preempted, every rank exits 143, JobSet recreates the gang without
# counting a failure, both ranks resume one step.
gang() {
	local ns=sc-g
	gpus 2
	apply_job "$ns" jobset/jobset.yaml "$(gang_opts "$ns" 4000)"
	wait_until 60 "two pods" eval 'has_pod "$ns" 1 0 && has_pod "$ns" 1 1' || die "[$ns] JobSet made no gang"
	local r0 r1
	r0=$(nth_pod "$ns" 1 0)
	r1=$(nth_pod "$ns" 1 1)
	wait_until 120 "both ranks to commit" all_committed "$ns" "$r0" "$r1" || die "[$ns] the ranks committed nothing"
	pass "[$ns] JobSet's gang trains: $r0 and $r1 committed"
	# RANK from the pod's completion index, as deploy/jobset sets it.
	expect "[$ns] lifeboat's rank in each pod (checkpoint.committed rank)" \
		"$(last_field "$ns" "$r0" trainer checkpoint.committed rank) $(last_field "$ns" "$r1" trainer checkpoint.committed rank)" "0 1"
	# The urgent pod holds its GPU until the checks of the store below are
	# done: until then the new gang cannot meet, so it commits nothing.
	urgent "$ns" urgent 3600
	wait_until 150 "both ranks to end" eval 'terminated "$ns" "$r0" trainer && terminated "$ns" "$r1" trainer' || die "[$ns] the ranks did not both end"
	local victim other
	if [ "$(condition "$ns" "$r0" DisruptionTarget reason)" = PreemptionByScheduler ]; then victim=$r0 other=$r1; else victim=$r1 other=$r0; fi
	expect "[$ns] one rank preempted" "$(condition "$ns" "$victim" DisruptionTarget reason)" PreemptionByScheduler
	expect "[$ns] the preempted rank's exit code" "$(exit_code "$ns" "$victim" trainer)" 143
	log_has "$ns" "$other" trainer '"msg":"coord.stop_seen"' &&
		pass "[$ns] the other rank saw the stop in the store (coord.stop_seen)" || fail "[$ns] no coord.stop_seen on $other"
	expect "[$ns] the other rank's exit code" "$(exit_code "$ns" "$other" trainer)" 143
	# The step both ranks agreed on at the stop (the new gang may commit
	# newer ones before the checks below read the store).
	local common
	common=$(last_field "$ns" "$victim" trainer coord.flushed common)
	expect "[$ns] both ranks flushed the same common step (coord.flushed common)" \
		"$(last_field "$ns" "$other" trainer coord.flushed common)" "$common"
	wait_until 150 "the gang's new pods" eval 'has_pod "$ns" 2 0 && has_pod "$ns" 2 1' || die "[$ns] JobSet did not recreate the gang"
	local n0 n1 waiting
	n0=$(nth_pod "$ns" 2 0)
	n1=$(nth_pod "$ns" 2 1)
	# JobSet alone does not place the gang together: one new pod waits for
	# the GPU the urgent pod holds, the other may start and wait for it.
	pending() { [ "$(phase "$ns" "$1")/$(condition "$ns" "$1" PodScheduled reason)" = Pending/Unschedulable ]; }
	wait_until 60 "a new pod to wait for the GPU" eval 'pending "$n0" || pending "$n1"' || fail "[$ns] no new pod waits for the GPU"
	if pending "$n0"; then waiting=$n0; else waiting=$n1; fi
	pass "[$ns] $waiting waits while the urgent pod holds the GPU (Pending/Unschedulable)"
	expect "[$ns] lifeboat ls lists the step agreed at the stop as complete" "$(complete "$ns" train-gang "$common")" complete
	kc delete pod -n "$ns" urgent --wait=false >/dev/null
	wait_until 150 "the gang's new pods to start" gang_started "$ns" 2 || die "[$ns] JobSet's new gang did not start"
	recreated_after "$ns" "$r0" "$r1" -- "$n0" "$n1" &&
		pass "[$ns] JobSet recreated the gang once both old pods were gone (BlockingRecreate)" ||
		fail "[$ns] a new pod was created before the old gang was gone"
	expect "[$ns] the new pods' restart attempt" \
		"$(pod "$ns" "$n0" 'p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt")') $(pod "$ns" "$n1" 'p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt")')" "1 1"
	expect "[$ns] JobSet restarts (status.restarts)" "$(jobset_field "$ns" .status.restarts)" 1
	local counted
	counted=$(jobset_field "$ns" .status.restartsCountTowardsMax)
	expect "[$ns] restarts counted against maxRestarts (status.restartsCountTowardsMax)" "${counted:-0}" 0
	local s0 s1
	s0="$(last_field "$ns" "$n0" trainer resume.restored step) $(resumed_step "$ns" "$n0")"
	s1="$(last_field "$ns" "$n1" trainer resume.restored step) $(resumed_step "$ns" "$n1")"
	[ "$s0" != " " ] || fail "[$ns] rank 0 restored nothing"
	expect "[$ns] both ranks resumed one step (restored step, trainer step)" "$s1" "$s0"
	expect "[$ns] the trainer resumed at the restored step" "${s0#* }" "${s0%% *}"
	expect "[$ns] the ranks resumed the step agreed at the stop" "${s0%% *}" "$common"
	wait_until 300 "the JobSet to complete" jobset_condition "$ns" Completed || die "[$ns] the JobSet did not complete"
	pass "[$ns] the JobSet completed"
	counted=$(jobset_field "$ns" .status.restartsCountTowardsMax)
	expect "[$ns] JobSet restarts at the end (restarts/counted)" "$(jobset_field "$ns" .status.restarts)/${counted:-0}" 1/0
}

vcjob_field() { kc get jobs.batch.volcano.sh -n "$1" train-paddle -o jsonpath="{$2}"; }

# volcano_gang: h. deploy/volcano's Job, run by Volcano's scheduler and
# controller manager: one rank is preempted, every rank exits 143, Volcano
# restarts the whole job (its PodEvicted policy), the new gang is placed
# only when both its pods fit, both ranks resume one step.
volcano_gang() {
	local ns=sc-h
	gpus 2
	apply_job "$ns" volcano/volcano.yaml "$(gang_opts "$ns" 4000)"
	wait_until 90 "two pods" eval 'has_pod "$ns" 1 0 && has_pod "$ns" 1 1' || die "[$ns] Volcano made no gang"
	local r0 r1
	r0=$(nth_pod "$ns" 1 0)
	r1=$(nth_pod "$ns" 1 1)
	wait_until 120 "both ranks to commit" all_committed "$ns" "$r0" "$r1" || die "[$ns] the ranks committed nothing"
	pass "[$ns] Volcano's gang trains: ${r0%@*} and ${r1%@*} committed"
	expect "[$ns] the pods' scheduler and node" \
		"$(pod "$ns" "$r0" 'p["spec"]["schedulerName"] + " " + p["spec"].get("nodeName", "")') $(pod "$ns" "$r1" 'p["spec"]["schedulerName"] + " " + p["spec"].get("nodeName", "")')" \
		"volcano $NODE volcano $NODE"
	# VC_TASK_INDEX (the env plugin) as lifeboat's rank.
	expect "[$ns] lifeboat's rank in each pod (checkpoint.committed rank)" \
		"$(last_field "$ns" "$r0" trainer checkpoint.committed rank) $(last_field "$ns" "$r1" trainer checkpoint.committed rank)" "0 1"
	# The svc plugin: the host names the manifest's --master names.
	expect "[$ns] the pods' host names (svc plugin)" \
		"$(pod "$ns" "$r0" 'p["spec"]["hostname"] + "." + p["spec"]["subdomain"]') $(pod "$ns" "$r1" 'p["spec"]["hostname"] + "." + p["spec"]["subdomain"]')" \
		"train-paddle-trainer-0.train-paddle train-paddle-trainer-1.train-paddle"
	expect "[$ns] the hosts list (svc plugin's VC_TRAINER_HOSTS)" \
		"$(kc get cm -n "$ns" train-paddle-svc -o jsonpath='{.data.VC_TRAINER_HOSTS}')" \
		"train-paddle-trainer-0.train-paddle,train-paddle-trainer-1.train-paddle"
	expect "[$ns] the job's headless Service (svc plugin)" "$(kc get svc -n "$ns" train-paddle -o jsonpath='{.spec.clusterIP}')" None
	# The urgent pod is a plain pod of kube-scheduler, which preempts one
	# rank; two schedulers then place pods on the GPUs that frees: the
	# urgent pod (once the preempted pod is gone) and Volcano's restarted
	# gang (once both are gone). So that the urgent pod is placed first, as
	# the scenario needs, vc-scheduler is stopped until it is, and started
	# again (as after an upgrade or a leader change): it reads the whole
	# cluster again before it schedules.
	stop_pid "${PIDS[vc-scheduler]}"
	unset 'PIDS[vc-scheduler]'
	mv "$W/logs/vc-scheduler.log" "$W/logs/vc-scheduler-1.log"
	# The urgent pod holds its GPU until the checks of the store below are
	# done: until then the new gang cannot be placed, so it commits nothing.
	urgent "$ns" urgent 3600
	wait_until 150 "both ranks to end" eval 'terminated "$ns" "$r0" trainer && terminated "$ns" "$r1" trainer' || die "[$ns] the ranks did not both end"
	local victim other
	if [ "$(condition "$ns" "$r0" DisruptionTarget reason)" = PreemptionByScheduler ]; then victim=$r0 other=$r1; else victim=$r1 other=$r0; fi
	expect "[$ns] one rank preempted" "$(condition "$ns" "$victim" DisruptionTarget reason)" PreemptionByScheduler
	expect "[$ns] the preempted rank's exit code" "$(exit_code "$ns" "$victim" trainer)" 143
	# Volcano deletes the other pod as soon as the preempted one is being
	# deleted (PodEvicted): its lifeboat gets SIGTERM from the kubelet,
	# before or after it saw the stop in the store, and joins the same
	# job-wide stop either way.
	expect "[$ns] the other rank's exit code" "$(exit_code "$ns" "$other" trainer)" 143
	local common
	common=$(last_field "$ns" "$victim" trainer coord.flushed common)
	expect "[$ns] both ranks flushed the same common step (coord.flushed common)" \
		"$(last_field "$ns" "$other" trainer coord.flushed common)" "$common"
	log "[$ns] the stops the ranks flushed under (coord.flushed stop_id): $(last_field "$ns" "$victim" trainer coord.flushed stop_id)," \
		"$(last_field "$ns" "$other" trainer coord.flushed stop_id)"
	wait_until 150 "the urgent pod to start" running "$ns" urgent urgent || die "[$ns] the urgent pod did not start"
	wait_until 60 "Volcano to restart the job" eval '[ "$(vcjob_field "$ns" .status.retryCount)" = 1 ]' ||
		fail "[$ns] Volcano did not restart the job (status.retryCount $(vcjob_field "$ns" .status.retryCount))"
	vc_scheduler_up
	wait_until 150 "the gang's new pods" eval 'has_pod "$ns" 2 0 && has_pod "$ns" 2 1' || die "[$ns] Volcano did not recreate the gang"
	local n0 n1
	n0=$(nth_pod "$ns" 2 0)
	n1=$(nth_pod "$ns" 2 1)
	# Gang scheduling: one GPU is free, so neither new pod is placed.
	vc_unschedulable() { [ "$(condition "$ns" "$n0" PodScheduled status)/$(condition "$ns" "$n1" PodScheduled status)" = False/False ]; }
	wait_until 120 "vc-scheduler to consider the new gang" vc_unschedulable || fail "[$ns] vc-scheduler did not mark the new gang's pods unschedulable"
	expect "[$ns] the new gang waits whole while one GPU is free (nodes of the new pods)" \
		"[$(pod "$ns" "$n0" 'p["spec"].get("nodeName", "")')] [$(pod "$ns" "$n1" 'p["spec"].get("nodeName", "")')]" "[] []"
	expect "[$ns] lifeboat ls lists the step agreed at the stop as complete" "$(complete "$ns" train-paddle "$common")" complete
	kc delete pod -n "$ns" urgent --wait=false >/dev/null
	wait_until 150 "the gang's new pods to start" gang_started "$ns" 2 || die "[$ns] Volcano's new gang did not start"
	recreated_after "$ns" "$r0" "$r1" -- "$n0" "$n1" &&
		pass "[$ns] Volcano created the new gang once both old pods were gone" ||
		fail "[$ns] a new pod was created before the old gang was gone"
	expect "[$ns] the new pods' retry count (volcano.sh/job-retry-count)" \
		"$(pod "$ns" "$n0" 'p["metadata"]["annotations"].get("volcano.sh/job-retry-count")') $(pod "$ns" "$n1" 'p["metadata"]["annotations"].get("volcano.sh/job-retry-count")')" "1 1"
	expect "[$ns] the actions Volcano took on the job (ExecuteAction events)" \
		"$(kc get events -n "$ns" --field-selector involvedObject.name=train-paddle,reason=ExecuteAction -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' | sed 's/ *$//' | sort -u | tr '\n' ';')" \
		"Start to execute action RestartJob;"
	local s0 s1
	s0="$(last_field "$ns" "$n0" trainer resume.restored step) $(resumed_step "$ns" "$n0")"
	s1="$(last_field "$ns" "$n1" trainer resume.restored step) $(resumed_step "$ns" "$n1")"
	[ "$s0" != " " ] || fail "[$ns] rank 0 restored nothing"
	expect "[$ns] both ranks resumed one step (restored step, trainer step)" "$s1" "$s0"
	expect "[$ns] the trainer resumed at the restored step" "${s0#* }" "${s0%% *}"
	expect "[$ns] the ranks resumed the step agreed at the stop" "${s0%% *}" "$common"
	wait_until 300 "the Volcano Job to complete" eval '[ "$(vcjob_field "$ns" .status.state.phase)" = Completed ]' || die "[$ns] the Volcano Job did not complete"
	pass "[$ns] the Volcano Job completed"
	expect "[$ns] Volcano's retries at the end (status.retryCount of maxRetry 10)" "$(vcjob_field "$ns" .status.retryCount)" 1
}

# restoring: c. The replacement is preempted while it restores.
restoring() {
	local ns=sc-c
	gpus 1
	apply_job "$ns" job.yaml '{"pad_mb": 24, "steps": 2500, "save_every": 250}'
	wait_until 60 "the first pod" has_pod "$ns" 1 || die "[$ns] the Job made no pod"
	local p1 p2 p3
	p1=$(nth_pod "$ns" 1)
	wait_until 120 "a commit" log_has "$ns" "$p1" trainer '"msg":"checkpoint.committed"' || die "[$ns] $p1 committed no checkpoint"
	urgent "$ns" urgent 3
	wait_until 120 "$p1 to end" terminated "$ns" "$p1" trainer || die "[$ns] $p1 did not end"
	expect "[$ns] $p1 trainer exit code" "$(exit_code "$ns" "$p1" trainer)" 143
	local committed_step stored
	committed_step=$(last_field "$ns" "$p1" trainer checkpoint.committed step)
	stored=$(newest "$ns" train-example)
	expect "[$ns] the store's newest checkpoint (lifeboat ls) is the step committed last" "${stored%% *}" "$committed_step"
	# From the store to the pods at 2 Mbit/s: the next restore takes a while.
	tc qdisc add dev "$BRIDGE" root tbf rate 2mbit burst 32kbit latency 1s
	wait_until 60 "a replacement pod" has_pod "$ns" 2 || die "[$ns] the Job made no replacement"
	p2=$(nth_pod "$ns" 2)
	wait_until 120 "$p2 to restore" log_has "$ns" "$p2" trainer '"msg":"resume.progress"' || die "[$ns] $p2 did not start restoring"
	pass "[$ns] $p2 is restoring ($(podlog "$ns" "$p2" trainer | grep -F '"msg":"resume.progress"' | tail -n 1 | cut -c1-160))"
	urgent "$ns" urgent2 5
	wait_until 120 "$p2 to end" terminated "$ns" "$p2" trainer || die "[$ns] $p2 did not end"
	tc qdisc del dev "$BRIDGE" root
	expect "[$ns] $p2 DisruptionTarget" "$(condition "$ns" "$p2" DisruptionTarget reason)" PreemptionByScheduler
	expect "[$ns] $p2 exit code" "$(exit_code "$ns" "$p2" trainer)" 143
	expect "[$ns] $p2 stopped during its restore" "$(last_field "$ns" "$p2" trainer lifeboat.stopped_during_startup phase)" "store open and restore"
	log_has "$ns" "$p2" trainer '^trainer:' && fail "[$ns] $p2's trainer started" || pass "[$ns] $p2's trainer never started"
	expect "[$ns] the store's newest checkpoint is unchanged" "$(newest "$ns" train-example)" "$stored"
	expect "[$ns] Job failures counted" "$(failed_count "$ns" train-example)" 0
	wait_until 90 "a third pod" has_pod "$ns" 3 || die "[$ns] the Job made no third pod"
	p3=$(nth_pod "$ns" 3)
	wait_until 120 "$p3's trainer to start" trainer_started "$ns" "$p3" || die "[$ns] $p3's trainer did not start"
	expect "[$ns] $p3 restored the committed checkpoint" \
		"$(last_field "$ns" "$p3" trainer resume.restored step) $(last_field "$ns" "$p3" trainer resume.restored manifest_id)" "$stored"
	kc delete job -n "$ns" train-example --wait=false >/dev/null
}

# rawlog NS POD CONTAINER: the container's log lines as the kubelet wrote
# them (each with the time the runtime read it).
rawlog() {
	keep_logs
	local f dir=$W/keep/${1}_${2}_
	[[ $2 == *@* ]] && dir=$W/keep/${1}_${2%@*}_${2#*@}
	for f in $(ls "$dir"*/"$3"/ 2>/dev/null | sort -n); do
		cat "$dir"*/"$3/$f"
	done
}

# phases LABEL T0 CREATED OLD-LOG... -- NEW-LOG...: from the trainer
# containers' raw logs of the pods preempted (OLD) and of their
# replacements (NEW), the time from T0 (the urgent pod's creation) to every
# rank resumed, in consecutive phases:
#   scheduler  to the first lifeboat's SIGTERM (supervisor.stopping):
#              preemption and the kubelet
#   lifeboat   to the last rank's lifeboat exit (supervisor.exit): the
#              trainers' saves, the job-wide stop, the final uploads
#   engine     to the last new pod's container running (its first log
#              line), in two parts:
#     recreate   to the last new pod's creation (CREATED, the API's whole
#                seconds): the Job or JobSet controller
#     start      from there: the urgent pod's time on the GPU, the
#                scheduler, the sandbox and the container
#   restore    to the last rank's trainer printing the step it resumed:
#              the store opened, the restore, the trainer's load
# created NS POD...: the latest creationTimestamp of the PODs.
created() {
	local ns=$1 p
	for p in "${@:2}"; do
		pod "$ns" "$p" 'p["metadata"]["creationTimestamp"]'
	done | sort | tail -n 1
}
PHASES_PY='
import datetime, json, sys
def ts(s):
    d, _, frac = s.rstrip("Z").partition(".")
    t = datetime.datetime.strptime(d, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp()
    return t + float("0." + (frac or "0"))
def lines(f):
    for line in open(f):
        t, _, rest = line.partition(" ")
        yield ts(t), rest.split(" ", 2)[-1]
def event(f, msg):
    for _, text in lines(f):
        if "\"msg\":\"%s\"" % msg in text:
            return ts(json.loads(text)["time"])
    raise SystemExit("bench: no %s in %s" % (msg, f))
def first(f, prefix=""):
    for t, text in lines(f):
        if text.startswith(prefix):
            return t
    raise SystemExit("bench: no line %r in %s" % (prefix, f))
label, t0, created = sys.argv[1], float(sys.argv[2]), ts(sys.argv[3])
sep = sys.argv.index("--")
old, new = sys.argv[4:sep], sys.argv[sep + 1:]
term = min(event(f, "supervisor.stopping") for f in old)
exit_ = max(event(f, "supervisor.exit") for f in old)
start = max(first(f) for f in new)
resumed = max(first(f, "trainer: resumed from") for f in new)
parts = [("scheduler", term - t0), ("lifeboat", exit_ - term), ("engine", start - exit_),
         ("recreate", created - exit_), ("start", start - created),
         ("restore", resumed - start), ("total", resumed - t0)]
print("%s: ranks=%d " % (label, len(old)) + " ".join("%s=%.3fs" % p for p in parts))
'

# bench NS: not a test (bench/k8s.sh runs it): one preemption of job.yaml,
# timed from the urgent pod's creation to the replacement's trainer running
# from the restored step, split by the clocks of this machine (the
# containers' log lines and lifeboat's own log times).
bench() {
	local ns=$1 t0
	gpus 1
	apply_job "$ns" job.yaml '{}'
	wait_until 60 "the first pod" has_pod "$ns" 1 || die "[$ns] the Job made no pod"
	local p1 p2
	p1=$(nth_pod "$ns" 1)
	wait_until 120 "a commit" log_has "$ns" "$p1" trainer '"msg":"checkpoint.committed"' || die "[$ns] $p1 committed no checkpoint"
	t0=$(date +%s.%N)
	urgent "$ns" urgent 1
	wait_until 120 "a replacement pod" has_pod "$ns" 2 || die "[$ns] the Job made no replacement"
	p2=$(nth_pod "$ns" 2)
	wait_until 120 "$p2's trainer to start" trainer_started "$ns" "$p2" || die "[$ns] $p2's trainer did not start"
	podlog "$ns" "$p1" trainer >"$W/$ns-p1.log"
	podlog "$ns" "$p2" trainer >"$W/$ns-p2.log"
	local uid
	uid=$(ls -d "$W/keep/${ns}_${p2}_"* | head -n 1)
	python3 - "$t0" "$W/$ns-p1.log" "$W/$ns-p2.log" \
		"$(grep -h ' stdout [FP] trainer: resumed from' "$uid"/trainer/*.log | head -n 1 | cut -d' ' -f1)" \
		"$(pod "$ns" "$p2" 'p["metadata"]["creationTimestamp"]')" \
		"$(pod "$ns" "$p2" 'cond(p, "PodScheduled").get("lastTransitionTime")')" <<-'PY'
		import datetime, json, sys
		def ts(s):
		    d, _, frac = s.rstrip("Z").partition(".")
		    t = datetime.datetime.strptime(d, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp()
		    return t + float("0." + (frac or "0"))
		def event(f, msg, field="time"):
		    for line in open(f):
		        if '"msg":"%s"' % msg in line:
		            v = json.loads(line)[field]
		            return ts(v) if field == "time" else float(v)
		    raise SystemExit("bench: no %s in %s" % (msg, f))
		t0 = float(sys.argv[1])
		term = event(sys.argv[2], "supervisor.stopping")
		child = event(sys.argv[2], "supervisor.child_exited")
		exit_ = event(sys.argv[2], "supervisor.exit")
		restored = event(sys.argv[3], "resume.restored")
		restore = event(sys.argv[3], "resume.restored", "seconds")
		resumed = ts(sys.argv[4])
		created, scheduled = ts(sys.argv[5]), ts(sys.argv[6])  # whole seconds
		parts = [("scheduler", term - t0), ("grace", child - term), ("flush", exit_ - child),
		         ("replacement_created", created - exit_), ("replacement_scheduled", scheduled - created),
		         ("container_start", restored - restore - scheduled), ("restore", restore),
		         ("load", resumed - restored), ("total", resumed - t0)]
		print("k8s-bench: " + " ".join("%s=%.3fs" % p for p in parts))
	PY
	rawlog "$ns" "$p1" trainer >"$W/$ns-p1.raw"
	rawlog "$ns" "$p2" trainer >"$W/$ns-p2.raw"
	python3 -c "$PHASES_PY" k8s-bench-job "$t0" "$(created "$ns" "$p2")" "$W/$ns-p1.raw" -- "$W/$ns-p2.raw"
}

# gang_preempt NS ENGINE MANIFEST WAIT: what both gang benches do before
# they measure (scenario g's or h's setup, the urgent pod on the GPU for
# 1 s): the gang of two trains and commits, the urgent pod is created,
# the engine's new gang starts. It sets the caller's locals t0 (the urgent
# pod's creation), r0 and r1 (the first gang's pods), n0 and n1 (the new
# gang's).
gang_preempt() {
	local ns=$1 engine=$2 manifest=$3 wait=$4
	gpus 2
	apply_job "$ns" "$manifest" "$(gang_opts "$ns" 4000)"
	wait_until "$wait" "two pods" eval 'has_pod "$ns" 1 0 && has_pod "$ns" 1 1' || die "[$ns] $engine made no gang"
	r0=$(nth_pod "$ns" 1 0)
	r1=$(nth_pod "$ns" 1 1)
	wait_until 120 "both ranks to commit" all_committed "$ns" "$r0" "$r1" || die "[$ns] the ranks committed nothing"
	t0=$(date +%s.%N)
	urgent "$ns" urgent 1
	wait_until 180 "the gang's new pods to start" gang_started "$ns" 2 || die "[$ns] $engine's new gang did not start"
	n0=$(nth_pod "$ns" 2 0)
	n1=$(nth_pod "$ns" 2 1)
}

# gang_phases NS LABEL: the phases of gang_preempt's preemption, from the
# four trainers' logs, printed as a LABEL line like bench's k8s-bench-job.
# A Volcano pod is NAME@UID; its log file takes NAME-UID.
gang_phases() {
	local ns=$1 label=$2 p
	for p in "$r0" "$r1" "$n0" "$n1"; do
		rawlog "$ns" "$p" trainer >"$W/$ns-${p//@/-}.raw"
	done
	python3 -c "$PHASES_PY" "$label" "$t0" "$(created "$ns" "$n0" "$n1")" \
		"$W/$ns-${r0//@/-}.raw" "$W/$ns-${r1//@/-}.raw" -- "$W/$ns-${n0//@/-}.raw" "$W/$ns-${n1//@/-}.raw"
}

# bench_gang NS: not a test (bench/k8s.sh runs it): the same preemption of
# deploy/jobset's gang of two, timed by phases (gang_phases).
bench_gang() {
	local ns=$1 t0 r0 r1 n0 n1
	gang_preempt "$ns" JobSet jobset/jobset.yaml 60
	gang_phases "$ns" k8s-bench-gang
	kc delete jobset -n "$ns" train-gang --wait=false >/dev/null
}

# bench_volcano NS: deploy/volcano's Job, timed by phases (gang_phases).
# vc-scheduler runs throughout, as in a cluster, so kube-scheduler and
# vc-scheduler race for the GPU the preemption frees: a run where a pod of
# the new gang was placed before the urgent pod prints a
# k8s-bench-volcano-raced line instead of the phases.
bench_volcano() {
	local ns=$1 t0 r0 r1 n0 n1
	gang_preempt "$ns" Volcano volcano/volcano.yaml 90
	if ! python3 - "$W/$ns.watch" <<-'PY'; then
		# The urgent pod was placed (spec.nodeName) before any pod of the
		# new gang: the watch events' order.
		import json, sys
		text, dec, i, n, first = open(sys.argv[1]).read(), json.JSONDecoder(), 0, 0, {}
		while True:
		    while i < len(text) and text[i].isspace():
		        i += 1
		    if i >= len(text):
		        break
		    ev, i = dec.raw_decode(text, i)
		    n += 1
		    md = ev["object"]["metadata"]
		    if ev["object"]["spec"].get("nodeName"):
		        key = "urgent" if md["name"] == "urgent" else md["annotations"].get("volcano.sh/job-version")
		        first.setdefault(key, n)
		gangs = [v for k, v in first.items() if k not in ("urgent", "0")]
		sys.exit(0 if "urgent" in first and all(first["urgent"] < v for v in gangs) else 1)
	PY
		echo "k8s-bench-volcano-raced: a pod of the new gang was placed before the urgent pod"
	else
		gang_phases "$ns" k8s-bench-volcano
	fi
	kc delete jobs.batch.volcano.sh -n "$ns" train-paddle --wait=false >/dev/null
}

# bench_bare NS: not a test (bench/k8s.sh runs it): the baseline of bench,
# the same preemption with a bare shell as the trainer container's PID 1
# (no lifeboat, no checkpoint), timed from the urgent pod's creation to the
# replacement's shell running.
bench_bare() {
	local ns=$1 t0 p1 p2 uid
	gpus 1
	apply_job "$ns" job.yaml '{"bare": true}'
	wait_until 60 "the first pod" has_pod "$ns" 1 || die "[$ns] the Job made no pod"
	p1=$(nth_pod "$ns" 1)
	wait_until 120 "$p1's shell to start" trainer_started "$ns" "$p1" || die "[$ns] $p1's shell did not start"
	t0=$(date +%s.%N)
	urgent "$ns" urgent 1
	wait_until 120 "a replacement pod" has_pod "$ns" 2 || die "[$ns] the Job made no replacement"
	p2=$(nth_pod "$ns" 2)
	wait_until 120 "$p2's shell to start" trainer_started "$ns" "$p2" || die "[$ns] $p2's shell did not start"
	keep_logs
	uid=$(ls -d "$W/keep/${ns}_${p2}_"* | head -n 1)
	python3 - "$t0" "$(grep -h ' stdout [FP] trainer: no checkpoint' "$uid"/trainer/*.log | head -n 1 | cut -d' ' -f1)" <<-'PY'
		import datetime, sys
		d, _, frac = sys.argv[2].rstrip("Z").partition(".")
		t = datetime.datetime.strptime(d, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp()
		print("k8s-bench-bare: total=%.3fs" % (t + float("0." + (frac or "0")) - float(sys.argv[1])))
	PY
	kc delete job -n "$ns" train-example --wait=false >/dev/null
}

# --- main ------------------------------------------------------------------

t0=$SECONDS
images
log "images ready in $((SECONDS - t0))s"
t0=$SECONDS
pki
bridge_up
containerd_up
minio_up
control_plane_up
kubelet_up
keep_logs_loop &
PIDS[keep-logs]=$!
kc apply -f deploy/k8s/priorityclasses.yaml >/dev/null
case " ${SCENARIOS[*]} " in *" g "* | *" bench-gang "*)
	t1=$SECONDS
	jobset_up
	log "JobSet's controller up in $((SECONDS - t1))s"
	;;
esac
case " ${SCENARIOS[*]} " in *" h "* | *" bench-volcano "*)
	t1=$SECONDS
	volcano_up
	log "Volcano's scheduler and controller manager up in $((SECONDS - t1))s"
	;;
esac
log "cluster up in $((SECONDS - t0))s"
pass "one-node cluster up (node $NODE Ready) in $((SECONDS - t0))s"

for sc in "${SCENARIOS[@]}"; do
	t0=$SECONDS
	case $sc in
	a)
		new_ns sc-a "job.yaml: preempted, commits, resumes"
		preempt sc-a job.yaml run
		check_rbac sc-a
		check_api sc-a
		;;
	b1)
		new_ns sc-b1 "job-sidecar.yaml: preempted, the sidecar commits, resumes"
		preempt sc-b1 job-sidecar.yaml sidecar
		;;
	b2)
		new_ns sc-b2 "job-init-restore.yaml: preempted, commits, the init container restores"
		preempt sc-b2 job-init-restore.yaml init
		;;
	c)
		new_ns sc-c "preempted while restoring"
		restoring
		;;
	d)
		new_ns sc-d "a bad flag value fails the Job at once"
		config_error
		;;
	e)
		new_ns sc-e "a save that outlives the grace period"
		slow_save
		;;
	f)
		new_ns sc-f "an Indexed Job of two ranks, one preempted"
		ranks
		;;
	g)
		new_ns sc-g "jobset.yaml: a JobSet of two ranks, one preempted, the gang recreated"
		gang
		;;
	h)
		new_ns sc-h "volcano.yaml: a Volcano Job of two ranks, one preempted, the gang restarted"
		volcano_gang
		;;
	bench)
		bench_runs=$((${bench_runs:-0} + 1))
		new_ns "sc-bench-$bench_runs" "bench: preemption to resumed trainer, timed"
		bench "sc-bench-$bench_runs"
		;;
	bench-gang)
		gang_runs=$((${gang_runs:-0} + 1))
		new_ns "sc-gang-$gang_runs" "bench: the same preemption of a JobSet gang of two, timed"
		bench_gang "sc-gang-$gang_runs"
		;;
	bench-volcano)
		volcano_runs=$((${volcano_runs:-0} + 1))
		new_ns "sc-volcano-$volcano_runs" "bench: the same preemption of a Volcano gang of two, timed"
		bench_volcano "sc-volcano-$volcano_runs"
		;;
	bench-bare)
		bare_runs=$((${bare_runs:-0} + 1))
		new_ns "sc-bare-$bare_runs" "bench: the same preemption with a bare shell trainer, timed"
		bench_bare "sc-bare-$bare_runs"
		;;
	*) die "unknown scenario $sc" ;;
	esac
	log "[$sc] took $((SECONDS - t0))s"
	# The next scenario starts on a free GPU.
	kc delete ns "$CURRENT" --wait=false >/dev/null
	kc delete pods -n "$CURRENT" --all --grace-period=0 --force >/dev/null 2>&1 || true
	wait_until 60 "$CURRENT's pods to go" eval '[ -z "$(kc get pods -n "$CURRENT" -o name 2>/dev/null)" ]' || true
done
log "total $((SECONDS - t_all))s"
