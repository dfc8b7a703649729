// What a wait()ed small allreduce costs on the JS side alone, under `hora run -np 2`:
//   node dist/ts/cli/main.js run -np 2 node bench/call-cost.js
// Times calls of `hora.allreduce(x, {inplace: true, op: 'sum'}).wait()` on a float32 array of 4 elements
// two ways, ROUNDS times each in turn:
//   full  the call as a program makes it (both ranks, one collective per call; ITERS / 10 calls);
//   js    the same call with the addon's collective() replaced by a JS function that reports plain success
//         (ITERS calls): the validation, the Work, the dispatcher's bookkeeping and the Stats counters,
//         without crossing into the addon.
// Rank 0 prints the median ns per call of each way (docs/benchmarks.md, "The cost of one wait()ed call";
// docs/notes/2026-11-27-fixed-cost-of-a-waited-call.md). Run it with the checkout's own build; it reaches
// into dist/ts/hora.js for the communicator.
'use strict';
const hora = require('..');
const internals = require('../dist/ts/hora.js');

async function main() {
  const iters = Number(process.env.ITERS || 1000000);
  const rounds = Number(process.env.ROUNDS || 5);
  await hora.init();
  const x = new Float32Array(4);
  for (let i = 0; i < 5000; i++) hora.allreduce(x, { inplace: true, op: 'sum' }).wait();
  const comm = internals.current('call-cost').dispatcher.comm;
  const plain = () => 1;
  const times = { full: [], js: [] };
  for (let r = 0; r < rounds; r++) {
    for (const mode of ['full', 'js']) {
      // Both ranks take the same turn: a full round needs the partner, a js round must not have one
      // waiting in a collective.
      await hora.barrier();
      const own = Object.getOwnPropertyDescriptor(comm, 'collective');
      if (mode === 'js') Object.defineProperty(comm, 'collective', { value: plain, configurable: true, writable: true });
      const n = mode === 'full' ? iters / 10 : iters;
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) hora.allreduce(x, { inplace: true, op: 'sum' }).wait();
      times[mode].push(Number(process.hrtime.bigint() - t0) / n);
      if (mode === 'js') {
        // The addon's collective() is the communicator's own property (bound to it), or else its class's.
        if (own) Object.defineProperty(comm, 'collective', own);
        else delete comm.collective;
      }
    }
  }
  const median = (a) => a.slice().sort((p, q) => p - q)[a.length >> 1];
  if (hora.rank() === 0) {
    console.log(JSON.stringify({ iters, rounds, full_ns: +median(times.full).toFixed(1), js_ns: +median(times.js).toFixed(1) }));
  }
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
