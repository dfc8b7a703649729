#!/usr/bin/env bash
# Picks HORA_FUSION_MB by measurement: the same training-step workload (bench/fusion-worker.js) under each
# fusion buffer size, alternating the sizes round after round so machine noise hits all of them alike.
# Usage: bench/fusion.sh [ROUNDS] [NP]      prints one JSON line per run, then the median per size.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}; np=${2:-2}
sizes=(0 1 4 16 64)
out=$(mktemp)
for ((r = 0; r < rounds; r++)); do
  for mb in "${sizes[@]}"; do
    HORA_FUSION_MB=$mb node dist/ts/cli/main.js run -np "$np" node bench/fusion-worker.js | sed 's/^\[0\] //' | tee -a "$out"
  done
done
node -e '
const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map((l) => JSON.parse(l));
const by = {};
for (const r of rows) (by[r.fusionMB] ??= []).push(r.step_us);
console.log("fusionMB  median_step_us  runs");
for (const [mb, v] of Object.entries(by)) { v.sort((a, b) => a - b); console.log(String(mb).padStart(8), String(v[v.length >> 1]).padStart(15), String(v.length).padStart(5)); }
' "$out"
rm -f "$out"
