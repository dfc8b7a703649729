#!/usr/bin/env bash
# Builds the native unit tests (every native/test/*_test.cc: one executable each) into $1 (default
# /tmp/hora-native-tests).
# Run from the repository root. Every .cc under native/src is linked in; native/binding is Node-API glue
# and is left out, so the tests need neither node-gyp nor Node headers.
set -euo pipefail

if [ ! -d native/src ] || [ ! -d native/test ]; then
  echo "build.sh: run me from the repository root (no native/src here: $(pwd))" >&2
  exit 2
fi

out="${1:-/tmp/hora-native-tests}"
cxx="${CXX:-g++}"
mkdir -p "$out"

mapfile -t sources < <(find native/src -name '*.cc' | sort)
flags=(-std=c++17 -O2 -g -pthread -Wall -ffp-contract=off -Inative/src)

# The core is compiled once into objects shared by all tests; the links then run in parallel.
# Waits for every job in pids; if any failed, says what failed and exits.
wait_all() {
  local status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  if [ "$status" -ne 0 ]; then
    echo "build.sh: $1" >&2
    exit 1
  fi
}

objdir="$out/obj"
mkdir -p "$objdir"
objects=()
pids=()
for src in "${sources[@]}"; do
  obj="$objdir/$(echo "${src#native/src/}" | tr '/' '_' ).o"
  objects+=("$obj")
  "$cxx" "${flags[@]}" -c "$src" -o "$obj" &
  pids+=($!)
done
wait_all "compiling native/src failed"

mapfile -t tests < <(find native/test -maxdepth 1 -name '*_test.cc' -printf '%f\n' | sed 's/\.cc$//' | sort)
pids=()
built=()
for test in "${tests[@]}"; do
  "$cxx" "${flags[@]}" "native/test/$test.cc" "${objects[@]}" -lrt -o "$out/$test" &
  pids+=($!)
  built+=("$out/$test")
done
wait_all "building the tests failed"
echo "built ${built[*]}"
