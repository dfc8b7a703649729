'use strict';
// DistributedOptimizer with shard: 'optimizer' and 'gradients' (ZeRO stages 1 and 2) on uneven data, as stage 3
// in test/tfjs-zero3-uneven.test.js (whose worker trains here too, env SHARD): a data set that does not divide by
// the world size, split by shard(..., {remainder: 'keep'}), so the ranks take different numbers of steps. A rank
// whose data has ended serves the other ranks' steps with shadow steps (a gradient and a sample count of 0, its
// block of the state updated and allgathered), and an uneven step averages over samples: the final weights are
// those of the unsharded DistributedOptimizer on the same data (within 1e-6 relative with SGD, 1e-5 with Adam),
// bit-identical on every rank: model.fit, fitDataset, and a minimize loop that calls joinEpoch, with and without
// setSampleCount.
const t = require('tap');
const path = require('node:path');
const { runScenario } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'tfjs-zero3-uneven-worker.js');
const TOLERANCE = { 'fit-sgd': 1e-6, 'fit-adam': 1e-5, 'fit-k2': 1e-6, dataset: 1e-6, loop: 1e-6, 'loop-nocount': 1e-6 };
const ALL = ['fit-sgd', 'fit-adam', 'dataset', 'loop', 'loop-nocount'];

const CASES = [
  // [shard, ranks, samples, per-rank samples, batch per rank, batches per rank, variants]
  ['optimizer', 2, 9, [5, 4], 2, [3, 2], ALL],
  ['gradients', 2, 9, [5, 4], 2, [3, 2], ALL],
  ['optimizer', 3, 13, [5, 4, 4], 2, [3, 2, 2], ALL],
  ['gradients', 3, 13, [5, 4, 4], 2, [3, 2, 2], ALL],
  // Every rank takes as many batches, the last global batch uneven; backwardPassesPerStep 2.
  ['gradients', 3, 10, [4, 3, 3], 2, [2, 2, 2], ['fit-k2']],
];

for (const [shardMode, np, n, parts, b, batches, variants] of CASES) {
  t.test(`shard: '${shardMode}', ${np} ranks, ${n} samples (${parts.join(' + ')}), batch ${b}: ends where the unsharded optimizer ends`, async (t) => {
    const { results } = await runScenario(t, np, WORKER, 'uneven', { N: String(n), B: String(b), VARIANTS: variants.join(','), SHARD: shardMode });
    const most = Math.max(...batches) * 2; // 2 epochs, in passes
    for (const [rank, r] of results.entries()) {
      if (!t.ok(r && r.variants, `rank ${rank} reported`, { r })) continue;
      t.equal(r.samples, parts[rank], `rank ${rank}: shard kept ${parts[rank]} samples`);
      for (const v of variants) {
        const got = r.variants[v];
        t.ok(got.moved > 0.05, `rank ${rank}, ${v}: training moved the weights (${got.moved.toFixed(3)})`);
        t.ok(got.relative.every((d) => d <= TOLERANCE[v]), `rank ${rank}, ${v}: every weight within ${TOLERANCE[v]} relative of the unsharded run`, { relative: got.relative });
        t.equal(got.hash, results[0] && results[0].variants[v].hash, `rank ${rank}, ${v}: weights bit-identical to rank 0's`);
        const k = v === 'fit-k2' ? 2 : 1;
        t.equal(got.steps.sharded, most / k, `rank ${rank}, ${v}: took every step (${batches[rank] * 2 / k} of its own data, the rest shadow steps)`);
        if (v.startsWith('loop')) {
          const last = batches.lastIndexOf(Math.max(...batches));
          t.same(got.joined, [last, last], `rank ${rank}, ${v}: joinEpoch resolved to rank ${last}, the last with data, each epoch`);
        }
      }
    }
  });
}

t.test("shard: 'gradients': counts given by some ranks and not others are ERR_MISMATCH on every rank; joinEpoch before a begun pass is refused", async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'misuse', { SHARD: 'gradients' });
  for (const [rank, r] of results.entries()) {
    if (!t.ok(r && r.mixed, `rank ${rank} reported`, { r })) continue;
    t.equal(r.mixed.code, 'ERR_MISMATCH', `rank ${rank}: a pass with a count on rank 0 only is refused`, { got: r.mixed });
    t.match(r.mixed.message, /shard: 'gradients'\): rank 1 began a pass without a sample count where other ranks gave one/, `rank ${rank}: naming rank 1`);
    t.equal(r.early.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: joinEpoch after setSampleCount, before the pass, is refused`, { got: r.early });
    t.match(r.early.message, /joinEpoch \(shard: 'gradients'\): a pass was begun/, `rank ${rank}: saying why`);
    t.equal(r.steps, 1, `rank ${rank}: the begun pass then ran, and nothing else did`);
    t.equal(r.joined, 1, `rank ${rank}: joinEpoch resolves to rank 1, the highest of the ranks that stepped last`);
  }
});
