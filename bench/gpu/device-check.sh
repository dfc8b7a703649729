#!/usr/bin/env bash
# The GPU issue's check in one run on a lent GPU machine, which has no Node.js: bench/gpu/pack.sh makes
#   .gpu/node.xz          this machine's node binary, xz-compressed
#   .gpu/modules.tar.xz   node_modules for the tests (tap, protobufjs, node-gyp-build and what they need)
#   .gpu/new/hora.node    the CUDA addon under test, .gpu/base/hora.node the build before it
# (see its header); carry .gpu and dist/ (the compiled TypeScript)
# and run `bash bench/gpu/device-check.sh [ROUNDS=2]` there. Correctness first (test/cuda.test.js on the new
# addon), then bench/gpu/latency.js for both builds, alternating, on 2 and 4 ranks of the IPC path and 2
# of the staged path, then the slots algorithm (HORA_IPC_SLOTS=1) on 2 ranks. Output under $OUT (or ./out):
# handover.txt, cuda-test.tap, latency.jsonl, log; the summary table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT" /tmp/hora-node
rounds="${1:-2}"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/log"; }

if ! command -v node >/dev/null; then
  if command -v xz >/dev/null; then xz -dc .gpu/node.xz > /tmp/hora-node/node
  else python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(".gpu/node.xz").read())' > /tmp/hora-node/node; fi
  chmod +x /tmp/hora-node/node
  export PATH="/tmp/hora-node:$PATH"
fi
[ -d node_modules/tap ] || tar -xJf .gpu/modules.tar.xz
log "node $(node -v); $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1); $(nproc) cores"
export HORA_NCCL=0
HORA="node dist/ts/cli/main.js"

log "two processes handing work to each other on the GPU (bench/gpu/handover.cu)"
(.gpu/handover 2000 || { command -v nvcc >/dev/null && nvcc -O2 -arch=sm_90 -o /tmp/handover bench/gpu/handover.cu && /tmp/handover 2000; }) 2>&1 | tee "$OUT/handover.txt"

log "test/cuda.test.js on the new build"
HORA_ADDON=$PWD/.gpu/new/hora.node TAP_TIMEOUT=600 timeout 300 node test/cuda.test.js > "$OUT/cuda-test.tap" 2>&1
log "cuda.test exit $?: $(grep -c '^ *ok ' "$OUT/cuda-test.tap") ok, $(grep -c '^ *not ok ' "$OUT/cuda-test.tap") not ok"
grep -E '^ *not ok|^# (fail|pass)|sameAddress|reallocations' "$OUT/cuda-test.tap" | head -20

# BASE_TREE: a checkout of the build before with its own dist/ (needed when the addon's calls changed
# between the builds); the base build's jobs run there. Default: this tree for both.
job() {  # job LABEL BUILD NP [env ...] -- latency args
  local label=$1 build=$2 np=$3; shift 3
  local envs=() tree="$PWD"
  [ "$build" = base ] && [ -n "${BASE_TREE:-}" ] && tree="$BASE_TREE"
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  (cd "$tree" && env HORA_ADDON="$OLDPWD/.gpu/$build/hora.node" "${envs[@]}" timeout 150 $HORA run -np "$np" node bench/gpu/latency.js --label "$label" "$@") \
    >> "$OUT/latency.jsonl" 2>> "$OUT/log" || log "job $label np=$np failed: $?"
}
for round in $(seq 1 "$rounds"); do
  order="base new"; [ $((round % 2)) -eq 0 ] && order="new base"
  for np in 2 4; do
    for b in $order; do log "round $round np=$np $b ipc"; job "$b" "$b" "$np" --; done
  done
  for b in $order; do log "round $round np=2 $b staged"; job "$b" "$b" 2 HORA_TRANSPORT=tcp -- --sizes 4K,64K,256K,1M,4M; done
done
log "the slots algorithm on one GPU, new build, np=2"
job "new-slots" new 2 HORA_IPC_SLOTS=1 -- --sizes 4K,1M,16M,256M --no-host --modes wait
node bench/gpu/summarize.js "$OUT/latency.jsonl" | tee "$OUT/summary.txt"
