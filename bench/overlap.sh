#!/usr/bin/env bash
# How much communication DistributedOptimizer's overlap hides behind tfjs's backward pass.
#
#   bench/overlap.sh cluster RATE [ROUNDS=8]   2 simulated hosts x 1 rank (test/cluster/cluster.sh), links
#                                              tbf-shaped to RATE (tc syntax: 100mbit)
#   bench/overlap.sh shm [ROUNDS=8]            2 ranks on this machine (shared memory), one core each
#
# One job (bench/overlap-worker.js) trains the same MLP (LAYERS, default 784-2048-2048-10, batch BATCH=64
# per rank, plain SGD inside) three ways in each process: DistributedOptimizer with overlap: true, with
# overlap: false, and the plain optimizer (no communication). A round is one step of each, in an order
# that rotates from round to round, so a change in the machine's load (it is shared) hits all three alike;
# WARMUP=2 rounds are left out. Per round:
#   exposed(mode) = step time(mode) - step time(plain)
#   hidden        = 1 - exposed(overlap) / exposed(overlap: false)   (the share of the communication that
#                   overlap: false exposes which overlap hides)
#   ratio         = step time(overlap) / step time(overlap: false)
# and the medians over rounds. Also: the backward pass (optimizer.stats) and one step's gradients in a
# single allreduce alone, to check where the link rate puts the two.
# Results go to docs/bench-results/overlap-<what>-<date>/. Needs `npm run build:ts`; `cluster` needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:?cluster or shm}
if [ "$WHAT" = cluster ]; then
  RATE=${2:?link rate, tc syntax (100mbit)}
  ROUNDS=${3:-8}
else
  RATE=
  ROUNDS=${2:-8}
fi
NAME=hov
SUBNET=73
NODE=$(command -v node)
STAMP=$(date -u +%Y-%m-%dT%H%MZ)
OUT=docs/bench-results/overlap-${WHAT}${RATE:+-$RATE}-$STAMP
mkdir -p "$OUT"
LAYERS=${LAYERS:-784,2048,2048,10}
BATCH=${BATCH:-64}
WARMUP=${WARMUP:-2}
BUCKET_MB=${BUCKET_MB:-}

launch=()
if [ "$WHAT" = cluster ]; then
  cleanup() { bash test/cluster/cluster.sh down --name "$NAME" >/dev/null 2>&1 || true; }
  trap cleanup EXIT
  bash test/cluster/cluster.sh up 2 --rate "$RATE" --name "$NAME" --subnet "$SUBNET" >"$OUT/cluster.env"
  # shellcheck disable=SC1091
  source "$OUT/cluster.env"
  IFS=, read -r -a addrs <<<"$HORA_CLUSTER_HOSTS"
  launch=("$NODE" dist/ts/cli/main.js run -H "${addrs[0]}:1,${addrs[1]}:1" --ssh-opts "-F $HORA_CLUSTER_SSH_CONFIG"
    --iface "$HORA_CLUSTER_BRIDGE_ADDR" --)
else
  # Rank r on core r, as bench/scaling.sh does: one core per rank, also for V8's own threads.
  launch=("$NODE" dist/ts/cli/main.js run -np 2 --bind-to core --)
fi

echo "# overlap benchmark: $WHAT${RATE:+ at $RATE}, MLP $LAYERS, batch $BATCH per rank, $ROUNDS rounds after $WARMUP," \
  "$(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"
"${launch[@]}" "$NODE" "$PWD/bench/overlap-worker.js" LAYERS="$LAYERS" BATCH="$BATCH" ROUNDS="$ROUNDS" WARMUP="$WARMUP" \
  BUCKET_MB="$BUCKET_MB" 2>"$OUT/job.err" | sed -E 's/^\[0[^]]*\] //' | grep '^{' >"$OUT/result.json" ||
  { echo "the job failed; see $OUT/job.err" >&2; exit 1; }
echo "# done $(date -u +%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
"$NODE" bench/overlap-report.js "$OUT/result.json" | tee -a "$OUT/summary.txt"
