'use strict';
// A rank that allreduces until something stops it, for the tests that kill a task or cancel a step under
// Slurm (test/slurm.test.js). Prints "HORA_READY {rank, pid, host, job}" once it has joined and checked
// one allreduce (job: the id in the names of its shared-memory segments), then allreduces in a loop; when
// a call fails it prints "HORA_LOST {rank, code, peer, at}" (at: Date.now() when the failure reached it)
// and exits 1.
const os = require('node:os');
const hora = require('../../dist/ts/index.js');
const { resolveLaunch } = require('../../dist/ts/config.js');

async function main() {
  await hora.init({ timeoutSeconds: 60 });
  const rank = hora.rank();
  const x = new Float32Array(4096).fill(1);
  const first = await hora.allreduce(x, { op: 'sum' });
  if (first[0] !== hora.size()) throw new Error(`allreduce gave ${first[0]}, expected ${hora.size()}`);
  const job = resolveLaunch().jobId;
  process.stdout.write(`HORA_READY ${JSON.stringify({ rank, pid: process.pid, host: os.hostname(), job })}\n`);
  for (;;) {
    try {
      await hora.allreduce(x, { op: 'sum' });
    } catch (e) {
      process.stdout.write(`HORA_LOST ${JSON.stringify({ rank, code: e.code, peer: e.peer, at: Date.now(), message: e.message })}\n`);
      process.exit(1);
    }
  }
}

main().catch((e) => {
  process.stderr.write(`slurm-loop-worker (pid ${process.pid}) failed: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
