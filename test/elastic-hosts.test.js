'use strict';
// Elastic jobs across hosts: a simulated cluster (network namespaces with real sshds, test/cluster/cluster.sh),
// 2 hosts x 2 workers, --min-np 2. One host's link is cut mid-training: its workers leave, the host is
// blacklisted, and the other host's workers go on from their last commit. Needs root; skipped otherwise.
const t = require('tap');
const { spawnSync } = require('node:child_process');
const cluster = require('./cluster/cluster');
const { WORKER, NODE, expectedChecksum, hora, checkFinished } = require('./support/elastic-job');

// Its own name and subnet: never takes down, nor collides with, a cluster somebody else brought up.
const NAME = 'hel';
const SUBNET = 55;

const reason = cluster.canRun();
if (reason) {
  t.comment(`skipping elastic multi-host tests: ${reason}`);
  t.plan(0, reason);
  return;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const esc = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

let c;
t.before(async () => {
  c = await cluster.up(2, { name: NAME, subnet: SUBNET });
});
t.teardown(async () => {
  spawnSync('ip', ['-n', `${NAME}1`, 'link', 'set', 'eth0', 'up']);
  await cluster.down(NAME);
});

// Elastic workers still running in host i.
const workersIn = (i) => c.processes(i).filter((p) => p.cmdline.includes(WORKER));

// `hora run` of the elastic worker on both hosts, 2 slots each, --min-np 2, with `steps` steps of 20 ms;
// `act` runs once, when rank 0 on the first host prints step `at` in the world of 4.
function runElastic(launcherArgs, steps, env, at, act) {
  const [h0, h1] = c.hosts;
  const atStep = new RegExp(`^\\[0@${esc(h0)}\\] step ${at} size 4 `);
  let acted = false;
  return hora([...launcherArgs, '-H', `${h0}:2,${h1}:2`, '--min-np', '2', '--ssh-opts', `-F ${c.sshConfig}`,
    '-x', 'ELASTIC_STEPS', '-x', 'ELASTIC_STEP_MS', '-x', 'ELASTIC_TAG', NODE, WORKER],
  { ELASTIC_STEPS: String(steps), ELASTIC_STEP_MS: '20', ...env }, {
    timeoutMs: 150000,
    onLine: (line) => {
      if (acted || !atStep.test(line)) return;
      acted = true;
      act();
    },
  });
}

// Takes the second host's link down (the teardown brings it up again); true once done.
function cutLink(t) {
  const ip = spawnSync('ip', ['-n', `${NAME}1`, 'link', 'set', 'eth0', 'down'], { encoding: 'utf8' });
  t.equal(ip.status, 0, `the link of ${c.hosts[1]} is cut ${ip.stderr}`);
  return true;
}

t.test("a host's link cut mid-training: its workers leave, the host is blacklisted, the other host goes on", async (t) => {
  const steps = 400;
  const [h0, h1] = c.hosts;
  let cut = false;
  const r = await runElastic(['run'], steps, { HORA_DEBUG: 'INFO' }, 30, () => { cut = cutLink(t); });
  t.ok(cut, 'the link was cut mid-training');
  checkFinished(t, r, 2, { steps, expected: expectedChecksum(steps) });
  t.same(r.results.map((x) => x.workerId).sort(), [0, 1], `the workers of ${h0} finish`);
  for (const x of r.results) {
    t.equal(x.size, 2, `worker ${x.workerId} ends in a world of 2`);
    t.equal(x.resets, 1, `worker ${x.workerId} rolled back once`);
  }
  t.match(r.stderr, new RegExp(`host ${esc(h1)} is blacklisted after worker [23]'s failure`));
  t.match(r.stderr, /no free slot on a host that is not blacklisted; the job goes on with 2 worker\(s\)/);
  t.match(r.stderr, /the world re-formed with 2 rank\(s\)/);
  // The survivors keep their shared-memory pair; the pairs to the cut-off host are dropped, not waited on.
  const tookOver = r.stderr.split('\n').filter((l) => l.startsWith('[') && l.includes(`@${h0}]`) &&
    /hora INFO connected to 1 peers in [\d.]+ ms \(1 over shared memory; 0 connected anew, 1 taken over from the last world\)/.test(l));
  t.equal(tookOver.length, 2, `both workers of ${h0} take their pair over into the world of 2`);
  // The cut-off workers hear nothing more from the launcher: they leave on their own, with the link still down.
  const deadline = Date.now() + 40000;
  while (workersIn(1).length > 0 && Date.now() < deadline) await sleep(500);
  t.same(workersIn(1), [], `no worker is left on ${h1}, although its link is still down`);
  t.same(workersIn(0), [], `no worker is left on ${h0}`);
  t.same(r.leaked, [], 'no /dev/shm/hora-* segment is left');
});

// The launcher leaves out and kills the workers of a host it cannot reach; their ssh sessions end (killed)
// only after the survivors have finished. How they end must not decide the job's status.
function checkLeftOut(t, r) {
  t.equal(r.code, 0, `hora run exits 0: the world that finished finished cleanly\n${r.stderr}`);
  t.notMatch(r.stderr, /stopping the other workers/, 'no worker it left out is taken for a failure');
  const summary = r.stderr.split('\n').filter((l) => /^hora run: the training finished in a world of 2; left out on the way: /.test(l));
  t.equal(summary.length, 1, 'one line says which workers were left out', { stderr: r.stderr });
  for (const id of [2, 3]) {
    t.match(summary[0] || '', new RegExp(`worker ${id} \\(did not re-register within \\d+ s; killed\\)`), `... worker ${id}, and why`);
  }
  // Each worker left out is announced before the world re-forms without it, and not again as a loss later.
  const lines = r.stderr.split('\n');
  const reformed = lines.findIndex((l) => /the world re-formed with 2 rank\(s\)/.test(l));
  for (const id of [2, 3]) {
    const left = lines.findIndex((l) => new RegExp(`^hora run: worker ${id} .*leaving it out: killing it`).test(l));
    t.ok(left >= 0 && left < reformed, `worker ${id} is left out before the world re-forms`);
    t.notMatch(r.stderr, new RegExp(`worker ${id} was killed by SIGKILL; the job goes on without it`), `worker ${id}'s end is not reported as a new loss`);
  }
}

t.test("a host cut off for good: the survivors finish, and hora run exits 0 though it killed the cut-off workers", async (t) => {
  spawnSync('ip', ['-n', `${NAME}1`, 'link', 'set', 'eth0', 'up']);
  const steps = 60;
  const [h0, h1] = c.hosts;
  let cut = false;
  // HORA_ELASTIC_SETTLE_S at its default: the survivors re-form 4 + 10 s after the cut and need well
  // under a second for their last steps, while ssh to the cut-off host is killed 2 s after the worker.
  const r = await runElastic(['run', '-np', '4'], steps, { HORA_ELASTIC_SETTLE_S: '10' }, 50, () => { cut = cutLink(t); });
  t.ok(cut, 'the link was cut mid-training');
  checkFinished(t, r, 2, { steps, expected: expectedChecksum(steps) });
  t.same(r.results.map((x) => x.workerId).sort(), [0, 1], `the workers of ${h0} finish`);
  checkLeftOut(t, r);
  const deadline = Date.now() + 40000;
  while (workersIn(1).length > 0 && Date.now() < deadline) await sleep(500);
  t.same(workersIn(1), [], `no worker is left on ${h1}, although its link is still down`);
  t.same(r.leaked, [], 'no /dev/shm/hora-* segment is left');
});

t.test('a stopped host (every process in it SIGSTOPped): the survivors finish, and hora run exits 0', async (t) => {
  spawnSync('ip', ['-n', `${NAME}1`, 'link', 'set', 'eth0', 'up']);
  const steps = 60;
  const [h0, h1] = c.hosts;
  let stopped;
  const r = await runElastic(['run', '-np', '4'], steps, { HORA_ELASTIC_SETTLE_S: '4', HORA_TIMEOUT_S: '3' }, 50, () => {
    // Its sshd and sessions too: the launcher's kill cannot reach the workers, as on a frozen machine.
    stopped = c.processes(1).map((p) => p.pid);
    for (const pid of stopped) {
      try { process.kill(pid, 'SIGSTOP'); } catch { /* exited meanwhile */ }
    }
  });
  t.ok(stopped && stopped.length > 0, `${h1} was stopped mid-training`);
  checkFinished(t, r, 2, { steps, expected: expectedChecksum(steps) });
  t.same(r.results.map((x) => x.workerId).sort(), [0, 1], `the workers of ${h0} finish`);
  checkLeftOut(t, r);
  // Let the host run again: its workers find the launcher gone and leave.
  for (const p of c.processes(1)) {
    try { process.kill(p.pid, 'SIGCONT'); } catch { /* exited meanwhile */ }
  }
  const deadline = Date.now() + 40000;
  while (workersIn(1).length > 0 && Date.now() < deadline) await sleep(500);
  t.same(workersIn(1), [], `no worker is left on ${h1} once it runs again`);
  t.same(r.leaked, [], 'no /dev/shm/hora-* segment is left');
});
