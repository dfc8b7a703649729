'use strict';
// Worker for test/cluster-worker-env.test.js: joins the job, reports the variables it was given and its
// pid, then stays in the job until the test has looked at every process (the file go in the result
// directory), so that the job is running while the test reads the command lines.
const fs = require('node:fs');
const path = require('node:path');
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

const NAMES = ['HWE_FORWARDED', 'HWE_SET', 'HWE_LIST', 'HWE_LIST_SET', 'HWE_NOT_EXPORTED'];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

(async () => {
  await hora.init();
  const rank = hora.rank();
  report(rank, {
    pid: process.pid,
    hostId: process.env.HORA_HOST_ID,
    secret: process.env.HORA_SECRET,
    vars: Object.fromEntries(NAMES.map((n) => [n, process.env[n] ?? null])),
  });
  const go = path.join(process.env.HORA_TEST_RESULT_DIR, 'go');
  const deadline = Date.now() + 60000;
  while (!fs.existsSync(go)) {
    if (Date.now() > deadline) throw new Error(`rank ${rank}: ${go} did not appear within 60 s`);
    await sleep(50);
  }
  await hora.barrier();
  await hora.shutdown();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
