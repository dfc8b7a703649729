'use strict';
// hora/onnxruntime: one rank failing in its training loop makes every rank fail with an error, no hang: an
// ORT error inside runTrainStep (the rank stays alive; its failure signal stops the others), or a rank that dies.
const t = require('tap');
const path = require('node:path');
const { runJob, tail } = require('./support/hora-job');
const { artifactSets } = require('./support/ort-artifacts');

const WORKER = path.join(__dirname, 'workers', 'onnxruntime-worker.js');
const TIMEOUT_S = 30; // the collective deadline: errors must come well before it

for (const set of artifactSets()) {
  const skip = set.missing ? `${set.name}: ${set.missing}` : false;
  t.test(`${set.name}: np=3: rank 1's runTrainStep throws (bad feed) at step 3 and it stays alive; every rank fails, naming rank 1`, { skip }, async (t) => {
    const job = await runJob(3, WORKER, { args: ['fail'], env: { ...set.env, HORA_TIMEOUT_S: String(TIMEOUT_S), ORT_LINGER: '1' }, timeoutMs: 80000 });
    t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
    t.not(job.signal, 'SIGKILL', 'the launcher was not killed by the test for hanging');
    for (let r = 0; r < 3; r++) {
      const rep = job.reports[r];
      t.ok(rep, `rank ${r} reported`, { output: tail(job) });
      if (!rep) continue;
      t.equal(rep.ok, false, `rank ${r}: training rejected`);
      if (r === 1) {
        t.notMatch(rep.message, /hora\/onnxruntime/, 'rank 1 gets ORT\'s own error back');
      } else {
        t.equal(rep.code, 'ERR_INVALID_ARGUMENT', `rank ${r}: a HoraError with a code`);
        t.equal(rep.peer, 1, `rank ${r}: error.peer is rank 1`);
        t.match(rep.message, /rank 1 failed in its training step/, `rank ${r}: the message names rank 1`);
        t.match(rep.message, /runOptimizerStep \(rank [02], optimizer step 3\)/, `rank ${r}: and where this rank was`);
        t.ok(rep.seconds < TIMEOUT_S / 2, `rank ${r}: failed ${rep.seconds} s after training started`);
      }
    }
  });

  t.test(`${set.name}: np=2: rank 1 throws in its own loop at step 3 and dies; rank 0 fails, no hang`, { skip }, async (t) => {
    const job = await runJob(2, WORKER, { args: ['exit'], env: { ...set.env, HORA_TIMEOUT_S: String(TIMEOUT_S) }, timeoutMs: 60000 });
    t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
    t.not(job.signal, 'SIGKILL', 'the launcher was not killed by the test for hanging');
    t.ok(job.seconds < (2 * TIMEOUT_S) / 3, `finished in ${job.seconds.toFixed(1)} s, before the ${TIMEOUT_S} s collective deadline`);
    t.match(job.stderr, /boom on rank 1 at step 3/, 'rank 1\'s error is in the output');
    const rep = job.reports[0];
    if (rep) {
      // Rank 0 may also be stopped by the launcher before it can report; if it reported, it is an error.
      t.equal(rep.ok, false, 'rank 0: training rejected');
      t.ok(['ERR_PEER_LOST', 'ERR_SHUTDOWN', 'ERR_TIMEOUT'].includes(rep.code), `rank 0: a HoraError (${rep.code})`);
    }
  });
}
