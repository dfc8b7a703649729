'use strict';
// hora/brain: one rank throwing inside its training loop makes every rank fail with an error, promptly,
// whether the failing rank exits or stays alive (test/workers/brain-worker.js 'throw' scenario), with brain.js
// 1.6.1 and 2.0.0-beta.
const t = require('tap');
const path = require('node:path');
const { runJob, tail } = require('./support/hora-job');
const { BRAIN_VERSIONS } = require('./support/brain-versions');

const WORKER = path.join(__dirname, 'workers', 'brain-worker.js');
const TIMEOUT_S = 30; // the collective deadline: errors must come well before it

for (const { version, moduleName } of BRAIN_VERSIONS) {
  const base = { BRAIN_MODULE: moduleName };
  const label = (title) => `brain.js ${version}: ${title}`;

  for (const [np, linger] of [[2, false], [3, false], [3, true]]) {
    const how = linger ? 'stays alive after catching it' : 'exits';
    t.test(label(`np=${np}: rank 1 throws in its callback at iteration 3 and ${how}; every rank fails, no hang`), async (t) => {
      const env = { ...base, HORA_TIMEOUT_S: String(TIMEOUT_S), ...(linger ? { BRAIN_LINGER: '1' } : {}) };
      const job = await runJob(np, WORKER, { args: ['throw'], env, timeoutMs: 60000 });
      t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
      t.not(job.signal, 'SIGKILL', 'the launcher was not killed by the test for hanging');
      t.ok(job.seconds < (2 * TIMEOUT_S) / 3, `finished in ${job.seconds.toFixed(1)} s, before the ${TIMEOUT_S} s collective deadline`);
      for (let r = 0; r < np; r++) {
        const rep = job.reports[r];
        t.ok(rep, `rank ${r} reported`, { output: tail(job) });
        if (!rep) continue;
        t.equal(rep.ok, false, `rank ${r}: trainAsync rejected`);
        if (r === 1) {
          t.equal(rep.message, 'boom on rank 1 at iteration 3', 'rank 1 gets its own error back');
        } else {
          if (linger) {
            // Rank 1 is alive, so only its failure signal can have stopped the others.
            t.equal(rep.code, 'ERR_INVALID_ARGUMENT', `rank ${r}: a HoraError with a code`);
            t.equal(rep.peer, 1, `rank ${r}: error.peer is rank 1`);
            t.match(rep.message, /rank 1 failed inside its training loop/, `rank ${r}: the message names rank 1`);
          } else {
            // Rank 1 exits at once: its signal or its exit (seen by the launcher or the connection) comes first.
            t.ok(['ERR_INVALID_ARGUMENT', 'ERR_PEER_LOST'].includes(rep.code), `rank ${r}: a HoraError (${rep.code})`);
            t.match(rep.message, /rank [0-9]/, `rank ${r}: the message names a rank`);
          }
          t.match(rep.message, /iteration 4, step 0/, `rank ${r}: and where this rank was`);
          t.ok(rep.seconds < 5, `rank ${r}: failed ${rep.seconds} s after training started`);
        }
      }
    });
  }

  t.test(label('ranks given different data all refuse to start, with ERR_MISMATCH'), async (t) => {
    const job = await runJob(2, WORKER, { args: ['disagree'], env: { ...base, HORA_TIMEOUT_S: String(TIMEOUT_S) } });
    t.equal(job.code, 0, 'hora run exits 0 (the workers caught the error)', { output: tail(job) });
    for (const rep of job.reports) {
      t.ok(rep && !rep.ok, `rank ${rep && rep.rank}: trainAsync rejected`);
      if (!rep) continue;
      t.equal(rep.code, 'ERR_MISMATCH', `rank ${rep.rank}: ERR_MISMATCH`);
      t.match(rep.message, /ranks disagree on the data/, `rank ${rep.rank}: says what differs`);
    }
  });

  t.test(label('an option only rank 1 gets wrong fails every rank before training, naming it'), async (t) => {
    const job = await runJob(2, WORKER, { args: ['badopts'], env: { ...base, HORA_TIMEOUT_S: String(TIMEOUT_S) } });
    t.equal(job.code, 0, 'hora run exits 0 (the workers caught the error)', { output: tail(job) });
    const [r0, r1] = job.reports;
    t.ok(r0 && r1, 'both ranks reported', { output: tail(job) });
    if (!r0 || !r1) return;
    t.equal(r1.code, 'ERR_INVALID_ARGUMENT', 'rank 1: ERR_INVALID_ARGUMENT');
    t.match(r1.message, /learningRate, 5/, 'rank 1: names the option and the value');
    t.equal(r0.code, 'ERR_INVALID_ARGUMENT', 'rank 0: ERR_INVALID_ARGUMENT too');
    t.equal(r0.peer, 1, 'rank 0: error.peer is rank 1');
    t.match(r0.message, /rank 1 rejected its arguments/, 'rank 0: names rank 1');
    t.ok(job.seconds < 10, `no wait for the deadline (${job.seconds.toFixed(1)} s)`);
  });
}
