'use strict';
// The stall inspector: a rank that has not submitted a collective the others wait in is named, with the
// collective, once it has waited HORA_STALL_WARN_S; the job then completes normally when the rank catches up.
const t = require('tap');
const path = require('node:path');
const { runJob, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'stats-worker.js');

t.test('hora run names the rank that holds a collective up, and the job still completes', async (t) => {
  const job = await runJob(3, WORKER, {
    env: { HORA_TEST_MODE: 'stall', HORA_TEST_STALL_MS: '4000', HORA_STALL_WARN_S: '1', HORA_TIMEOUT_S: '120' },
  });
  t.equal(job.code, 0, `job exits 0\n${tail(job)}`);
  const warnings = job.stderr.split('\n').filter((l) => l.includes('stall:'));
  t.ok(warnings.length >= 1, `a stall warning was logged\n${tail(job)}`);
  t.match(warnings[0], /stall: rank 2 has not submitted allreduce 'grad\/dense\/kernel' \(#4\) that ranks 0, 1 submitted \d+ s ago/);
  // Once, then again at most every HORA_STALL_WARN_S: a 4 s wait gives a handful, not one per check.
  t.ok(warnings.length <= 5, `${warnings.length} warnings for a 4 s stall with HORA_STALL_WARN_S=1`);
  t.same(job.reports.map((r) => r && r.sum), [3, 3, 3], 'every rank got the sum after rank 2 caught up');
});

t.test('no warning when nobody is late', async (t) => {
  const job = await runJob(3, WORKER, {
    env: { HORA_TEST_MODE: 'stall', HORA_TEST_STALL_MS: '0', HORA_STALL_WARN_S: '1' },
  });
  t.equal(job.code, 0, tail(job));
  t.notMatch(job.stderr, /stall:/);
});

t.test('HORA_STALL_WARN_S must be a number of seconds >= 0', async (t) => {
  const job = await runJob(2, WORKER, { env: { HORA_STALL_WARN_S: 'soon' }, timeoutMs: 30000 });
  t.equal(job.code, 2);
  t.match(job.stderr, /HORA_STALL_WARN_S "soon" is invalid: expected a number >= 0/);
});

t.test('without hora run, rank 0 hosts the server and logs the stall', async (t) => {
  const net = require('node:net');
  const port = await new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
  const env = (rank) => {
    const e = { ...process.env, RANK: String(rank), WORLD_SIZE: '3', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port) };
    for (const k of Object.keys(e)) if (k.startsWith('HORA_') || k.startsWith('OMPI_') || k.startsWith('PMI') || k.startsWith('SLURM_')) delete e[k];
    return { ...e, HORA_SECRET: 'stall-test', HORA_TEST_MODE: 'stall', HORA_TEST_STALL_MS: '3000', HORA_STALL_WARN_S: '1', HORA_TIMEOUT_S: '60' };
  };
  const { runProcess } = require('./support/hora-job');
  const runs = await Promise.all([0, 1, 2].map((rank) => runProcess([WORKER], env(rank), 60000)));
  runs.forEach((r, rank) => t.equal(r.code, 0, `rank ${rank} exits 0\n${r.stderr.slice(-2000)}`));
  t.match(runs[0].stderr, /hora rendezvous WARN: stall: rank 2 has not submitted allreduce 'grad\/dense\/kernel' \(#4\) that ranks 0, 1 submitted/);
  t.notMatch(runs[1].stderr + runs[2].stderr, /stall:/, 'only the rank that hosts the server logs stalls');
});
