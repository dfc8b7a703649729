'use strict';
// Allreduces 4 MiB over and over until one fails; reports the error and when it was raised (epoch ms),
// so the test can compare that with the moment it took a host's link down. Writes
// $HORA_TEST_RESULT_DIR/started-<rank> after its first allreduce.
const fs = require('node:fs');
const path = require('node:path');
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

(async () => {
  await hora.init();
  const rank = hora.rank();
  const x = new Float32Array(1 << 20).fill(1);
  let rounds = 0;
  const until = Date.now() + 120000;
  try {
    while (Date.now() < until) {
      await hora.allreduce(x, { op: 'avg', inplace: true });
      if (rounds++ === 0) fs.writeFileSync(path.join(process.env.HORA_TEST_RESULT_DIR, `started-${rank}`), '');
    }
    report(rank, { code: null, rounds, at: Date.now() });
  } catch (e) {
    report(rank, { code: e.code, message: e.message, rounds, at: Date.now() });
  }
  process.exit(1);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
