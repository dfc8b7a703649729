// hora.failPeers(): a rank that cannot go on makes the others' collective at the same place fail with a
// message naming it, instead of a hang, and the job stays usable.
const t = require('tap');
const path = require('node:path');
const { runJob, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'fail-peers-worker.js');

for (const np of [2, 3]) {
  t.test(`p=${np}: rank 1 calls failPeers`, async (t) => {
    const job = await runJob(np, WORKER, { env: { HORA_TIMEOUT_S: '20' }, timeoutMs: 60000 });
    t.equal(job.code, 0, `hora run exits 0 (${tail(job)})`);
    for (const rep of job.reports) {
      t.ok(rep, 'every rank reported');
      if (!rep) continue;
      t.equal(rep.after, np, `rank ${rep.rank}: the next allreduce works`);
      t.match(rep.badReason, /hora\.failPeers: argument 'reason' must be a string; received number 42/);
      if (rep.rank === 1) continue;
      t.equal(rep.first.code, 'ERR_INVALID_ARGUMENT', `rank ${rep.rank}: code`);
      t.equal(rep.first.peer, 1, `rank ${rep.rank}: names rank 1 as the peer`);
      t.match(rep.first.message, /rank 1 made an invalid call: disk full while loading shard 3/);
      t.match(rep.long, { code: 'ERR_INVALID_ARGUMENT', peer: 1, whole: true }, `rank ${rep.rank}: a long reason arrives whole`);
    }
  });
}
