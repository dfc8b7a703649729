#!/usr/bin/env bash
# What the simulated cluster's links cost the machine, without hora: the CPU a TCP stream takes, and how
# much it slows a training step that runs beside it. The overlap benchmark's communication runs during the
# backward pass; on this machine the simulated hosts share the CPUs, so the kernel's work for every byte on
# a link comes out of the compute. This separates that cost from hora's own.
#
#   bench/link-cost.sh RATE [WINDOWS=6] [BYTES=20049960]   (root; RATE in tc syntax, 110mbit)
#
# 1. CPU: both hosts send BYTES to each other at once (one step's gradients of the 5M-parameter MLP,
#    both ways, as a 2-rank allreduce moves them), three times; each process reports its user and
#    system time (bench/tcp_stream.c).
# 2. Steps: each host trains the MLP alone (bench/link-cost-steps.js) while, by turns, nothing and a
#    stream both ways run for 9 s windows; a step counts for the window it lies in whole. Printed: the
#    median step time of each, per host, and their ratio.
# Results go to docs/bench-results/link-cost-<rate>-<date>/.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:?link rate, tc syntax (110mbit)}
WINDOWS=${2:-6}
BYTES=${3:-20049960}
NAME=hlc
SUBNET=75
STAMP=$(date -u +%Y-%m-%dT%H%MZ)
OUT=docs/bench-results/link-cost-$RATE-$STAMP
WORK=$(mktemp -d /tmp/hora-link-cost.XXXXXX)
mkdir -p "$OUT"
cleanup() {
  pkill -f "$WORK/tcp_stream" 2>/dev/null || true
  bash test/cluster/cluster.sh down --name "$NAME" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -o "$WORK/tcp_stream" bench/tcp_stream.c
bash test/cluster/cluster.sh up 2 --rate "$RATE" --name "$NAME" --subnet "$SUBNET" >"$OUT/cluster.env"
# shellcheck disable=SC1091
source "$OUT/cluster.env"
IFS=, read -r -a addr <<<"$HORA_CLUSTER_HOSTS"
ns=("${NAME}0" "${NAME}1")
stream="$WORK/tcp_stream"

echo "# link cost at $RATE, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"
echo "## CPU of $BYTES bytes each way at once (user / system ms per process)" | tee -a "$OUT/summary.txt"
for round in 1 2 3; do
  ip netns exec "${ns[1]}" "$stream" serve 9100 >"$WORK/r1" & r1=$!
  ip netns exec "${ns[0]}" "$stream" serve 9101 >"$WORK/r0" & r0=$!
  sleep 0.3
  t0=$(date +%s%3N)
  ip netns exec "${ns[0]}" "$stream" send "${addr[1]}" 9100 "$BYTES" >"$WORK/s0" & s0=$!
  ip netns exec "${ns[1]}" "$stream" send "${addr[0]}" 9101 "$BYTES" >"$WORK/s1" & s1=$!
  wait "$s0" "$s1" "$r0" "$r1"
  t1=$(date +%s%3N)
  echo "round $round: $((t1 - t0)) ms; host 0: $(cat "$WORK/s0") | $(cat "$WORK/r0"); host 1: $(cat "$WORK/s1") | $(cat "$WORK/r1")" | tee -a "$OUT/summary.txt"
done

echo "## training steps alone, beside no stream and beside a stream both ways (9 s windows)" | tee -a "$OUT/summary.txt"
steps=$(( WINDOWS * 2 * 9 / 2 + 6 ))
for h in 0 1; do ip netns exec "${ns[$h]}" node bench/link-cost-steps.js "$steps" >"$OUT/steps$h.jsonl" 2>"$OUT/steps$h.err" & done
sleep 4
ip netns exec "${ns[1]}" sh -c "while :; do '$stream' serve 9100 >/dev/null; done" & l1=$!
ip netns exec "${ns[0]}" sh -c "while :; do '$stream' serve 9101 >/dev/null; done" & l0=$!
sleep 0.3
: >"$OUT/windows.txt"
for ((w = 0; w < WINDOWS; w++)); do
  echo "off $(date +%s%3N)" >>"$OUT/windows.txt"; sleep 9
  echo "on $(date +%s%3N)" >>"$OUT/windows.txt"
  ip netns exec "${ns[0]}" "$stream" send "${addr[1]}" 9100 1000000000000 >/dev/null & a=$!
  ip netns exec "${ns[1]}" "$stream" send "${addr[0]}" 9101 1000000000000 >/dev/null & b=$!
  sleep 9
  kill "$a" "$b" 2>/dev/null || true
  wait "$a" "$b" 2>/dev/null || true
done
echo "off $(date +%s%3N)" >>"$OUT/windows.txt"
kill "$l0" "$l1" 2>/dev/null || true
pkill -f "$stream serve" 2>/dev/null || true
pkill -f bench/link-cost-steps.js 2>/dev/null || true
node -e '
const fs = require("fs");
const dir = process.argv[1];
const win = fs.readFileSync(dir + "/windows.txt", "utf8").trim().split("\n").map((l) => l.split(" ")).map(([k, t]) => [k, Number(t)]);
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[(s.length - 1) >> 1] : NaN; };
const inside = (s, e) => { for (let i = 0; i + 1 < win.length; i++) if (win[i][1] <= s && e <= win[i + 1][1]) return win[i][0]; return null; };
for (const h of [0, 1]) {
  const by = { on: [], off: [] };
  for (const line of fs.readFileSync(`${dir}/steps${h}.jsonl`, "utf8").trim().split("\n")) {
    if (!line) continue;
    const { start, end } = JSON.parse(line);
    const k = inside(start, end);
    if (k) by[k].push(end - start);
  }
  console.log(`host ${h}: steps without a stream ${by.off.length}, median ${median(by.off)} ms; beside a stream ${by.on.length}, median ${median(by.on)} ms; ratio ${(median(by.on) / median(by.off)).toFixed(3)}`);
}' "$OUT" | tee -a "$OUT/summary.txt"
