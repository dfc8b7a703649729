'use strict';
// hora/tfjs on uneven data, without join: a data set whose size does not divide by the world size, split by
// shard(..., {remainder: 'keep'}) (1 and size-1 samples over), batch 4 per rank, shuffle false; every rank
// takes the same number of steps and the last global batch is uneven. DistributedOptimizer averages that
// batch over samples (model.fit and fitDataset tell it each batch's size; a custom loop calls
// setSampleCount), so training ends where one process training on the same global batches ends, within 1e-5:
// with overlap and without, with backwardPassesPerStep 2, and (rounded, so within 2e-3) with bf16
// compression. The count rides in the last bucket of gradients (no collective of its own), except with
// compression. test/workers/tfjs-uneven-worker.js trains and compares inside every rank.
const t = require('tap');
const path = require('node:path');
const { runJob, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'tfjs-uneven-worker.js');
const ALL = ['fit', 'fit-plain', 'fit-k2', 'fit-bf16', 'dataset', 'loop'];

const CASES = [
  // [ranks, samples, per-rank samples, batch per rank, variants]
  [2, 14, [7, 7], 4, ['fit', 'loop']],
  [2, 15, [8, 7], 4, ALL],
  [3, 22, [8, 7, 7], 4, ALL],
  [3, 23, [8, 8, 7], 4, ['fit', 'dataset', 'loop']],
  // Ranks with different numbers of batches (3 and 2; 3, 2 and 2; 3, 3 and 2): the ranks whose data ends
  // first join (model.fit and fitDataset by themselves, the loop by calling hora.join()) and serve the
  // others' last steps with zeros and a count of 0.
  [2, 9, [5, 4], 2, ['fit', 'fit-plain', 'dataset', 'loop']],
  [3, 13, [5, 4, 4], 2, ['fit', 'fit-plain', 'fit-bf16', 'dataset', 'loop']],
  [3, 14, [5, 5, 4], 2, ['fit', 'dataset', 'loop']],
];

for (const [np, n, parts, b, variants] of CASES) {
  t.test(`p=${np}, ${n} samples (${parts.join(' + ')}), batch ${b} per rank: ${variants.join(', ')} end where one process ends`, async (t) => {
    const job = await runJob(np, WORKER, { args: ['uneven', String(n), String(b), variants.join(',')], timeoutMs: 240000 });
    t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
    for (let rank = 0; rank < np; rank++) {
      const r = job.reports[rank] && job.reports[rank].result;
      if (!t.ok(r && r.variants, `rank ${rank} reported`, { output: tail(job), r })) continue;
      t.equal(r.samples, parts[rank], `rank ${rank}: shard kept ${parts[rank]} samples`);
      for (const v of variants) {
        const got = r.variants[v];
        const bound = v === 'fit-bf16' ? 2e-3 : 1e-5;
        t.ok(got.moved > 0.05, `rank ${rank}: ${v}: training moved the weights (${got.moved.toFixed(3)})`);
        t.ok(got.maxDiff <= bound, `rank ${rank}: ${v}: within ${bound} of one process (${got.maxDiff.toExponential(2)})`);
        const steps = Math.ceil(parts[rank] / (b * (v === 'fit-k2' ? 2 : 1))) * 3;
        t.equal(got.steps, steps, `rank ${rank}: ${v}: ${steps} steps of its own`);
        if (v === 'fit-bf16') {
          t.same([got.carried, got.separate], [0, got.steps], `rank ${rank}: ${v}: the count as a float32 collective of its own each step (bf16 would round it)`);
        } else {
          t.same([got.carried, got.separate], [got.steps, 0], `rank ${rank}: ${v}: the count rode in the last bucket each step, no collective of its own`);
        }
      }
    }
  });
}
