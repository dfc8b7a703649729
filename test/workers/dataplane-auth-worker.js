'use strict';
// A rank of test/dataplane-auth.test.js. Rank 0 writes the job id where the test can read it (the test
// plays an attacker who knows it). The last rank waits for the test's gate file before it calls init, so
// the other ranks sit in init, their data-plane ports open, while the test's rogue connections arrive.
// After init, rank 0 says so in a file and waits for a second gate, so the test can knock on its data port
// while it runs. Then every rank runs a few allreduces and reports what it got.
const fs = require('node:fs');
const path = require('node:path');
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

async function waitForFile(file, timeoutMs) {
  const until = Date.now() + timeoutMs;
  while (!fs.existsSync(file)) {
    if (Date.now() > until) throw new Error(`no ${file} after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

(async () => {
  const rank = Number(process.env.HORA_RANK);
  const size = Number(process.env.HORA_SIZE);
  const dir = process.env.HORA_TEST_RESULT_DIR;
  if (rank === 0) fs.writeFileSync(path.join(dir, 'job-id'), process.env.HORA_JOB_ID);
  if (rank === size - 1) await waitForFile(path.join(dir, 'gate'), 60000);
  await hora.init();
  if (rank === 0) {
    fs.writeFileSync(path.join(dir, 'connected'), '');
    await waitForFile(path.join(dir, 'gate-after-init'), 60000);
  }
  const sums = [];
  for (const n of [1, 1000, 300001]) {
    const x = await hora.allreduce(new Float32Array(n).fill(rank + 1), { op: 'sum' });
    sums.push({ n, first: x[0], last: x[n - 1], allEqual: x.every((v) => v === x[0]) });
  }
  report(rank, { sums });
  await hora.shutdown();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
