'use strict';
// DistributedOptimizer and the order of the gradients it is given (issue 37 item 1): ranks that hand over the
// same variables in another order (a map's key order, an array, a varList) get the right average, with fusion
// on and off and over TCP; ranks with different variables, or with a variable of another shape (issue 38
// item 2), get ERR_MISMATCH on every rank naming the variable (and both shapes), and nothing is applied.
// test/workers/tfjs-order-worker.js trains; this file asserts.
const t = require('tap');
const path = require('node:path');
const { runScenario } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'tfjs-order-worker.js');
const SETTINGS = { 'fusion on': {}, 'fusion off': { HORA_FUSION_MB: '0' }, tcp: { HORA_TRANSPORT: 'tcp' } };

for (const [setting, env] of Object.entries(SETTINGS)) {
  for (const np of setting === 'fusion on' ? [2, 3] : [2]) {
    t.test(`${np} ranks, ${setting}: the same variables in another order on odd ranks are averaged right`, async (t) => {
      const { results } = await runScenario(t, np, WORKER, 'order', env);
      const mean = (f) => Array.from({ length: np }, (_, r) => f(r)).reduce((a, b) => a + b) / np;
      for (const [rank, result] of results.entries()) {
        if (!result) continue;
        for (const [variant, got] of Object.entries(result)) {
          const steps = variant.startsWith('minimize') ? 2 : 1;
          const lengths = variant.split('lengths ')[1].split(',').map(Number);
          const want = {
            w1: new Array(lengths[0]).fill(-steps * mean((r) => 1 + r)),
            w2: new Array(lengths[1]).fill(-steps * mean((r) => 100 * (1 + r))),
          };
          t.same(got, want, `rank ${rank}, ${variant}`);
        }
      }
    });
  }
}

for (const [setting, env] of Object.entries(SETTINGS)) {
  t.test(`${setting}: a variable only one rank has is ERR_MISMATCH on every rank naming it, nothing applied`, async (t) => {
    const { results } = await runScenario(t, 2, WORKER, 'different', env);
    for (const [rank, result] of results.entries()) {
      if (!result) continue;
      for (const [variant, got] of Object.entries(result)) {
        t.equal(got.error && got.error.code, 'ERR_MISMATCH', `rank ${rank}, ${variant}: ERR_MISMATCH`, { got });
        t.match(got.error && got.error.message, /rank 0 has no gradient for d(true|false)\/c; rank 1 has no gradient for d(true|false)\/b/, `rank ${rank}, ${variant}: names the variables`);
        t.ok(got.unchanged, `rank ${rank}, ${variant}: nothing applied`);
      }
    }
  });

  t.test(`${setting}: a Dense layer of 8 units on rank 0 and 9 on rank 1 is named with both shapes first`, async (t) => {
    const { results } = await runScenario(t, 2, WORKER, 'shape', env);
    for (const [rank, result] of results.entries()) {
      if (!result) continue;
      for (const [variant, got] of Object.entries(result)) {
        const message = got.error ? got.error.message : '';
        t.equal(got.error && got.error.code, 'ERR_MISMATCH', `rank ${rank}, ${variant}: ERR_MISMATCH`, { got });
        const shapes = variant.startsWith('transposed')
          ? /^DistributedOptimizer: the ranks' variables differ in shape: 'transposed_(true|false)' is \[2,3\] \(6 values\) on rank 0 and \[3,2\] \(6 values\) on rank 1/
          : /^DistributedOptimizer: the ranks' variables differ in shape: 'shape_(true|false)\/(kernel|bias)' is \[(4,8|8)\] \((32|8) values\) on rank 0 and \[(4,9|9)\] \((36|9) values\) on rank 1/;
        t.match(message, shapes, `rank ${rank}, ${variant}: the message begins with the variable and both shapes`);
        t.notMatch(message, /packed differently/, `rank ${rank}, ${variant}: not described as a packing problem`);
        t.ok(got.unchanged, `rank ${rank}, ${variant}: nothing applied`);
      }
    }
  });
}
