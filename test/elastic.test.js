'use strict';
// Elastic jobs (hora run --min-np, hora.elastic.run): workers lost and refilled while the others train on.
// The training (test/workers/elastic-worker.js) is deterministic whatever the world size, so every run
// must end with the weights of a run without failures, bit for bit (support/elastic-job.js).
const t = require('tap');
const path = require('node:path');
const { shmLeft, startProcess } = require('./support/hora-job');
const { HORA, WORKER, NODE, STEPS, workersAlive, hora, checkClean, checkFinished } = require('./support/elastic-job');

// Milliseconds from the signal to the first step completed at the smaller size.
function recoveryMs(stdout, size) {
  const sent = /signal SIG\w+ t=(\d+)/.exec(stdout);
  if (!sent) return undefined;
  const at = Number(sent[1]);
  const after = stdout.split('\n').map((l) => /step \d+ size (\d+) t=(\d+)/.exec(l))
    .filter((m) => m && Number(m[1]) === size && Number(m[2]) > at).map((m) => Number(m[2]));
  return after.length ? Math.min(...after) - at : undefined;
}

// How many workers logged a data-plane connect (HORA_DEBUG=INFO) whose counts match `what`.
function connectLines(stderr, what) {
  return stderr.split('\n').filter((l) => /hora INFO connected to /.test(l) && what.test(l)).length;
}

t.test('3 ranks, --min-np 2, one SIGKILLed mid-training: the two go on from the last commit and end bit-identical', async (t) => {
  const r = await hora(['run', '-np', '3', '--min-np', '2', NODE, WORKER], { ELASTIC_KILL: '1:23:SIGKILL', ELASTIC_NO_REFILL: '3', HORA_DEBUG: 'INFO' });
  checkFinished(t, r, 2);
  // The survivors' shared-memory pair goes on into the smaller world: nothing is connected anew.
  t.equal(connectLines(r.stderr, /1 peers in [\d.]+ ms \(1 over shared memory; 0 connected anew, 1 taken over from the last world\)/), 2,
    'both survivors take their pair over into the new world');
  t.same(r.results.map((x) => x.workerId).sort(), [0, 2], 'workers 0 and 2 survive');
  for (const x of r.results) {
    t.equal(x.size, 2, 'the world re-formed with 2 ranks');
    // Committed at step 20, killed at step 23: steps 21..23 ran twice on the survivors.
    t.equal(x.executed, STEPS + 3, `worker ${x.workerId} redid the 3 rolled-back steps`);
    t.equal(x.resets, 1, 'the reset callback ran once');
  }
  t.same(r.results.find((x) => x.workerId === 0).rank, 0, 'the oldest survivor is rank 0');
  t.match(r.stderr, /worker 1 was killed by SIGKILL; the job goes on without it/);
  const ms = recoveryMs(r.stdout, 2);
  t.ok(ms !== undefined, 'a step completed at size 2 after the kill');
  t.comment(`recovery 3->2 on shared memory, SIGKILL to the first step at size 2: ${ms} ms`);
  checkClean(t, r);
});

t.test('a SIGSTOPped rank: the others time out (ERR_TIMEOUT), it is killed and left out', async (t) => {
  const r = await hora(['run', '-np', '3', '--min-np', '2', NODE, WORKER],
    { ELASTIC_KILL: '1:23:SIGSTOP', ELASTIC_NO_REFILL: '3', HORA_TIMEOUT_S: '2' });
  checkFinished(t, r, 2);
  for (const x of r.results) t.equal(x.executed, STEPS + 3, `worker ${x.workerId} redid the rolled-back steps`);
  t.match(r.stderr, /worker 1 .*did not re-register within 2 s \(HORA_ELASTIC_SETTLE_S\); leaving it out: killing it/);
  checkClean(t, r);
});

t.test('two failures in a row', async (t) => {
  const r = await hora(['run', '-np', '4', '--min-np', '2', NODE, WORKER], { ELASTIC_KILL: '1:23:SIGKILL,2:37:SIGKILL', ELASTIC_NO_REFILL: '4' });
  checkFinished(t, r, 2);
  t.same(r.results.map((x) => x.workerId).sort(), [0, 3]);
  for (const x of r.results) t.equal(x.executed, STEPS + 3 + 2, `worker ${x.workerId} redid the steps of both rollbacks`);
  checkClean(t, r);
});

t.test('a kill during the re-forming itself', async (t) => {
  const r = await hora(['run', '-np', '4', '--min-np', '2', NODE, WORKER],
    { ELASTIC_KILL: '1:23:SIGKILL', ELASTIC_KILL_ON_LOSS: '2', ELASTIC_NO_REFILL: '4' });
  checkFinished(t, r, 2);
  t.same(r.results.map((x) => x.workerId).sort(), [0, 3]);
  checkClean(t, r);
});

t.test('below --min-np the job waits, and a refilled worker brings it back', async (t) => {
  const r = await hora(['run', '-np', '2', '--min-np', '2', NODE, WORKER], { ELASTIC_KILL: '1:23:SIGKILL' });
  checkFinished(t, r, 2);
  t.same(r.results.map((x) => x.workerId).sort(), [0, 2], 'worker 2 took the slot of worker 1');
  t.match(r.stderr, /starting worker 2 in the slot of worker 1/);
  const joiner = r.results.find((x) => x.workerId === 2);
  t.ok(joiner.executed < STEPS, 'the new worker got the state by sync, not by training from step 0');
  checkClean(t, r);
});

t.test('a refilled worker joins a running world at the next commit', async (t) => {
  const r = await hora(['run', '-np', '3', '--min-np', '2', NODE, WORKER], { ELASTIC_KILL: '1:13:SIGKILL', ELASTIC_STEPS: '200', HORA_DEBUG: 'INFO' });
  t.equal(r.code, 0, r.stderr);
  // Into the world of three: each survivor keeps its pair with the other and connects to the new worker;
  // the new worker connects to both.
  t.equal(connectLines(r.stderr, /2 peers in [\d.]+ ms \(2 over shared memory; 1 connected anew, 1 taken over from the last world\)/), 2,
    'the survivors take their pair over and connect only to the new worker');
  t.equal(connectLines(r.stderr, /2 peers in [\d.]+ ms \(2 over shared memory; 2 connected anew, 0 taken over/), 3 + 1,
    'the first world and the new worker connect anew');
  t.equal(r.results.length, 3, 'three workers finish');
  t.same(new Set(r.results.map((x) => x.checksum)).size, 1, 'all end bit-identical');
  for (const x of r.results) t.equal(x.size, 3, 'the world grew back to 3');
  checkClean(t, r);
});

t.test('a world of one rank whose steps never yield to the event loop still takes in a refilled worker', async (t) => {
  const r = await hora(['run', '-np', '2', '--min-np', '1', NODE, WORKER], { ELASTIC_KILL: '1:13:SIGKILL', ELASTIC_STEPS: '200', ELASTIC_BUSY: '1' });
  t.equal(r.code, 0, r.stderr);
  t.same(r.results.map((x) => x.workerId).sort(), [0, 2], 'worker 2 took the slot of worker 1');
  for (const x of r.results) t.equal(x.size, 2, 'the world grew back from 1 rank to 2');
  t.same(new Set(r.results.map((x) => x.checksum)).size, 1, 'both end bit-identical');
  checkClean(t, r);
});

t.test('a refilled worker that comes after the training has finished is let go, and the job succeeds', async (t) => {
  const r = await hora(['run', '-np', '2', '--min-np', '1', NODE, WORKER], { ELASTIC_KILL: '1:58:SIGKILL' });
  checkFinished(t, r, 1);
  t.match(r.stderr, /starting worker 2 in the slot of worker 1/);
  t.match(r.stderr, /\[2\] hora: elastic worker 2: the job finished before this worker could join; exiting/);
  checkClean(t, r);
});

t.test('--elastic-timeout expires below --min-np: the job fails saying how many ranks it had and needed', async (t) => {
  const r = await hora(['run', '-np', '2', '--min-np', '2', '--elastic-timeout', '3', '--grace', '1', NODE, WORKER],
    { ELASTIC_KILL: '1:23:SIGKILL', ELASTIC_IDLE_REFILL: '2' });
  t.equal(r.code, 1, 'the job fails');
  t.match(r.stderr, /the job had 1 rank\(s\) and needed 2 \(--min-np 2\); no worker came within --elastic-timeout 3 s/);
  t.match(r.stderr, /the next world needs 2 workers \(--min-np\); 1 ready; waiting up to 3 s/);
  checkClean(t, r);
});

t.test('a worker that fails before hora.elastic.run ends the job as without --min-np', async (t) => {
  const r = await hora(['run', '-np', '2', '--min-np', '1', NODE, '-e', 'if (process.env.HORA_WORKER_ID === "1") throw new SyntaxError("bad"); setTimeout(() => {}, 20000)']);
  t.not(r.code, 0);
  t.match(r.stderr, /worker 1 exited with code 1; stopping the other workers/);
});

t.test('bad elastic options are refused before anything starts, naming the option and value', async (t) => {
  const cases = [
    [['-np', '3', '--min-np', '4'], /--min-np "4" is invalid: expected at most -np \(3\)/],
    [['-np', '3', '--min-np', '2', '--max-np', '2'], /--max-np "2" is invalid: expected at least -np \(3\)/],
    [['-np', '3', '--min-np', '1.5'], /--min-np "1.5" is invalid: expected a whole number/],
    [['-np', '3', '--min-np', '2', '--elastic-timeout', 'soon'], /--elastic-timeout "soon" is invalid/],
    [['-np', '3', '--max-np', '4'], /--max-np "4" is invalid: expected to come with --min-np/],
  ];
  for (const [args, pattern] of cases) {
    const r = await hora(['run', ...args, NODE, '-e', 'console.log("started")']);
    t.equal(r.code, 2, args.join(' '));
    t.match(r.stderr, pattern);
    t.notMatch(r.stdout, /started/, 'no worker started');
  }
});

t.test('in an elastic job a collective outside hora.elastic.run is a clear error', async (t) => {
  const script = `const hora = require(${JSON.stringify(path.join(__dirname, '..', 'dist', 'ts', 'index.js'))});
    hora.init().then(() => hora.allreduce(new Float32Array(1))).then(() => console.log('no error'),
      (e) => { console.log('code ' + e.code); console.log(e.message); }).finally(() => hora.shutdown());`;
  const r = await hora(['run', '-np', '2', '--min-np', '1', NODE, '-e', script]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /\[0\] code ERR_INVALID_ARGUMENT/);
  t.match(r.stdout, /hora\.allreduce: this is an elastic job \(hora run --min-np\): collectives run inside hora\.elastic\.run/);
  t.notMatch(r.stdout, /no error/);
});

t.test('when the launcher dies, the elastic workers leave too', async (t) => {
  const tag = `${process.pid}-launcher`;
  const shmBefore = new Set(shmLeft());
  const child = startProcess(NODE, [HORA, 'run', '-np', '3', '--min-np', '2', NODE, WORKER],
    { env: { ...process.env, ELASTIC_STEPS: '100000', ELASTIC_TAG: tag } });
  await child.waitFor(() => /step 10 /.test(child.stdout), 60000);
  t.match(child.stdout, /step 10 /, 'training started');
  child.kill('SIGKILL');
  const gone = Date.now() + 15000;
  while (workersAlive(tag).length > 0 && Date.now() < gone) await new Promise((r) => setTimeout(r, 200));
  t.same(workersAlive(tag), [], 'every worker exited');
  t.same(shmLeft().filter((n) => !shmBefore.has(n)), [], 'no /dev/shm/hora-* segment is left');
});

t.test('every worker lost: the job fails rather than reporting success', async (t) => {
  const r = await hora(['run', '-np', '2', '--min-np', '1', NODE, WORKER], { ELASTIC_KILL: '0:13:SIGKILL,1:13:SIGKILL', ELASTIC_NO_REFILL: '2' });
  t.equal(r.code, 1, 'the job fails');
  t.match(r.stderr, /the job ended before any worker's training function returned \(2 worker\(s\) lost\)/);
  checkClean(t, r);
});

t.test('HORA_TIMELINE in an elastic job: one file per worker across its worlds, merged when the job ends', async (t) => {
  const fs = require('node:fs');
  const os = require('node:os');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-elastic-timeline-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'trace.json');
  const r = await hora(['run', '-np', '3', '--min-np', '2', '--timeline', file, NODE, WORKER], { ELASTIC_KILL: '1:23:SIGKILL', ELASTIC_NO_REFILL: '3' });
  checkFinished(t, r, 2);
  t.match(r.stderr, /hora run: timeline of 3 worker\(s\), \d+ events, written to .*trace\.json; no file from worker\(s\) 3 here/);
  const events = JSON.parse(fs.readFileSync(file, 'utf8')).traceEvents;
  const names = events.filter((e) => e.name === 'process_name').map((e) => e.args.name.replace(/ \(.*/, '')).sort();
  t.same(names, ['worker 0', 'worker 1', 'worker 2'], 'one process per worker');
  for (const pid of [0, 2]) {
    const worlds = events.filter((e) => e.pid === pid && e.cat === 'elastic').map((e) => e.name);
    t.same(worlds, [`world 0: rank ${pid} of 3`, `world 1: rank ${pid / 2} of 2`], `worker ${pid} marks each world it was in`);
    const steps = events.filter((e) => e.pid === pid && e.ph === 'X' && e.cat === 'collective' && /step/.test(e.name));
    const mark = events.find((e) => e.pid === pid && e.name.startsWith('world 1'));
    t.ok(steps.some((e) => e.ts < mark.ts), `worker ${pid}: collectives of the first world`);
    t.ok(steps.some((e) => e.ts > mark.ts), `worker ${pid}: collectives of the second world`);
  }
  t.ok(events.filter((e) => e.pid === 1 && e.cat === 'collective').length > 0, 'the lost worker\'s collectives up to its loss are there');
  checkClean(t, r);
});
