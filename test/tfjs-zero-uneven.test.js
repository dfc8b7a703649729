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
const { ALL, checkVariants } = require('./support/uneven-checks');

const WORKER = path.join(__dirname, 'workers', 'tfjs-zero3-uneven-worker.js');

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
    for (const [rank, r] of results.entries()) {
      if (!t.ok(r && r.variants, `rank ${rank} reported`, { r })) continue;
      t.equal(r.samples, parts[rank], `rank ${rank}: shard kept ${parts[rank]} samples`);
      checkVariants(t, results, rank, r, variants, batches);
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
