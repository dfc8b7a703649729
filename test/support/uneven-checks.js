'use strict';
// The checks a sharded DistributedOptimizer's uneven-data run shares across its stages
// (test/tfjs-zero-uneven.test.js for stages 1 and 2, test/tfjs-zero3-uneven.test.js for stage 3; both run
// test/workers/tfjs-zero3-uneven-worker.js): each variant moved the weights, ended within its tolerance of the
// unsharded run, bit-identical to rank 0's, took every step, and joinEpoch resolved to the last rank with data.

const TOLERANCE = { 'fit-sgd': 1e-6, 'fit-adam': 1e-5, 'fit-k2': 1e-6, dataset: 1e-6, loop: 1e-6, 'loop-nocount': 1e-6 };
const ALL = ['fit-sgd', 'fit-adam', 'dataset', 'loop', 'loop-nocount'];

/** Checks one rank's report r (rank `rank` of `results`) for `variants`; batches: each rank's batches per epoch. */
function checkVariants(t, results, rank, r, variants, batches) {
  const most = Math.max(...batches) * 2; // 2 epochs, in passes
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

module.exports = { ALL, checkVariants };
