'use strict';
// A rank that hangs (SIGSTOP, or an endless loop on its JS thread) while its peers wait in a collective:
// the peers reject with ERR_TIMEOUT after HORA_TIMEOUT_S, not later and not never; `hora run` then exits
// non-zero, and the hung process is gone afterwards (a stopped process does not act on SIGTERM until it
// is continued, so the launcher must not rely on it).
const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { runJob, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'errors-worker.js');
const TIMEOUT_S = 3;

function workerPids(marker) {
  try {
    return execFileSync('pgrep', ['-f', marker], { encoding: 'utf8' }).trim().split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

for (const how of ['stop', 'spin']) {
  for (const transport of ['shm', 'tcp']) {
    t.test(`p=3 ${transport}: rank 1 hangs (${how === 'stop' ? 'SIGSTOP' : 'endless loop'}) -> ERR_TIMEOUT after HORA_TIMEOUT_S, nothing left`, async (t) => {
      const marker = `hang-${how}-${transport}-${process.pid}`;
      const env = { HORA_TIMEOUT_S: String(TIMEOUT_S), KILL_RANK: '1', HANG_MARKER: marker, ...(transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {}) };
      const job = await runJob(3, WORKER, { args: [how, marker], env, launcherArgs: ['--grace', '2'], timeoutMs: 60000 });
      t.equal(job.signal, null, 'the launcher ended by itself', { output: tail(job) });
      t.equal(job.code, 1, 'hora run exits 1, the status of the first rank that failed', { output: tail(job) });
      const victim = job.reports[1];
      t.ok(victim && victim.hungAt, 'rank 1 hung during the loop', { output: tail(job) });
      for (const r of [0, 2]) {
        const rep = job.reports[r];
        t.ok(rep && rep.error, `rank ${r} reported an error`, { output: tail(job) });
        if (!rep || !rep.error || !victim) continue;
        const waited = (rep.rejectedAt - victim.hungAt) / 1000;
        t.comment(`rank ${r} rejected after ${waited.toFixed(2)} s: ${rep.error.code} ${rep.error.message}`);
        t.equal(rep.error.code, 'ERR_TIMEOUT', `rank ${r}: ERR_TIMEOUT`, { error: rep.error });
        t.ok(rep.error.isHoraError, `rank ${r}: a HoraError`);
        t.ok(waited >= TIMEOUT_S - 0.5 && waited < TIMEOUT_S + 5, `rank ${r}: after about HORA_TIMEOUT_S (${waited.toFixed(2)} s)`);
        t.match(rep.error.message, /rank \d/, `rank ${r}: the message names the rank it waited for`);
      }
      const waitingOnVictim = [0, 2].filter((r) => job.reports[r] && job.reports[r].error && job.reports[r].error.peer === 1);
      t.ok(waitingOnVictim.length >= 1, 'at least one rank names rank 1 as the peer it timed out on', { reports: job.reports });
      t.same(workerPids(marker), [], 'no worker process is left');
      if (victim && victim.jobId && fs.existsSync('/dev/shm')) {
        const left = fs.readdirSync('/dev/shm').filter((f) => f.startsWith(`hora-${victim.jobId}`));
        t.same(left, [], `no /dev/shm/hora-${victim.jobId}* segment is left`);
      }
    });
  }
}
