// Where a loop of wait()ed small allreduces spends its time beyond the typical call, under `hora run -np 2`:
//   node dist/ts/cli/main.js run -np 2 node bench/call-stalls.js [BYTES=4]
// Rank 0 prints one JSON line:
//   bytesPerCall  what one call leaves on V8's young generation (new-space growth over 1000 calls, median of
//                 20 such runs without a collection in between; the options object is made once);
//   meanNs, medianNs over CALLS calls (default 200000), each timed from the end of the one before;
//   stalls        calls longer than 5 µs, by length: count and milliseconds in all, and their share of the
//                 loop. A benchmark that times the whole loop (bench/compare.js, as nccl-tests and the peers'
//                 programs do) sees the mean, stalls included; a young-generation collection on either rank
//                 stalls both.
// bench/mpi_call_stalls.c times Open MPI's MPI_Allreduce the same way (docs/notes/2026-11-27-less-per-call.md).
'use strict';
const v8 = require('v8');
const hora = require('..');

const newSpaceUsed = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_used_size;

async function main() {
  const bytes = Number(process.argv[2] || 4);
  const calls = Number(process.env.CALLS || 200000);
  await hora.init();
  const x = new Float32Array(Math.max(1, bytes / 4));
  const options = { inplace: true, op: 'sum' };
  for (let i = 0; i < 20000; i++) hora.allreduce(x, options).wait();

  const grown = [];
  for (let k = 0; k < 20; k++) {
    const before = newSpaceUsed();
    for (let i = 0; i < 1000; i++) hora.allreduce(x, options).wait();
    const after = newSpaceUsed();
    if (after > before) grown.push((after - before) / 1000);  // else a collection came in between
  }
  grown.sort((a, b) => a - b);

  const t = new Float64Array(calls);
  const start = process.hrtime.bigint();
  let last = start;
  for (let i = 0; i < calls; i++) {
    hora.allreduce(x, options).wait();
    const now = process.hrtime.bigint();
    t[i] = Number(now - last);
    last = now;
  }
  const total = Number(last - start);
  const limits = [10e3, 20e3, 50e3, 100e3, 200e3, 500e3, 1e6, Infinity];
  const stalls = limits.map((ns) => ({ upToUs: ns === Infinity ? null : ns / 1e3, count: 0, ms: 0 }));
  let stalled = 0;
  for (let i = 0; i < calls; i++) {
    if (t[i] <= 5e3) continue;
    const s = stalls[limits.findIndex((ns) => t[i] <= ns)];
    s.count++;
    s.ms += t[i] / 1e6;
    stalled += t[i];
  }
  t.sort();
  if (hora.rank() === 0) {
    console.log(JSON.stringify({
      bytes, calls, bytesPerCall: grown.length ? +grown[grown.length >> 1].toFixed(1) : null,
      meanNs: Math.round(total / calls), medianNs: t[calls >> 1], stalledShare: +(stalled / total).toFixed(3),
      stalls: stalls.filter((s) => s.count > 0).map((s) => ({ ...s, ms: +s.ms.toFixed(2) })),
    }));
  }
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
