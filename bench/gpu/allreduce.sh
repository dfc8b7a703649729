#!/usr/bin/env bash
# GPU allreduce benchmarks on a machine with a CUDA GPU, after `npm run build:cuda` (or HORA_ADDON set):
#   bash bench/gpu/allreduce.sh [MiB=256] [ITERS=10]
# 1. the staged pipeline: 2 ranks forced over TCP, DeviceBuffer against host buffers (target <= 1.15x);
# 2. the IPC path: 2 ranks on one GPU, against the copy-based lower bound (see allreduce.js).
# NCCL stays off (HORA_NCCL=0): both ranks share one GPU, which NCCL does not support.
set -euo pipefail
cd "$(dirname "$0")/../.."
HORA="node dist/ts/cli/main.js"
echo "GPU allreduce, $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
echo "staged (HORA_TRANSPORT=tcp):"
HORA_NCCL=0 HORA_TRANSPORT=tcp $HORA run -np 2 node bench/gpu/allreduce.js "$@"
echo "ipc:"
HORA_NCCL=0 $HORA run -np 2 node bench/gpu/allreduce.js "$@"
