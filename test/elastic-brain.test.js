'use strict';
// hora/brain ElasticState under hora run (2 and 3 ranks, without failures): distributed training rolled
// back to a commit and resumed ends bit-identical to training straight through; sync gives every rank the
// root's net, Adam state included; bad arguments.
const t = require('tap');
const path = require('node:path');
const { runScenario } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'elastic-brain-worker.js');

for (const [np, praxis, mod] of [[3, 'momentum', 'brain.js'], [2, 'adam', 'brain.js'], [2, 'adam', 'brain.js-2']]) {
  t.test(`${mod}, ${praxis}, ${np} ranks: a pass lost after a commit, restored and redone, ends as training straight through`, async (t) => {
    const env = { BRAIN_MODULE: mod, BRAIN_PRAXIS: praxis === 'adam' ? 'adam' : '' };
    const { results } = await runScenario(t, np, WORKER, 'rollback', env);
    for (const [r, res] of results.entries()) {
      t.not(res.lost.arrays[0], res.committed.arrays[0], `rank ${r}: the lost pass changed the weights`);
      t.same(res.restored, res.committed, `rank ${r}: restore gives back the committed weights, momentum${praxis === 'adam' ? ', moments and step count' : ''}`);
      t.equal(res.iterationsAfterRestore, 2, 'the pass count is restored');
      t.equal(res.passes, 5, 'one pass was redone');
      t.same(res.resumed, res.straight, `rank ${r}: bit-identical to 4 passes straight`);
      if (praxis === 'adam') t.equal(res.resumed.iterations, 20, "Adam's step count counts each of the 20 steps once");
      t.same(res.resumed, results[0].resumed, `rank ${r} equals rank 0`);
    }
  });
}

t.test('sync gives every rank root\'s net and Adam state, also ranks without Adam state', async (t) => {
  const { results } = await runScenario(t, 3, WORKER, 'sync');
  t.ok(results[0].before.arrays.length < results[1].before.arrays.length, 'rank 0 starts without Adam state, root with it');
  for (const [r, res] of results.entries()) {
    t.same(res.after, results[1].before, `rank ${r} holds root's arrays and Adam step count`);
    t.equal(res.iterations, 3, "root's pass count");
    t.same(res.restored, res.after, `rank ${r}: the synced net is the rollback point`);
    t.same(res.trained, results[0].trained, `rank ${r}: a distributed pass after sync keeps the ranks equal`);
  }
});

t.test('bad arguments: ERR_INVALID_ARGUMENT naming the argument', async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'badArguments');
  const res = results[0];
  for (const [name, re] of Object.entries({
    uninitialized: /argument 'net' must be an initialized brain.js NeuralNetwork .*received a net without weights/,
    notNet: /argument 'net' must be an initialized brain.js NeuralNetwork .*received number 7/,
    iterations: /'fields.iterations' must be an integer >= 0; received number -1/,
    reserved: /field 'net' has the name of an ElasticState property/,
  })) {
    t.equal(res[name].code, 'ERR_INVALID_ARGUMENT', name);
    t.match(res[name].message, re, name);
  }
});
