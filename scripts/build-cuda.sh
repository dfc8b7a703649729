#!/usr/bin/env bash
# Builds the CUDA addon with cmake-js: scripts/build-cuda.sh [outdir]. The default outdir, build/, gives
# build/Release/hora.node, where ts/loader.ts looks (`npm run build:cuda`); .ci/run builds into
# build-cuda/ so the CPU addon in build/ stays the one the tests load.
# Needs cmake and nvcc (CUDACXX, else /usr/local/cuda/bin/nvcc, else nvcc on PATH). GPU architectures
# default to 80;90; CUDAARCHS="86;89" (read by CMake) picks others.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out="${1:-build}"
jobs="$(nproc 2>/dev/null || echo 2)"
exec npx --no-install cmake-js build --config Release --out "$out" --parallel "$jobs" --CDHORA_CUDA=ON
