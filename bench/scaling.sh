#!/usr/bin/env bash
# Scaling efficiency of the tfjs MNIST example (examples/tfjs-mnist.js), same global batch:
#   efficiency = samples/s with 2 ranks / (2 x samples/s with 1 rank), the median over PAIRS alternating
#   1-rank / 2-rank runs (alternating so that drift in the machine's speed hits both alike);
#   exposed communication per step = 2-rank step time - the same 2-rank step with HORA_TFJS_SKIP_ALLREDUCE=1
#   (measurement only: DistributedOptimizer then skips the allreduce), median over PAIRS;
#   hidden = 1 - exposed / (allreduce of one step's gradients alone), clamped to [0, 1].
# The tfjs cpu backend is single-threaded JavaScript, so each rank uses one core.
# Usage: bench/scaling.sh [PAIRS=3] [EPOCHS=3] [BATCH=128]   (run `npm run build:ts` first)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-3}
EPOCHS=${2:-3}
BATCH=${3:-128}
HORA="node dist/ts/cli/main.js"
run() { # np, extra env... -> the example's JSON summary line
  local np=$1; shift
  env "$@" $HORA run -np "$np" node examples/tfjs-mnist.js --epochs "$EPOCHS" --batch "$BATCH" --json 2>/dev/null \
    | sed -n 's/^\[0\] //p' | grep '^{' | tail -1
}
echo "tfjs MNIST scaling: $PAIRS pairs, $EPOCHS epochs, global batch $BATCH, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d" " -f1-3 /proc/loadavg)"
results=()
for i in $(seq 1 "$PAIRS"); do
  one=$(run 1)
  two=$(run 2)
  skip=$(run 2 HORA_TFJS_SKIP_ALLREDUCE=1)
  echo "pair $i: 1 rank $one"
  echo "        2 ranks $two"
  echo "        2 ranks, no allreduce $skip"
  results+=("{\"one\":$one,\"two\":$two,\"skip\":$skip}")
done
printf '%s\n' "${results[@]}" | node -e '
const rows = require("fs").readFileSync(0, "utf8").trim().split("\n").map((l) => JSON.parse(l));
const median = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const f = (x, d = 2) => x.toFixed(d);
const sps1 = median(rows.map((r) => r.one.sps)), sps2 = median(rows.map((r) => r.two.sps));
const eff = median(rows.map((r) => r.two.sps / (2 * r.one.sps)));
const exposed = median(rows.map((r) => r.two.stepMs - r.skip.stepMs));
const comm = median(rows.map((r) => r.two.commMs));
const wait = median(rows.map((r) => r.two.waitMs));
console.log(`samples/s: 1 rank ${f(sps1, 0)}, 2 ranks ${f(sps2, 0)} (${f(sps2 / 2, 0)} per rank)   [medians]`);
console.log(`scaling efficiency sps(2)/(2 sps(1)): ${f(eff, 3)} (median of ${rows.length} ratios: ${rows.map((r) => f(r.two.sps / (2 * r.one.sps), 3)).join(", ")})`);
console.log(`step time, 2 ranks: ${f(median(rows.map((r) => r.two.stepMs)))} ms; without allreduce: ${f(median(rows.map((r) => r.skip.stepMs)))} ms`);
console.log(`exposed communication per step: ${f(exposed)} ms (time blocked in Work.wait: ${f(wait)} ms)`);
console.log(`allreduce of one step of gradients alone: ${f(comm)} ms; hidden by overlap: ${f(100 * Math.min(1, Math.max(0, 1 - exposed / comm)), 0)}%`);
'
