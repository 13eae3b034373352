#!/usr/bin/env bash
# On a machine with a real NVIDIA GPU: builds lifeboat with cgo (NVML is
# loaded at run time), prints `lifeboat doctor --json`, and runs a small
# child under `lifeboat run` with a Paddle memory-pool limit, printing what
# the child saw. Record its output in docs/GPU.md.
#
#   scripts/gpu-check.sh [--gpus SPEC] [--gpu-memory-limit SPEC]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CGO_ENABLED=1 go build -ldflags "$LIFEBOAT_LDFLAGS" -o "$work/lifeboat" ./cmd/lifeboat
args=("$@")
((${#args[@]})) || args=(--gpu-memory-limit auto)

echo "== nvidia-smi -L"
nvidia-smi -L || echo "(nvidia-smi not available)"
echo "== lifeboat doctor --json ${args[*]}"
NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-all} "$work/lifeboat" doctor --json "${args[@]}" || true
echo "== lifeboat run ${args[*]} -- (child prints its GPU environment)"
NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-all} "$work/lifeboat" run --log-format text "${args[@]}" -- sh -c '
	env | grep -E "^(CUDA_|FLAGS_|NVIDIA_)" | sort
	if command -v nvidia-smi >/dev/null; then
		nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv
	fi
	if command -v python3 >/dev/null; then
		python3 - <<PY || true
import ctypes, os
try:
    cuda = ctypes.CDLL("libcuda.so.1")
    n = ctypes.c_int()
    cuda.cuInit(0)
    cuda.cuDeviceGetCount(ctypes.byref(n))
    print("CUDA devices visible to the child:", n.value)
except OSError as e:
    print("libcuda not loadable:", e)
PY
	fi'
