#!/usr/bin/env bash
# Builds and runs bench/gpu/reduce_bench.cu (reduction kernels against the device-to-device copy) on a
# machine with a CUDA GPU. Run from the repository root:
#   bash bench/gpu/reduce.sh [MiB=256] [ITERS=20] [SOURCES=2]
set -euo pipefail
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
out=/tmp/hora-gpu-bench
mkdir -p "$out"
"$NVCC" -std=c++17 -O3 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -Inative/src \
  bench/gpu/reduce_bench.cu native/src/cuda/kernels.cu native/src/common/types.cc -o "$out/reduce_bench"
"$out/reduce_bench" "$@"
