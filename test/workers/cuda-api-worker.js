'use strict';
// hora.cuda's argument checks as collectives see them, on every rank (test/cuda-api.test.js asserts).
// Usage: node cuda-api-worker.js, under `hora run -np N` or alone (a world of one). Needs no GPU: every
// bad input here is refused before any device is touched. Each case is a call on one rank (or on every
// rank) that must fail ERR_INVALID_ARGUMENT everywhere, followed by a valid allreduce that must work.
const hora = require('../../dist/ts/index.js');
const { report, outcome } = require('../support/worker-util');

/** An object that passes instanceof DeviceBuffer but was never made by alloc, fromHost or wrap. */
function lookalike() {
  return Object.create(hora.cuda.DeviceBuffer.prototype);
}

/** A plain object shaped like a freed DeviceBuffer. */
function freedLooking() {
  return { dtype: 'float32', count: 4, device: 0, pointer: 0n, freed: true, owned: true, stream: 0n, byteLength: 16 };
}

async function main() {
  await hora.init();
  const r = hora.rank();
  const p = hora.size();
  const good = () => hora.allreduce(new Float32Array(4).fill(1), { op: 'sum' });
  // [name, bad call, expected text in the bad rank's message]
  const bad = [
    ['allreduce of a DeviceBuffer look-alike', () => hora.allreduce(lookalike(), { op: 'sum' }), 'made by DeviceBuffer.alloc, fromHost or wrap'],
    ['allreduce of {}', () => hora.allreduce({}, { op: 'sum' }), 'hora.cuda.DeviceBuffer'],
    ['allreduce of a freed-looking object', () => hora.allreduce(freedLooking(), { op: 'sum' }), 'hora.cuda.DeviceBuffer'],
    ['broadcast of a DeviceBuffer look-alike', () => hora.broadcast(lookalike()), 'made by DeviceBuffer.alloc, fromHost or wrap'],
    ['allgather of a DeviceBuffer look-alike', () => hora.allgather(lookalike()), 'made by DeviceBuffer.alloc, fromHost or wrap'],
    ['reduceScatter of a DeviceBuffer look-alike', () => hora.reduceScatter(lookalike()), 'made by DeviceBuffer.alloc, fromHost or wrap'],
    ['reduceScatter of {}', () => hora.reduceScatter({}), 'hora.cuda.DeviceBuffer'],
  ];
  const results = [];
  for (let k = 0; k < bad.length; k++) {
    const [name, call, expected] = bad[k];
    for (const who of ['one', 'every']) {
      const badRank = who === 'every' ? -1 : k % p;
      const isBad = who === 'every' || badRank === r;
      const got = await outcome(isBad ? call : good);
      const after = await outcome(good);
      results.push({ name: `${name} (${who === 'every' ? 'every rank' : `rank ${badRank}`})`, badRank, isBad, expected, got, after });
    }
  }
  report(r, { size: p, results });
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
