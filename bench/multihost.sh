#!/usr/bin/env bash
# Allreduce across simulated hosts (network namespaces with rate-shaped links, test/cluster/cluster.sh):
# hora's flat ring, hierarchical and automatic choice, and Open MPI's MPI_Allreduce (btl tcp) over the same
# links, run one after another in each round (alternating, so drift in the machine's speed hits all alike).
#
#   bench/multihost.sh HOSTS RANKS_PER_HOST [ROUNDS=3] [RATE=1gbit] [MAX=64M]
#
# Open MPI is told to yield when idle: these hosts share two cores, and a busy-polling rank would take a
# core from another host's rank.
#
# Writes every table to docs/bench-results/multihost-<HOSTS>x<RANKS>-<date>/ and prints, per size, the
# median over rounds of each busbw and of the ratio hierarchical time / ring time, and the cost model's
# prediction beside the measurement. Needs root (namespaces), openssh-server, and for the Open MPI rows
# openmpi-bin and libopenmpi-dev. Run `npm run build:ts` first.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${1:?number of hosts}
RANKS=${2:?ranks per host}
ROUNDS=${3:-3}
RATE=${4:-1gbit}
MAX=${5:-64M}
NAME=hmb
SUBNET=61
NODE=$(command -v node)
STAMP=$(date -u +%Y-%m-%dT%H%MZ)
OUT=docs/bench-results/multihost-${HOSTS}x${RANKS}-$STAMP
mkdir -p "$OUT"

cleanup() { bash test/cluster/cluster.sh down --name "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT
bash test/cluster/cluster.sh up "$HOSTS" --rate "$RATE" --name "$NAME" --subnet "$SUBNET" >"$OUT/cluster.env"
# shellcheck disable=SC1091
source "$OUT/cluster.env"
IFS=, read -r -a addrs <<<"$HORA_CLUSTER_HOSTS"
spec=""
for a in "${addrs[@]}"; do spec+="${spec:+,}$a:$RANKS"; done
np=$((HOSTS * RANKS))

hora_bench() { # algo -> table on stdout
  "$NODE" dist/ts/cli/main.js run -H "$spec" --ssh-opts "-F $HORA_CLUSTER_SSH_CONFIG" --iface "$HORA_CLUSTER_BRIDGE_ADDR" -- \
    "$NODE" "$PWD/dist/ts/cli/main.js" bench --min 4K --max "$MAX" --factor 4 --algo "$1" 2>&1 | sed -E 's/^\[0@[^]]*\] //' | grep -E '^( |#)'
}

mpi_bench() {
  local bin=/tmp/hora-peer-mpi-allreduce
  [ "$bin" -nt ../shared/peers/mpi_allreduce_bench.c ] || mpicc -O2 -o "$bin" ../shared/peers/mpi_allreduce_bench.c
  local max
  max=$("$NODE" -e 'const m=/^(\d+)([KMG]?)$/i.exec(process.argv[1]); console.log(Number(m[1]) * ({"":1,k:1024,m:1048576,g:1073741824})[m[2].toLowerCase()])' "$MAX")
  mpirun --allow-run-as-root -np "$np" -H "$spec" \
    --mca plm_rsh_agent "ssh -F $HORA_CLUSTER_SSH_CONFIG" \
    --mca btl tcp,self --mca mpi_yield_when_idle 1 --mca btl_tcp_if_include "$HORA_CLUSTER_SUBNET" --mca oob_tcp_if_include "$HORA_CLUSTER_SUBNET" \
    "$bin" "$max" 2>&1 | grep -E '^ +[0-9]|bytes'
}

have_mpi=1
command -v mpicc >/dev/null && command -v mpirun >/dev/null || have_mpi=0
echo "# $HOSTS hosts x $RANKS ranks, links $RATE, $ROUNDS rounds, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"
algos=(ring auto)
[ "$RANKS" -gt 1 ] && algos=(ring hierarchical auto)
for i in $(seq 1 "$ROUNDS"); do
  for algo in "${algos[@]}"; do hora_bench "$algo" >"$OUT/hora-$algo-$i.txt"; done
  [ "$have_mpi" = 1 ] && mpi_bench >"$OUT/mpi-$i.txt"
  echo "round $i done" >&2
done
node bench/multihost-report.js "$OUT" "$RATE" | tee -a "$OUT/summary.txt"
