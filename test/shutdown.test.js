// shutdown(): outstanding collectives complete first, the event loop keeps running meanwhile, and hora is
// closed afterwards.
const t = require('tap');
const path = require('node:path');
const { runJob, tail } = require('./support/hora-job');

t.test('p=2: shutdown with a 16 MiB allreduce outstanding', async (t) => {
  const job = await runJob(2, path.join(__dirname, 'workers', 'shutdown-worker.js'), { timeoutMs: 60000 });
  t.equal(job.code, 0, `hora run exits 0 (${tail(job)})`);
  for (const rep of job.reports) {
    t.ok(rep, 'every rank reported');
    if (!rep) continue;
    t.equal(rep.doneAtShutdown, true, `rank ${rep.rank}: the outstanding allreduce completed before shutdown resolved`);
    t.equal(rep.value, 3, `rank ${rep.rank}: with the right result`);
    // Only rank 0 is guaranteed to wait: rank 1 submits late, and its half may then complete at once.
    if (rep.rank === 0) t.ok(rep.ticks > 10, `rank 0: timers ran while shutdown waited for rank 1 (${rep.ticks} ticks)`);
    t.equal(rep.initialized, false, `rank ${rep.rank}: no longer initialized`);
    t.equal(rep.after, 'ERR_SHUTDOWN', `rank ${rep.rank}: a collective after shutdown throws ERR_SHUTDOWN`);
  }
});
