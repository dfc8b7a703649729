'use strict';
// Names every object inherits ('toString', 'constructor', '__proto__', ...) are no op, dtype or algorithm:
// each is refused like any other unknown value, naming the argument. The tables behind those checks are
// plain objects, and `op: 'toString'` used to pass the check and reduce as a sum.
const t = require('tap');
const hora = require('../dist/ts/index.js');

const NAMES = ['toString', 'constructor', '__proto__', 'hasOwnProperty', 'valueOf'];
const invalid = (argument) => ({ code: 'ERR_INVALID_ARGUMENT', message: new RegExp(`argument '${argument.replace('.', '\\.')}'`) });

t.test('init refuses an inherited name as the algorithm', async (t) => {
  for (const name of NAMES) {
    await t.rejects(hora.init({ algorithm: name }), { code: 'ERR_INVALID_ARGUMENT', message: /option 'algorithm' must be one of/ }, `algorithm '${name}'`);
  }
});

t.test('collectives and recv refuse an inherited name as op or dtype', async (t) => {
  await hora.init();
  t.teardown(() => hora.shutdown());
  for (const name of NAMES) {
    await t.rejects(async () => hora.allreduce(new Float32Array([1, 2]), { op: name }), invalid('options.op'), `allreduce op '${name}'`);
    await t.rejects(async () => hora.reduceScatter(new Float32Array([1, 2]), { op: name }), invalid('options.op'), `reduceScatter op '${name}'`);
    await t.rejects(async () => hora.recv({ from: 0, dtype: name, count: 1 }), invalid('options.dtype'), `recv dtype '${name}'`);
  }
  const x = new Float32Array([1, 2]);
  t.same(Array.from(await hora.allreduce(x, { op: 'sum' })), [1, 2], 'a known op still works after them');
});
