#!/usr/bin/env bash
# The GPU flavour end to end, on a machine with a real NVIDIA GPU (not in
# CI, which has none). It builds lifeboat with cgo (NVML is loaded at run
# time) and without (the static release build), then checks:
#
#   - doctor: NVML seen, every GPU listed, the protections enforced;
#   - device mapping: --gpus by index gives the trainer that GPU by UUID and
#     CUDA (the driver API, through ctypes) sees exactly it; --gpus all
#     gives every GPU;
#   - MIG, when nvidia-smi lists MIG devices: one instance by its UUID is
#     the trainer's device 0, and --gpu-memory-limit auto is taken of the
#     instance's memory;
#   - memory limit flags: auto and a fraction against nvidia-smi's total;
#   - the GPU memory watchdog tripping on a real allocation (cuMemAlloc
#     through ctypes, no CUDA toolkit or framework needed): with NVML's
#     pids matching (a plain process) and, as root, inside a new PID
#     namespace, where NVML's pids are the host's as in a pod and the
#     device's memory is the measure;
#   - the refusal: the static build with --gpu-memory-policy term exits 2.
#
# Each check prints PASS, FAIL or SKIP; the results are written into
# docs/GPU.md (section "Results") unless --no-record is given. Without an
# NVIDIA GPU it says so and exits 0, changing nothing. Where go is not
# installed, give prebuilt binaries: LIFEBOAT_BIN (cgo) and
# LIFEBOAT_STATIC_BIN (CGO_ENABLED=0).
#
#   scripts/gpu-check.sh [--no-record]
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

record=1
for a in "$@"; do
	case $a in
	--no-record) record=0 ;;
	*)
		echo "usage: scripts/gpu-check.sh [--no-record]" >&2
		exit 2
		;;
	esac
done

if ! command -v nvidia-smi >/dev/null 2>&1 || ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
	echo "gpu-check: no NVIDIA GPU here (no nvidia-smi or no /dev/nvidiaN); nothing to check, docs/GPU.md unchanged"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.md
pass=0 fail=0 skip=0
result() { # STATUS NAME DETAIL
	printf '%-4s %s: %s\n' "$1" "$2" "$3"
	printf '| %s | %s | %s |\n' "$1" "$2" "$(printf '%s' "$3" | tr '\n|' ' /')" >>"$results"
	case $1 in PASS) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; *) skip=$((skip + 1)) ;; esac
}

bin=${LIFEBOAT_BIN:-$work/lifeboat}
static=${LIFEBOAT_STATIC_BIN:-$work/lifeboat-static}
if [ -z "${LIFEBOAT_BIN:-}" ] || [ -z "${LIFEBOAT_STATIC_BIN:-}" ]; then
	if ! command -v go >/dev/null 2>&1; then
		echo "gpu-check: go is not installed; set LIFEBOAT_BIN and LIFEBOAT_STATIC_BIN to prebuilt binaries" >&2
		exit 2
	fi
	export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
	[ -n "${LIFEBOAT_BIN:-}" ] || CGO_ENABLED=1 go build -ldflags "$LIFEBOAT_LDFLAGS" -o "$bin" ./cmd/lifeboat || exit 1
	[ -n "${LIFEBOAT_STATIC_BIN:-}" ] || CGO_ENABLED=0 go build -ldflags "$LIFEBOAT_LDFLAGS" -o "$static" ./cmd/lifeboat || exit 1
fi
py=$(command -v python3 || true)

# cuda.py: what CUDA's driver API shows a process, and a GPU allocation,
# through ctypes and libcuda.so.1 (present wherever the driver is).
cat >"$work/cuda.py" <<'PY'
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
def check(r, what):
    if r != 0:
        print("CUDA error", r, "in", what, flush=True)
        sys.exit(3)
check(cuda.cuInit(0), "cuInit")
n = ctypes.c_int()
check(cuda.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
if sys.argv[1] == "count":
    print("cuda_devices", n.value, flush=True)
    sys.exit(0)
# alloc MiB [seconds]: allocate on device 0 in 256 MiB chunks, then hold.
mib, hold = int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 60
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
done = 0
while done < mib:
    p = ctypes.c_uint64()
    step = min(256, mib - done)
    check(cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(step << 20)), "cuMemAlloc")
    done += step
print("allocated", done, "MiB", flush=True)
time.sleep(hold)
print("held", hold, "s without being stopped", flush=True)
PY

run_env() { # ENV... -- lifeboat-args: runs the cgo lifeboat, output in $out, code in $code
	local envs=()
	while [ "$1" != "--" ]; do envs+=("$1"); shift; done
	shift
	out=$(env "${envs[@]}" "$bin" run --log-format json --grace 5s "$@" 2>&1)
	code=$?
}
field() { printf '%s\n' "$out" | sed -n "s/^$1=//p" | head -1; }

mapfile -t gpus < <(nvidia-smi --query-gpu=index,uuid,memory.total --format=csv,noheader,nounits)
migs=$(nvidia-smi -L | sed -n 's/.*(UUID: \(MIG-[^)]*\)).*/\1/p')
echo "== nvidia-smi -L"
nvidia-smi -L
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
IFS=', ' read -r idx uuid total <<<"${gpus[0]}"
# dev is the device the single-device checks use: the first MIG device
# where MIG is on (a MIG-enabled GPU with several cannot be given whole).
dev=$idx
[ -z "$migs" ] || dev=$(printf '%s\n' "$migs" | head -1)
model=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

# doctor
dj=$(NVIDIA_VISIBLE_DEVICES=all "$bin" doctor --json --gpus "$dev" --gpu-memory-limit 1024 --gpu-memory-policy term 2>&1)
dcode=$?
if [ -n "$py" ]; then
	dsum=$(printf '%s' "$dj" | "$py" -c 'import json,sys; r=json.load(sys.stdin); p={x["name"]:x["state"] for x in r["protections"]}; print(r["gpu"]["nvml"], len(r["gpu"]["devices_seen"] or []), p["device_visibility"], p["gpu_memory_watchdog"])' 2>&1)
else
	dsum=$(printf '%s' "$dj" | grep -c '"enforced"')
fi
if [ $dcode -eq 0 ] && [[ $dsum == "ok ${#gpus[@]} enforced enforced" || (-z $py && $dsum -ge 2) ]]; then
	result PASS doctor "exit 0; nvml, devices seen, device_visibility, gpu_memory_watchdog: $dsum"
else
	result FAIL doctor "exit $dcode; $dsum"
fi

# device mapping by index
for g in "${gpus[@]:0:2}"; do
	IFS=', ' read -r i u _ <<<"$g"
	if [ -n "$migs" ]; then
		result SKIP "--gpus $i" "MIG is enabled on this machine: see the MIG check"
		continue
	fi
	run_env NVIDIA_VISIBLE_DEVICES=all -- --gpus "$i" -- sh -c 'echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; echo FLAGS_selected_gpus=$FLAGS_selected_gpus; [ -z "$0" ] || "$0" "$1" count' "$py" "$work/cuda.py"
	got=$(field CUDA_VISIBLE_DEVICES)/$(field FLAGS_selected_gpus)/$(printf '%s\n' "$out" | sed -n 's/^cuda_devices //p')
	want="$u/0/${py:+1}"
	if [ $code -eq 0 ] && [ "$got" = "$want" ]; then
		result PASS "--gpus $i" "CUDA_VISIBLE_DEVICES/FLAGS_selected_gpus/CUDA's count = $got"
	else
		result FAIL "--gpus $i" "exit $code, got $got, want $want"
	fi
done
if [ -n "$migs" ]; then
	result SKIP "--gpus all" "MIG is enabled on this machine: see the MIG check"
else
	run_env NVIDIA_VISIBLE_DEVICES=all -- --gpus all -- sh -c 'echo FLAGS_selected_gpus=$FLAGS_selected_gpus; [ -z "$0" ] || "$0" "$1" count' "$py" "$work/cuda.py"
	n=$(printf '%s\n' "$out" | sed -n 's/^cuda_devices //p')
	sel=$(field FLAGS_selected_gpus)
	if [ $code -eq 0 ] && { [ -z "$py" ] || [ "$n" = "${#gpus[@]}" ]; }; then
		result PASS "--gpus all" "FLAGS_selected_gpus=$sel, CUDA sees ${n:-?} of ${#gpus[@]} GPUs"
	else
		result FAIL "--gpus all" "exit $code, FLAGS_selected_gpus=$sel, CUDA sees ${n:-?} of ${#gpus[@]}"
	fi
fi

# MIG
if [ -z "$migs" ]; then
	result SKIP MIG "no MIG device on this machine"
else
	mig=$dev
	run_env NVIDIA_VISIBLE_DEVICES=all -- --gpus "$mig" --gpu-memory-limit auto -- sh -c 'echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; echo FLAGS_selected_gpus=$FLAGS_selected_gpus; echo FLAGS_gpu_memory_limit_mb=$FLAGS_gpu_memory_limit_mb; [ -z "$0" ] || "$0" "$1" count' "$py" "$work/cuda.py"
	got=$(field CUDA_VISIBLE_DEVICES)/$(field FLAGS_selected_gpus)/$(printf '%s\n' "$out" | sed -n 's/^cuda_devices //p')
	if [ $code -eq 0 ] && [ "$got" = "$mig/0/${py:+1}" ]; then
		result PASS "MIG $mig" "the trainer's device 0; auto limit $(field FLAGS_gpu_memory_limit_mb) MiB of the instance"
	else
		result FAIL "MIG $mig" "exit $code, got $got"
	fi
fi

# memory limit flags, on the first GPU
margin=$((total / 20 > 512 ? total / 20 : 512))
for spec in auto 0.5; do
	want=$((total - margin))
	[ "$spec" = 0.5 ] && want=$((total / 2))
	run_env NVIDIA_VISIBLE_DEVICES=all -- --gpus "$dev" --gpu-memory-limit "$spec" -- sh -c 'echo FLAGS_gpu_memory_limit_mb=$FLAGS_gpu_memory_limit_mb; echo FLAGS_allocator_strategy=$FLAGS_allocator_strategy'
	got=$(field FLAGS_gpu_memory_limit_mb)
	if [ -n "$migs" ]; then
		[ $code -eq 0 ] && [ -n "$got" ] && result PASS "--gpu-memory-limit $spec" "$got MiB on a MIG instance" || result FAIL "--gpu-memory-limit $spec" "exit $code, $got"
	elif [ $code -eq 0 ] && [ "${got:-0}" -ge $((want - 1)) ] && [ "${got:-0}" -le "$want" ] && [ "$(field FLAGS_allocator_strategy)" = auto_growth ]; then
		result PASS "--gpu-memory-limit $spec" "FLAGS_gpu_memory_limit_mb=$got of $total MiB, auto_growth"
	else
		result FAIL "--gpu-memory-limit $spec" "exit $code, FLAGS_gpu_memory_limit_mb=$got, want $want of $total"
	fi
done

# the watchdog on a real allocation: limit 1024 MiB, trips above 1536 MiB;
# the trainer takes 3072 MiB and holds it.
watch() { # NAME MEASURE [PREFIX...]
	local name=$1 measure=$2
	shift 2
	if [ -z "$py" ]; then
		result SKIP "$name" "no python3 for the ctypes allocation"
		return
	fi
	out=$("$@" env NVIDIA_VISIBLE_DEVICES=all "$bin" run --log-format json --grace 5s --memory-cgroup off --gpus "$dev" \
		--gpu-memory-limit 1024 --gpu-memory-policy term --gpu-watch-interval 1s -- "$py" "$work/cuda.py" alloc 3072 60 2>&1)
	code=$?
	if [ $code -eq 143 ] && printf '%s' "$out" | grep -q "\"msg\":\"gpu.memory_over\".*\"measure\":\"$measure\"" && ! printf '%s' "$out" | grep -q "held 60"; then
		result PASS "$name" "exit 143: gpu.memory_over (measure $measure), the trainer stopped by SIGTERM"
	else
		result FAIL "$name" "exit $code, want 143 and gpu.memory_over with measure $measure; $(printf '%s' "$out" | grep -E '"msg":"gpu\.(memory|watchdog|usage)|^allocated|^held|CUDA error|Error' | tail -4)"
	fi
}
watch "watchdog, NVML's pids are the trainer's" per_process
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1; then
	watch "watchdog in a new PID namespace (NVML reports host pids, as in a pod)" device unshare --pid --fork --mount-proc
else
	result SKIP "watchdog in a new PID namespace" "needs root and unshare"
fi

# the refusal without NVML
out=$(NVIDIA_VISIBLE_DEVICES=0 "$static" run --gpu-memory-limit 1024 --gpu-memory-policy term -- true 2>&1)
code=$?
if [ $code -eq 2 ] && printf '%s' "$out" | grep -q -- "--gpu-memory-policy warn"; then
	result PASS "static build, --gpu-memory-policy term" "exit 2 before the trainer starts, saying to use --gpu-memory-policy warn"
else
	result FAIL "static build, --gpu-memory-policy term" "exit $code: $(printf '%s' "$out" | tail -1)"
fi

echo "== $pass passed, $fail failed, $skip skipped"
if [ $record = 1 ]; then
	{
		sed '/^## Results$/,$d' docs/GPU.md
		echo "## Results"
		echo
		echo "$(date -u +%Y-%m-%d), ${#gpus[@]} x $model, driver $driver${migs:+, MIG enabled}: $pass passed, $fail failed, $skip skipped."
		echo
		echo "| | check | detail |"
		echo "|---|---|---|"
		cat "$results"
	} >"$work/GPU.md" && cp "$work/GPU.md" docs/GPU.md
	echo "results written to docs/GPU.md"
fi
[ $fail -eq 0 ]
