'use strict';
// One allreduce of each of a few dtypes, with a length that leaves a tail past any 16-byte pack, and the
// .node files this process loaded (test/cuda-build.test.js runs it with HORA_ADDON set to a given build).
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

const COUNT = 1001;

(async () => {
  await hora.init();
  const rank = hora.rank();
  const sum = await hora.allreduce(new Float32Array(COUNT).map((_, i) => (rank + 1) * i), { op: 'sum' });
  const avg = await hora.allreduce(new Float64Array(COUNT).fill(rank + 1), { op: 'avg' });
  const max = await hora.allreduce(new Int32Array(COUNT).fill(rank - 7), { op: 'max' });
  const addons = Object.keys(require.cache).filter((file) => file.endsWith('.node'));
  report(rank, { size: hora.size(), sum: Array.from(sum), avg: Array.from(avg), max: Array.from(max), addons });
  await hora.shutdown();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
