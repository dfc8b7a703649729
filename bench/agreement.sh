#!/usr/bin/env bash
# Builds and runs bench/agreement_bench.cc (the cost of the cross-rank consistency check on an 8-byte
# allreduce) against the core in native/src. Run from the repository root:
#   bash bench/agreement.sh [ROUNDS] [ITERS]
set -euo pipefail
out=/tmp/hora-agreement-bench
mkdir -p "$out"
mapfile -t sources < <(find native/src -name '*.cc' | sort)
g++ -std=c++17 -O2 -pthread -Inative/src bench/agreement_bench.cc "${sources[@]}" -lrt -o "$out/agreement_bench"
"$out/agreement_bench" "$@"
