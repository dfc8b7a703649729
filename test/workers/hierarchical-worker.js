'use strict';
// One allreduce with whatever HORA_ALGO says (of HIERARCHICAL_BYTES, default 4 KiB of float32), then an
// allgather to show the communicator still works; reports the allreduce's error code, if any.
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

(async () => {
  await hora.init();
  const rank = hora.rank();
  const n = Number(process.env.HIERARCHICAL_BYTES ?? 4096) / 4;
  let code = null, message = null;
  try {
    await hora.allreduce(new Float32Array(n).fill(1), { op: 'sum' });
  } catch (e) {
    code = e.code;
    message = e.message;
  }
  const after = await hora.allgather(new Float64Array([rank + 1])).catch((e) => e.code);
  report(rank, { code, message, after: typeof after === 'string' ? after : after.reduce((a, b) => a + b, 0) });
  await hora.shutdown();
})().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
