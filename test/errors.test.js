'use strict';
// Error behaviour seen by every rank (test/workers/errors-worker.js records it; this file asserts):
// invalid input on one or every rank, ranks that disagree, a rank killed mid-collective, and use
// before init, in a world of one and after shutdown.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { runJob, runProcess, tail, freePort, cleanEnv, ROOT, NODE } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'errors-worker.js');

/** Asserts the collective after an error worked: sum of rank+1 over ranks, and a 100000-element max. */
function assertFollowUp(t, after, p, where) {
  t.same(after.sum, [String((p * (p + 1)) / 2), String(p)], `${where}: the next allreduce works`, { after });
  t.equal(after.max, String(p), `${where}: the next large allreduce works`, { after });
}

function assertReports(t, job, np) {
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  t.equal(job.reports.filter(Boolean).length, np, 'every rank reported', { output: tail(job) });
  return job.reports.every(Boolean);
}

function assertInvalid(t, rep, p) {
  for (const res of rep.results) {
    const where = `rank ${rep.rank}, ${res.name}`;
    const { got } = res;
    t.notOk(got.sync, `${where}: reported through the Work, not thrown`, { got });
    t.ok(got.isHoraError, `${where}: a HoraError`, { got });
    t.equal(got.code, 'ERR_INVALID_ARGUMENT', `${where}: ERR_INVALID_ARGUMENT`, { got });
    t.equal(got.rank, rep.rank, `${where}: error.rank is this rank`);
    if (res.isBad) {
      t.match(got.message, `argument '${res.argument}'`, `${where}: names the argument`);
    } else {
      t.match(got.message, new RegExp(`\\brank ${res.badRank}\\b.*invalid`), `${where}: names the bad rank`);
      t.equal(got.peer, res.badRank, `${where}: error.peer is the bad rank`);
    }
    if (res.next) {
      t.same(res.next.value, new Array(8).fill(String((p * (p + 1)) / 2)), `${where}: the collective issued with it works`, { next: res.next });
    }
    assertFollowUp(t, res.after, p, where);
  }
}

for (const [np, transport] of [[2, 'tcp'], [3, 'shm'], [4, 'tcp']]) {
  const env = transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {};

  t.test(`p=${np} ${transport}: invalid input on one rank or on every rank`, async (t) => {
    const job = await runJob(np, WORKER, { args: ['invalid'], env });
    if (!assertReports(t, job, np)) return;
    for (const rep of job.reports) assertInvalid(t, rep, np);
  });

  t.test(`p=${np} ${transport}: ranks that disagree all get ERR_MISMATCH and carry on`, async (t) => {
    const job = await runJob(np, WORKER, { args: ['mismatch'], env });
    if (!assertReports(t, job, np)) return;
    for (const rep of job.reports) {
      for (const res of rep.results) {
        const where = `rank ${rep.rank}, ${res.name}`;
        t.equal(res.got.code, 'ERR_MISMATCH', `${where}: ERR_MISMATCH`, { got: res.got });
        t.match(res.got.message, /rank \d+ submitted .* but rank \d+ submitted/, `${where}: says which ranks did what`);
        if (res.name === 'long names differ at the end') {
          const name = (end) => `submitted barrier 'pipeline.batch 12: 32 samples in 4 micro-batches, shapes [8, ${end}]' as collective`;
          t.match(res.got.message, name(8), `${where}: shows the first rank's name whole`);
          t.match(res.got.message, name(9), `${where}: shows the last rank's name whole`);
        }
        if (res.untouched !== undefined) t.ok(res.untouched, `${where}: the array holds what it held before`);
        assertFollowUp(t, res.after, np, where);
      }
    }
  });
}

t.test('p=3: invalid input on one rank while the next collective is issued in the same tick', async (t) => {
  // The other ranks may batch their valid call with the next one; the bad rank must stay in step.
  const job = await runJob(3, WORKER, { args: ['invalid-same-tick'] });
  if (!assertReports(t, job, 3)) return;
  for (const rep of job.reports) assertInvalid(t, rep, 3);
});

// ---------------------------------------------------------------------------------------------------
// A rank SIGKILLed in the middle of a 64 MiB allreduce.

const DETECT_MS = 5000;

function assertPeerLost(t, reports, victim, np) {
  const killed = reports[victim];
  if (!t.ok(killed && killed.killedAt, `rank ${victim} recorded when it killed itself`)) return;
  for (let r = 0; r < np; r++) {
    if (r === victim) continue;
    const rep = reports[r];
    if (!t.ok(rep, `rank ${r} survived to report`)) continue;
    t.ok(rep.rejectedAt, `rank ${r}: its pending allreduce rejected`, { rep });
    if (!rep.rejectedAt) continue;
    const ms = rep.rejectedAt - killed.killedAt;
    t.comment(`rank ${r} saw the loss after ${ms} ms: ${rep.error.message}`);
    t.equal(rep.error.code, 'ERR_PEER_LOST', `rank ${r}: ERR_PEER_LOST`, { error: rep.error });
    t.ok(ms < DETECT_MS, `rank ${r}: detected within ${DETECT_MS} ms (took ${ms} ms)`);
    t.notOk(rep.after.ok, `rank ${r}: a later collective fails too instead of hanging`, { after: rep.after });
    t.ok(rep.afterMs < DETECT_MS, `rank ${r}: ... and fails at once (${rep.afterMs} ms)`);
  }
}

for (const transport of ['shm', 'tcp']) {
  t.test(`p=3 ${transport}: a rank SIGKILLed mid-allreduce -> ERR_PEER_LOST everywhere, hora run fails`, async (t) => {
    const env = transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {};
    // A long grace period, so the launcher's SIGTERM cannot hide a slow detection.
    const job = await runJob(3, WORKER, { args: ['kill'], env: { ...env, KILL_RANK: '1' }, launcherArgs: ['--grace', '20'] });
    t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
    t.equal(job.code, 137, 'with 128 + SIGKILL, the victim\'s status', { output: tail(job) });
    assertPeerLost(t, job.reports, 1, 3);
  });
}

// Without the launcher (torchrun-style variables) only the data plane can notice the dead rank.
for (const transport of ['shm', 'tcp']) {
  t.test(`p=3 ${transport}, no launcher: a rank SIGKILLed mid-allreduce -> ERR_PEER_LOST from the data plane`, async (t) => {
    const np = 3;
    const port = await freePort();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-test-'));
    const env = (r) => cleanEnv({
      RANK: String(r), WORLD_SIZE: String(np), LOCAL_RANK: String(r), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port),
      HORA_TIMEOUT_S: '60', HORA_TEST_RESULT_DIR: dir, KILL_RANK: '1', ...(transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {}),
    });
    const runs = await Promise.all([0, 1, 2].map((r) => runProcess([WORKER, 'kill'], env(r))));
    const reports = [0, 1, 2].map((r) => {
      const f = path.join(dir, `rank-${r}.json`);
      return fs.existsSync(f) ? JSON.parse(fs.readFileSync(f, 'utf8')) : null;
    });
    fs.rmSync(dir, { recursive: true, force: true });
    t.equal(runs[1].signal, 'SIGKILL', 'rank 1 died of SIGKILL');
    assertPeerLost(t, reports, 1, np);
    for (const r of [0, 2]) t.equal(runs[r].code, 0, `rank ${r} exits by itself`, { stderr: runs[r].stderr.slice(-2000) });
  });
}

// ---------------------------------------------------------------------------------------------------
// Before init, a world of one, after shutdown.

t.test('no launcher: before init, a world of one, after shutdown', async (t) => {
  const run = await runProcess([WORKER, 'solo'], cleanEnv({}));
  t.equal(run.code, 0, 'worker exits 0', { stderr: run.stderr });
  const rep = JSON.parse(run.stdout.trim().split('\n').pop());
  for (const [name, got] of Object.entries(rep.before)) {
    if (name === 'isInitialized') continue;
    t.ok(got.sync, `hora.${name}() before init throws synchronously`, { got });
    t.ok(got.isHoraError, `hora.${name}() before init: a HoraError`);
    t.equal(got.code, 'ERR_NOT_INITIALIZED', `hora.${name}() before init: ERR_NOT_INITIALIZED`, { got });
  }
  t.equal(rep.before.isInitialized, false, 'isInitialized() is false before init');
  t.same(rep.world, { rank: 0, size: 1, localRank: 0, localSize: 1, crossRank: 0, crossSize: 1 }, 'a world of one');
  t.ok(rep.single.length >= 10 * 15, 'every dtype was tried');
  for (const s of rep.single) {
    t.ok(s.equal, `${s.what}: equal to the input`);
    t.ok(s.copy, `${s.what}: a new array (or x itself with inplace)`);
  }
  t.ok(rep.barrier.ok, 'barrier resolves');
  t.equal(rep.invalid.code, 'ERR_INVALID_ARGUMENT', 'input is still validated in a world of one');
  t.match(rep.invalid.message, "argument 'x'");
  const soloLine = fs.readFileSync(WORKER, 'utf8').split('\n').findIndex((l) => l.includes('SOLO_CALL_LINE')) + 1;
  t.match(rep.invalidStack, new RegExp(`errors-worker\\.js:${soloLine}:`), 'its error names the calling line', { stack: rep.invalidStack });
  t.ok(rep.after.sync, 'a collective after shutdown throws synchronously', { after: rep.after });
  t.equal(rep.after.code, 'ERR_SHUTDOWN', 'a collective after shutdown: ERR_SHUTDOWN');
});

// An awaited collective's error points at the line that called it (CallSite): the first call, with the
// budget full; the 400th of one synchronous run, only with HORA_CALL_SITES=all; past the sampled budget
// its stack says that the line was not recorded.
for (const callSites of ['sampled', 'all', 'off']) {
  t.test(`HORA_CALL_SITES=${callSites}: where an awaited collective's error points`, async (t) => {
    const job = await runJob(2, WORKER, { args: ['call-sites'], env: { HORA_CALL_SITES: callSites } });
    if (!assertReports(t, job, 2)) return;
    for (const rep of job.reports) {
      const where = `rank ${rep.rank}`;
      t.ok(rep.othersOk, `${where}: the 399 agreeing allreduces of the run succeed`);
      for (const key of ['first', 'late']) {
        t.equal(rep[key] && rep[key].code, 'ERR_MISMATCH', `${where}, ${key}: ERR_MISMATCH`, { got: rep[key] });
      }
      const callerLine = /errors-worker\.js:\d+/;
      if (callSites === 'off') {
        t.notMatch(rep.first.stack, callerLine, `${where}: off records no line`, { stack: rep.first.stack });
      } else {
        t.match(rep.first.stack, callerLine, `${where}: the first error's stack names the calling line`, { stack: rep.first.stack });
      }
      if (callSites === 'all') {
        t.match(rep.late.stack, callerLine, `${where}: all records the 400th call's line too`, { stack: rep.late.stack });
      } else if (callSites === 'sampled') {
        t.notMatch(rep.late.stack, callerLine, `${where}: past the budget no line is recorded`, { stack: rep.late.stack });
        t.match(rep.late.stack, /not recorded: more than 4000 calls a second; HORA_CALL_SITES=all records every one/,
          `${where}: and the stack says so`, { stack: rep.late.stack });
      }
    }
  });
}

t.test('HORA_CALL_SITES with a value it does not know fails init on every rank, naming it', async (t) => {
  const job = await runJob(2, WORKER, { args: ['call-sites'], env: { HORA_CALL_SITES: 'some' } });
  t.not(job.code, 0, 'the job fails');
  t.match(job.stderr, /HORA_CALL_SITES/, 'the error names the variable', { output: tail(job) });
  t.match(job.stderr, /some/, 'and the value received', { output: tail(job) });
});

t.test('a rank exiting after a call that threw at once says nothing is outstanding; one that leaves a collective behind says so', async (t) => {
  const threw = await runJob(2, WORKER, { args: ['exit-after-throw'], timeoutMs: 60000 });
  t.match(threw.stderr, /\[0\] rank 0 caught ERR_INVALID_ARGUMENT/, 'the bad call threw', { output: tail(threw) });
  t.notMatch(threw.stderr, /collective\(s\) outstanding/, 'no rank claims a collective outstanding', { output: tail(threw) });
  const left = await runJob(2, WORKER, { args: ['exit-outstanding'], timeoutMs: 60000 });
  t.match(left.stderr, /\[0\] hora: rank 0 is exiting \(code 1\) with 1 collective\(s\) outstanding/, 'the allreduce left behind is named', { output: tail(left) });
});
