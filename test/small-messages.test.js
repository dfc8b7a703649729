'use strict';
// Small collectives on the waiting thread. A collective waited with wait() runs on the calling thread
// when the engine is idle, without the communication thread; awaited, it runs on the communication
// thread. Both must give the same bytes, keep the failure semantics (a killed peer is ERR_PEER_LOST
// soon, a stopped one ERR_TIMEOUT at the deadline, even while the waiting thread spins), mix with large
// collectives outstanding at the same time, and leave memory flat over a long wait() loop. An awaited one
// whose partner's message is already there runs at once on the calling thread, as it cannot wait.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { runJob, runProcess, tail, freePort, cleanEnv } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'small-messages-worker.js');
// The bound errors.test.js holds a killed peer's detection to (typically well under a second).
const DETECT_MS = 5000;
const TIMEOUT_S = 3;

function assertReports(t, job, np) {
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  let all = true;
  for (let r = 0; r < np; r++) all = t.ok(job.reports[r], `rank ${r} reported`, { output: tail(job) }) && all;
  return all;
}

for (const [np, transport] of [[2, 'shm'], [3, 'shm'], [2, 'tcp']]) {
  t.test(`p=${np} ${transport}: small allreduces give the same bytes waited, awaited and fused, and the reference`, async (t) => {
    const env = transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {};
    const job = await runJob(np, WORKER, { args: ['sweep'], env, timeoutMs: 300000 });
    if (!assertReports(t, job, np)) return;
    for (const rep of job.reports) {
      t.ok(rep.checked >= 300, `rank ${rep.rank}: ${rep.checked} cases checked`);
      t.same(rep.failures, [], `rank ${rep.rank}: every result agrees`);
    }
  });
}

for (const transport of ['shm', 'tcp']) {
  t.test(`p=2 ${transport}: large and small collectives outstanding at once, waited out of order`, async (t) => {
    const env = transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {};
    const job = await runJob(2, WORKER, { args: ['mixed'], env, timeoutMs: 300000 });
    if (!assertReports(t, job, 2)) return;
    for (const rep of job.reports) t.same(rep.failures, [], `rank ${rep.rank}: every result is right`);
  });
}

t.test('p=2 shm: 100,000 small allreduces in a wait() loop, memory flat', async (t) => {
  const n = 100000;
  const job = await runJob(2, WORKER, { args: ['soak'], env: { SOAK_SMALL: String(n) }, timeoutMs: 600000 });
  if (!assertReports(t, job, 2)) return;
  for (const rep of job.reports) {
    t.equal(rep.failure, '', `rank ${rep.rank}: every result is right`);
    t.equal(rep.samples.at(-1).done, n, `rank ${rep.rank}: ran all ${n}`);
    // Growth: the highest resident size over the second half minus that over the first (after the first
    // sample, which includes warm-up), as in soak.test.js.
    const max = (s) => Math.max(...s.map((x) => x.rssMiB));
    const half = Math.floor(rep.samples.length / 2);
    const growth = max(rep.samples.slice(half)) - max(rep.samples.slice(1, half));
    const heapGrowth = rep.samples.at(-1).heapMiB - rep.samples[1].heapMiB;
    t.comment(`rank ${rep.rank}: ${(n / rep.seconds).toFixed(0)}/s, RSS growth ${growth.toFixed(1)} MiB, heap ${rep.samples[1].heapMiB}..${rep.samples.at(-1).heapMiB} MiB`);
    t.ok(growth < 8, `rank ${rep.rank}: resident memory flat (grew ${growth.toFixed(1)} MiB)`);
    t.ok(heapGrowth < 4, `rank ${rep.rank}: JS heap flat (grew ${heapGrowth.toFixed(1)} MiB)`);
    t.ok(rep.stats.count >= n && rep.stats.bytes >= n * 8, `rank ${rep.rank}: the Stats report counts every call (${rep.stats.count})`);
    t.ok(rep.stats.busyUs > 0 && rep.stats.busyUs <= rep.seconds * 1e6 + 1e6,
      `rank ${rep.rank}: busy ${rep.stats.busyUs} µs of the loop's ${Math.round(rep.seconds * 1e6)}`);
  }
});

// Two ranks, one of them late: its awaited small collective finds the partner's message there and runs
// at once, on the calling thread (it cannot wait on anyone), and settles before any completion callback
// could arrive. A rank whose partner is late still hands its collective to the communication thread.
for (const transport of ['shm', 'tcp']) {
  t.test(`p=2 ${transport}: the rank that comes second runs its awaited small collective at once`, async (t) => {
    const env = transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {};
    const job = await runJob(2, WORKER, { args: ['second'], env, timeoutMs: 120000 });
    if (!assertReports(t, job, 2)) return;
    for (const rep of job.reports) {
      t.same(rep.failures, [], `rank ${rep.rank}: every result is right`);
      t.same(rep.notAtOnce, [], `rank ${rep.rank}: each late call of at most 4 KiB was settled after microtasks alone (${rep.atOnce} of its ${rep.cases / 2})`);
      t.ok(rep.atOnce >= 8, `rank ${rep.rank}: ${rep.atOnce} late calls ran at once`);
      for (const [i, m] of rep.mismatches.entries()) {
        t.equal(m && m.code, 'ERR_MISMATCH', `rank ${rep.rank}: mismatch ${i + 1} is ERR_MISMATCH on this rank`, { got: m });
      }
    }
    const [early, late] = job.reports;
    t.equal(late.barrierAtOnce, true, 'the late rank\'s barrier ran at once');
    t.equal(early.earlySettled, false, 'a call whose partner is late is not settled at once');
    t.ok(early.ticks >= 10, `the event loop ran while it waited 200 ms (${early.ticks} ticks of 5 ms)`);
  });
}

// Without a launcher only the data plane can see the death: the survivor is spinning in wait().
for (const transport of ['shm', 'tcp']) {
  t.test(`p=2 ${transport}, no launcher: a peer SIGKILLed while the other spins in wait() -> ERR_PEER_LOST`, async (t) => {
    const port = await freePort();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-test-'));
    const env = (r) => cleanEnv({
      RANK: String(r), WORLD_SIZE: '2', LOCAL_RANK: String(r), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port),
      HORA_TIMEOUT_S: '60', HORA_TEST_RESULT_DIR: dir, KILL_RANK: '1', ...(transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {}),
    });
    const runs = await Promise.all([0, 1].map((r) => runProcess([WORKER, 'kill'], env(r), 120000)));
    const [survivor, victim] = [0, 1].map((r) => {
      const f = path.join(dir, `rank-${r}.json`);
      return fs.existsSync(f) ? JSON.parse(fs.readFileSync(f, 'utf8')) : null;
    });
    fs.rmSync(dir, { recursive: true, force: true });
    t.equal(runs[1].signal, 'SIGKILL', 'rank 1 died of SIGKILL');
    if (!t.ok(victim && victim.killedAt, 'rank 1 recorded when it killed itself')) return;
    if (!t.ok(survivor && survivor.rejectedAt, 'rank 0 reported a failed wait()', { stderr: runs[0].stderr.slice(-2000) })) return;
    const ms = survivor.rejectedAt - victim.killedAt;
    t.comment(`rank 0 saw the loss after ${ms} ms: ${survivor.error.message}`);
    t.equal(survivor.error.code, 'ERR_PEER_LOST', 'ERR_PEER_LOST', { error: survivor.error });
    t.equal(survivor.error.peer, 1, 'error.peer is rank 1');
    t.ok(ms < DETECT_MS, `detected within ${DETECT_MS} ms (took ${ms} ms)`);
    t.notOk(survivor.after.ok, 'a later collective fails too', { after: survivor.after });
    t.ok(survivor.afterMs < DETECT_MS, `... at once (${survivor.afterMs} ms)`);
    t.equal(runs[0].code, 0, 'rank 0 exits by itself', { stderr: runs[0].stderr.slice(-2000) });
  });

  t.test(`p=2 ${transport}: a peer SIGSTOPped while the other spins in wait() -> ERR_TIMEOUT at HORA_TIMEOUT_S`, async (t) => {
    const env = { HORA_TIMEOUT_S: String(TIMEOUT_S), KILL_RANK: '1', ...(transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {}) };
    const job = await runJob(2, WORKER, { args: ['stop'], env, launcherArgs: ['--grace', '2'], timeoutMs: 120000 });
    t.equal(job.signal, null, 'the launcher ended by itself', { output: tail(job) });
    t.equal(job.code, 1, 'hora run exits 1, the status of the rank that failed', { output: tail(job) });
    const [survivor, victim] = job.reports;
    if (!t.ok(victim && victim.stoppedAt, 'rank 1 recorded when it stopped', { output: tail(job) })) return;
    if (!t.ok(survivor && survivor.rejectedAt, 'rank 0 reported a failed wait()', { output: tail(job) })) return;
    const waited = (survivor.rejectedAt - victim.stoppedAt) / 1000;
    t.comment(`rank 0 failed after ${waited.toFixed(2)} s: ${survivor.error.code} ${survivor.error.message}`);
    t.equal(survivor.error.code, 'ERR_TIMEOUT', 'ERR_TIMEOUT', { error: survivor.error });
    t.ok(waited >= TIMEOUT_S - 0.5 && waited < TIMEOUT_S + 5, `after about HORA_TIMEOUT_S (${waited.toFixed(2)} s)`);
    t.match(survivor.error.message, /rank 1/, 'the message names the rank it waited for');
  });
}
