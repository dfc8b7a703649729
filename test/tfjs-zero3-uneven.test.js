'use strict';
// DistributedOptimizer with shard: 'weights' (ZeRO stage 3) on uneven data (issue 40's join with issue 41's
// stage 3): a data set that does not divide by the world size, split by shard(..., {remainder: 'keep'}), so the
// last global batch is uneven and the ranks may take different numbers of steps. A rank whose data has ended
// serves the other ranks' passes with shadow passes (its blocks gathered and updated, a gradient of 0), and an
// uneven pass averages over samples: the final weights are those of the unsharded DistributedOptimizer on the
// same data (within 1e-6 relative with SGD, 1e-5 with Adam), bit-identical on every rank: model.fit,
// fitDataset, and a minimize loop that calls joinEpoch, with and without setSampleCount.
// test/workers/tfjs-zero3-uneven-worker.js trains; this file asserts.
const t = require('tap');
const path = require('node:path');
const { runScenario } = require('./support/hora-job');
const { ALL, checkVariants } = require('./support/uneven-checks');

const WORKER = path.join(__dirname, 'workers', 'tfjs-zero3-uneven-worker.js');

const CASES = [
  // [ranks, samples, per-rank samples, batch per rank, batches per rank, variants]
  [2, 9, [5, 4], 2, [3, 2], ALL],
  [3, 13, [5, 4, 4], 2, [3, 2, 2], ALL],
  // Every rank takes the same number of batches; the last global batch holds 2 + 1 (+ 1) samples. With
  // backwardPassesPerStep 2 (the unsharded optimizer's join does not handle a join inside a step) a step is
  // both batches, of 6 and 4 samples at 3 ranks.
  [2, 7, [4, 3], 2, [2, 2], ['fit-sgd', 'fit-k2']],
  [3, 10, [4, 3, 3], 2, [2, 2, 2], ['fit-sgd', 'fit-k2', 'loop']],
];

for (const [np, n, parts, b, batches, variants] of CASES) {
  t.test(`${np} ranks, ${n} samples (${parts.join(' + ')}), batch ${b}: shard: 'weights' ends where the unsharded optimizer ends`, async (t) => {
    const { results } = await runScenario(t, np, WORKER, 'uneven', { N: String(n), B: String(b), VARIANTS: variants.join(',') });
    for (const [rank, r] of results.entries()) {
      if (!t.ok(r && r.variants, `rank ${rank} reported`, { r })) continue;
      t.equal(r.samples, parts[rank], `rank ${rank}: shard kept ${parts[rank]} samples`);
      checkVariants(t, results, rank, r, variants, batches);
      t.equal(r.noOptimizer && r.noOptimizer.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: joinEpoch of a sharded model without its optimizer is refused`, { got: r.noOptimizer });
      t.match(r.noOptimizer && r.noOptimizer.message, /joinEpoch: argument 'optimizer' must be the DistributedOptimizer that shards the model's weights .*received undefined/,
        `rank ${rank}: naming the argument`);
    }
  });
}

t.test("counts given by some ranks and not others are ERR_MISMATCH on every rank; joinEpoch before a begun pass is refused", async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'misuse');
  for (const [rank, r] of results.entries()) {
    if (!t.ok(r && r.mixed, `rank ${rank} reported`, { r })) continue;
    t.equal(r.mixed.code, 'ERR_MISMATCH', `rank ${rank}: a pass with a count on rank 0 only is refused`, { got: r.mixed });
    t.match(r.mixed.message, /rank 1 began a pass without a sample count where other ranks gave one/, `rank ${rank}: naming rank 1`);
    t.equal(r.early.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: joinEpoch after setSampleCount, before the pass, is refused`, { got: r.early });
    t.match(r.early.message, /joinEpoch \(shard: 'weights'\): a pass was begun/, `rank ${rank}: saying why`);
    t.equal(r.steps, 1, `rank ${rank}: the begun pass then ran, and nothing else did`);
    t.equal(r.joined, 1, `rank ${rank}: joinEpoch resolves to rank 1, the highest of the ranks that stepped last`);
  }
});
