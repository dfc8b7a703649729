#!/usr/bin/env bash
# bench/scaling.sh's communication factor for two checkouts in the same run (say, before and after a
# change), each built: the 2-rank tfjs MNIST step with and without the allreduce
# (HORA_TFJS_SKIP_ALLREDUCE=1), factor = step without / step with, the checkouts taking turns pair by pair
# (the first of a pair alternating), so that drift in the machine's speed hits both alike.
# Usage: bench/scaling-ab.sh CHECKOUT_A CHECKOUT_B [PAIRS=4] [EPOCHS=2] [BATCH=128] [MODEL=cnn]
# Prints one line per run and the medians. On a 2-core machine each pair takes about a minute; one tree's
# factor spreads over several hundredths from pair to pair, so a difference of 0.01 needs many pairs.
set -euo pipefail
A=$(cd "$1" && pwd)
B=$(cd "$2" && pwd)
PAIRS=${3:-4}
EPOCHS=${4:-2}
BATCH=${5:-128}
MODEL=${6:-cnn}

step() { # checkout, skip (0|1) -> the 2-rank run's step time in ms
  (cd "$1" && HORA_TFJS_SKIP_ALLREDUCE=$2 node dist/ts/cli/main.js run -np 2 --bind-to core node --max-semi-space-size=64 \
    examples/tfjs-mnist.js --model "$MODEL" --epochs "$EPOCHS" --batch "$BATCH" --scaling-steps 0 --json 2>/dev/null |
    sed -n 's/^\[0\] //p' | grep '^{' | tail -1 | grep -o '"stepMs":[0-9.]*' | cut -d: -f2)
}

echo "communication factor, 2 ranks, model $MODEL, $EPOCHS epochs, batch $BATCH, $PAIRS pairs, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "A = $A"
echo "B = $B"
out=$(mktemp)
for i in $(seq 1 "$PAIRS"); do
  order="A B"
  [ $((i % 2)) = 0 ] && order="B A"
  for side in $order; do
    dir=$A
    [ "$side" = B ] && dir=$B
    with=$(step "$dir" 0)
    without=$(step "$dir" 1)
    [ -n "$with" ] && [ -n "$without" ] || { echo "pair $i, $side: a run printed no JSON summary" >&2; exit 1; }
    echo "$side $with $without" >> "$out"
    echo "pair $i $side: step $with ms, without allreduce $without ms, factor $(awk -v a="$without" -v b="$with" 'BEGIN { printf "%.3f", a / b }')"
  done
done
awk '
  function median(v, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  { n[$1]++; f[$1, n[$1]] = $3 / $2 }
  END {
    for (s in n) { delete v; for (i = 1; i <= n[s]; i++) v[i] = f[s, i]; m[s] = median(v, n[s]) }
    printf "median factor: A %.3f, B %.3f, B - A %+.3f\n", m["A"], m["B"], m["B"] - m["A"]
  }' "$out"
rm -f "$out"
