'use strict';
// Worker for the multi-host launcher tests: joins the job, allreduces, reports where it ran.
//
// Env (HORA_* so that hora run passes it to remote workers):
//      HORA_TEST_FAIL_RANK  this rank exits with code 3 after reporting
//      HORA_TEST_HANG       after reporting, keep running until killed; "stubborn": ignore SIGTERM too
const os = require('node:os');
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

function addresses() {
  return Object.values(os.networkInterfaces())
    .flat()
    .filter((a) => a.family === 'IPv4' && !a.internal)
    .map((a) => a.address);
}

(async () => {
  await hora.init();
  const rank = hora.rank();
  const size = hora.size();
  console.log(`pid ${process.pid} rank ${rank}`);
  // Element i of rank r is r + i: the sum over ranks is size*i + size*(size-1)/2.
  const n = 100003;
  const x = new Float64Array(n).map((_, i) => rank + i);
  const y = await hora.allreduce(x, { op: 'sum' });
  let wrong = 0;
  for (let i = 0; i < n; i++) if (y[i] !== size * i + (size * (size - 1)) / 2) wrong++;
  report(rank, {
    size,
    localRank: hora.localRank(),
    localSize: hora.localSize(),
    crossRank: hora.crossRank(),
    crossSize: hora.crossSize(),
    hostId: process.env.HORA_HOST_ID,
    addresses: addresses(),
    cwd: process.cwd(),
    pid: process.pid,
    // Where hora run --bind-to core bound it (every CPU it may use, without).
    cpus: require('node:fs').readFileSync('/proc/self/status', 'utf8').match(/^Cpus_allowed_list:\s*(\S+)/m)[1],
    wrong,
  });
  if (String(rank) === process.env.HORA_TEST_FAIL_RANK) {
    setTimeout(() => process.exit(3), 200);
    return;
  }
  if (process.env.HORA_TEST_HANG) {
    if (process.env.HORA_TEST_HANG === 'stubborn') process.on('SIGTERM', () => console.log('ignoring SIGTERM'));
    setInterval(() => {}, 1000);
    return;
  }
  await hora.shutdown();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
