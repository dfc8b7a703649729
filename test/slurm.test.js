'use strict';
// hora under a real Slurm: munged, slurmctld and one slurmd per simulated host (test/cluster/slurm.js: two
// nodes, hslurmc0 and hslurmc1, of two CPUs each), and jobs run the way docs/cluster.md tells users to run
// them: srun with no hora launcher, sbatch of a script running `hora run` inside the allocation, mpirun
// inside an allocation, a task killed, a step cancelled, and an elastic job inside an allocation. Every
// job's secret is exported in the job's environment by the shell that runs srun, never on a command line.
const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const { canRunSlurm, upSlurm, mpirunVersion, SlurmPrerequisiteError } = require('./cluster/slurm');

const reason = canRunSlurm();
if (reason) {
  t.plan(0, reason);
  return;
}

const { HORA, NODE } = require('./support/hora-job');
const ELASTIC_WORKER = path.join(__dirname, 'workers', 'elastic-worker.js');
const WORKER = path.join(__dirname, 'workers', 'cluster-worker.js');
const LOOP_WORKER = path.join(__dirname, 'workers', 'slurm-loop-worker.js');
// What a batch script or a user's shell does before srun: one random secret per job, in the environment.
const SECRET = 'export HORA_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d " \\n")';
const PEER_LOST_BOUND_MS = 5000; // docs/failures.md: a killed rank is seen within 5 s

let slurm;
let cannotStart; // why the cluster could not start on this machine (SlurmPrerequisiteError): every test skips
t.before(async () => {
  try {
    slurm = await upSlurm({ nodes: 2, cpus: 2, name: 'hslurmc', subnet: 42 });
  } catch (e) {
    if (!(e instanceof SlurmPrerequisiteError)) throw e;
    cannotStart = e.message;
    t.comment(`skipped: ${cannotStart}`);
    return;
  }
  t.comment(`${slurm.version}; ${mpirunVersion() || 'no mpirun'}`);
});
t.teardown(() => slurm?.down());

/** t.test that skips, saying why, when the cluster could not start here. */
function test(name, options, fn) {
  if (fn === undefined) [options, fn] = [{}, options];
  t.test(name, options, async (t) => (cannotStart ? t.skip(cannotStart) : fn(t)));
}

/** Runs a shell script on node 0 (the node a user's shell, or sbatch's script, would be on). */
function shell(script, { timeoutMs = 60000, env = {} } = {}) {
  return slurm.start(0, 'bash', ['-c', script], { timeoutMs, env: slurm.env(env) });
}

/**
 * Submits `script` with sbatch `args` from node 0; resolves {jobId, output() (its file so far), done}, where
 * done resolves {jobId, state, exitCode (of the batch script), output} once the job ended (polling
 * scontrol: sbatch --wait polls every few seconds), or it was cancelled after timeoutMs.
 */
async function submit(t, script, args, { timeoutMs = 90000, env = {} } = {}) {
  const dir = fs.mkdtempSync(path.join(slurm.dir, 'job-'));
  const file = path.join(dir, 'job.sh');
  fs.writeFileSync(file, `#!/bin/bash\nset -euo pipefail\n${script}\n`, { mode: 0o755 });
  const r = await slurm.run(0, 'sbatch', ['--parsable', `--output=${dir}/out`, ...args, file], { env: slurm.env(env), cwd: dir });
  t.equal(r.code, 0, `sbatch ${args.join(' ')}: ${r.output}`);
  const jobId = r.stdout.trim();
  const output = () => (fs.existsSync(`${dir}/out`) ? fs.readFileSync(`${dir}/out`, 'utf8') : '');
  const done = (async () => {
    const by = Date.now() + timeoutMs;
    for (;;) {
      const q = await slurm.run(0, 'scontrol', ['-o', 'show', 'job', jobId]);
      const state = /JobState=(\S+)/.exec(q.stdout)?.[1] ?? q.output;
      const exit = /ExitCode=(\d+):(\d+)/.exec(q.stdout);
      if (!/^(PENDING|RUNNING|CONFIGURING|COMPLETING)$/.test(state)) return { jobId, state, exitCode: exit ? Number(exit[1]) : null, output: output() };
      if (Date.now() > by) {
        await slurm.run(0, 'scancel', [jobId]);
        return { jobId, state: `${state} after ${timeoutMs / 1000} s (cancelled by the test)`, exitCode: null, output: output() };
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  return { jobId, output, done };
}

/** submit(), then the job's end. */
async function sbatch(t, script, args, opts) {
  return (await submit(t, script, args, opts)).done;
}

/** Waits until nothing of a job is left on either node (leftovers() all empty), at most 10 s; resolves what is left. */
async function settle(horaJob) {
  let left;
  for (let i = 0; i < 40; i++) {
    left = await leftovers(horaJob);
    if (Object.values(left).every((v) => v.length === 0)) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  return left;
}
/** Whether process `pid` runs (a zombie does not). */
function running(pid) {
  try {
    return !/^State:\s*Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false; // gone
  }
}

/** Command lines on either node that hold a secret: the variable's name, or 64 hex digits (32 random bytes). */
function secretsOnCommandLines() {
  return [0, 1].flatMap((i) => slurm.leftovers(i)).map((p) => p.cmdline).filter((c) => /HORA_SECRET|[0-9a-f]{64}/i.test(c));
}

const NOTHING_LEFT = { 'node 0 processes': [], 'node 0 listening': [], 'node 1 processes': [], 'node 1 listening': [], segments: [] };

/** The "HORA_REPORT {json}" lines of cluster-worker.js, indexed by rank. */
function reports(output) {
  const out = [];
  for (const m of output.matchAll(/^HORA_REPORT (.*)$/gm)) {
    const r = JSON.parse(m[1]);
    out[r.rank] = r;
  }
  return out;
}

/** Lines "TAG {json}" of the output, parsed. */
function tagged(output, tag) {
  return [...output.matchAll(new RegExp(`^${tag} (.*)$`, 'gm'))].map((m) => JSON.parse(m[1]));
}

/** Every rank of a fixed job as `layout` (tasks per node) puts them: rank, local and cross values, host. */
function checkLayout(t, reps, layout) {
  const size = layout.reduce((a, b) => a + b, 0);
  t.equal(reps.filter(Boolean).length, size, `all ${size} ranks reported`);
  let rank = 0;
  layout.forEach((tasks, node) => {
    for (let local = 0; local < tasks; local++, rank++) {
      t.match(reps[rank], {
        rank, size, localRank: local, localSize: tasks, crossRank: node, crossSize: layout.length, wrong: 0, max: size - 1,
        hostId: new RegExp(`^${slurm.nodes[node]}(/|$)`), // hora run names a remote host's id by its name alone
      }, `rank ${rank}: task ${local} of ${tasks} on ${slurm.nodes[node]}`);
    }
  });
}

/** What is left on either node after a job: processes other than the cluster's daemons, listening ports, the segments of hora job `horaJob` if given. */
async function leftovers(horaJob) {
  const out = {};
  for (const i of [0, 1]) {
    out[`node ${i} processes`] = slurm.leftovers(i).map((p) => `${p.pid} ${p.cmdline}`);
    const ss = await slurm.run(i, 'ss', ['-Htlnp']);
    out[`node ${i} listening`] = ss.stdout.split('\n').filter((l) => l.trim() && !/"(slurmd|slurmctld|sshd)"/.test(l));
  }
  // A rank unlinks its segment once its peers have mapped it; one that is left is named hora-<job>-<rank>
  // (other tests on this machine make segments of their own: only this job's are looked for).
  out.segments = horaJob === undefined ? [] : fs.readdirSync('/dev/shm').filter((n) => n.startsWith(`hora-${horaJob}`));
  return out;
}

test('srun -N2 --ntasks-per-node=2 with no hora launcher', async (t) => {
  const job = shell(`${SECRET}\nexec srun -N2 --ntasks-per-node=2 ${NODE} ${WORKER}`, { env: { HORA_DEBUG: 'INFO' } });
  const r = await job.done;
  t.equal(r.code, 0, `srun exited 0\n${r.output}`);
  const reps = reports(r.stdout);
  checkLayout(t, reps, [2, 2]);
  for (const rep of reps.filter(Boolean)) {
    t.match(rep, { source: 'slurm', rendezvous: new RegExp(`^${slurm.nodes[0]}:\\d+$`), hostedRendezvous: rep.rank === 0, secretDerived: false }, `rank ${rep.rank} read Slurm's variables`);
  }
  // The topology: one peer over shared memory (the other task of its node), the two of the other node over TCP.
  const connected = [...r.stderr.matchAll(/connected to (\d+) peers in [\d.]+ ms \((\d+) over shared memory/g)].map((m) => [Number(m[1]), Number(m[2])]);
  t.same(connected, [[3, 1], [3, 1], [3, 1], [3, 1]], 'every rank: 3 peers, 1 of them over shared memory');
});

test('srun -N2 -n3: tasks per node 2,1', async (t) => {
  const r = await shell(`${SECRET}\nexec srun -N2 -n3 ${NODE} ${WORKER}`).done;
  t.equal(r.code, 0, `srun exited 0\n${r.output}`);
  checkLayout(t, reports(r.stdout), [2, 1]);
});

test('a task killed with SIGKILL: the others fail with ERR_PEER_LOST, srun ends non-zero', async (t) => {
  const job = shell(`${SECRET}\nexec srun -N2 --ntasks-per-node=2 ${NODE} ${LOOP_WORKER}`);
  t.ok(await job.waitFor(() => tagged(job.stdout, 'HORA_READY').length === 4, 30000), `every task is running\n${job.output}`);
  const victim = tagged(job.stdout, 'HORA_READY').find((x) => x.rank === 3);
  t.equal(victim.host, slurm.nodes[1], 'rank 3 runs on node 1');
  const killedAt = Date.now();
  process.kill(victim.pid, 'SIGKILL');
  const r = await job.done;
  t.not(r.code, 0, 'srun exits non-zero');
  const lost = tagged(r.stdout, 'HORA_LOST');
  t.same(lost.map((x) => x.rank).sort(), [0, 1, 2], 'ranks 0, 1 and 2 saw the loss');
  for (const x of lost) {
    t.equal(x.code, 'ERR_PEER_LOST', `rank ${x.rank}: ERR_PEER_LOST (${x.message})`);
    t.ok(x.at - killedAt < PEER_LOST_BOUND_MS, `rank ${x.rank} knew within ${PEER_LOST_BOUND_MS} ms (${x.at - killedAt} ms)`);
  }
});

test('scancel of a running step: every task exits within 10 s, nothing is left', async (t) => {
  const job = shell(`${SECRET}\nexec srun -N2 --ntasks-per-node=2 ${NODE} ${LOOP_WORKER}`);
  t.ok(await job.waitFor(() => tagged(job.stdout, 'HORA_READY').length === 4, 30000), `every task is running\n${job.output}`);
  const steps = await slurm.run(0, 'squeue', ['-h', '-s', '-o', '%i']);
  const step = steps.stdout.trim().split('\n')[0];
  t.match(step, /^\d+\.0$/, `one step runs (${steps.output.trim()})`);
  const ready = tagged(job.stdout, 'HORA_READY');
  const pids = ready.map((x) => x.pid);
  t.same(secretsOnCommandLines(), [], 'no command line on either node holds the secret');
  const cancelledAt = Date.now();
  const cancel = await slurm.run(0, 'scancel', [step]);
  t.equal(cancel.code, 0, `scancel ${step}: ${cancel.output}`);
  const alive = () => pids.filter(running);
  while (alive().length > 0 && Date.now() - cancelledAt < 10000) await new Promise((r) => setTimeout(r, 50));
  t.same(alive(), [], `every task exited within 10 s (${Date.now() - cancelledAt} ms)`);
  const r = await job.done;
  t.not(r.code, 0, 'srun exits non-zero');
  // slurmstepd may still be reaping: give the nodes a moment to settle, then nothing may be left.
  t.same(await settle(ready[0].job), NOTHING_LEFT, 'no process, port or segment is left');
});

test('sbatch of hora run -np 4: the hosts come from the allocation, node 1\'s workers start with srun', async (t) => {
  const r = await sbatch(t, `${NODE} ${HORA} run -np 4 ${NODE} ${WORKER}`, ['-N2', '--ntasks-per-node=2']);
  t.match(r, { state: 'COMPLETED', exitCode: 0 }, `the batch job succeeded\n${r.output}`);
  const reps = reports(r.output.replace(/^\[\d+@\S+\] /gm, ''));
  checkLayout(t, reps, [2, 2]);
  for (const rep of reps.filter(Boolean)) {
    t.match(rep, { source: 'hora', secretDerived: false }, `rank ${rep.rank} joined hora run's job`);
    // A worker srun started is a task of its own step on that node; hora run starts node 0's itself.
    t.match(rep.slurm, rep.rank < 2 ? { step: undefined } : { step: /^\d+$/, stepNodes: slurm.nodes[1], job: r.jobId }, `rank ${rep.rank}: ${rep.rank < 2 ? 'no step' : 'a step on node 1'}`);
  }
});

test('sbatch -N2 -n3 of hora run: the allocation\'s uneven tasks per node (2,1) are the slots', async (t) => {
  const r = await sbatch(t, `${NODE} ${HORA} run ${NODE} ${WORKER}`, ['-N2', '-n3']);
  t.match(r, { state: 'COMPLETED', exitCode: 0 }, `the batch job succeeded\n${r.output}`);
  checkLayout(t, reports(r.output.replace(/^\[\d+@\S+\] /gm, '')), [2, 1]);
});

test('sbatch -N2 alone: one task per node, as Slurm says; -np beyond the allocation is refused, naming it', async (t) => {
  const r = await sbatch(t, `${NODE} ${HORA} run -np 3 ${NODE} ${WORKER}`, ['-N2']);
  t.match(r, { state: 'FAILED', exitCode: 2 }, `hora run refused the job\n${r.output}`);
  t.match(r.output, /-np "3" is invalid: expected at most 2, the slots given by the Slurm allocation \(SLURM_JOB_NODELIST=hslurmc\[0-1\], SLURM_TASKS_PER_NODE=1\(x2\)\)/);
});

test('mpirun inside an allocation (Open MPI), as docs/cluster.md describes', { skip: mpirunVersion() ? false : 'no mpirun (apt-get install openmpi-bin)' }, async (t) => {
  const r = await sbatch(t, `${SECRET}\nmpirun --allow-run-as-root ${NODE} ${WORKER}`, ['-N2', '--ntasks-per-node=2']);
  t.match(r, { state: 'COMPLETED', exitCode: 0 }, `the batch job succeeded\n${r.output}`);
  const reps = reports(r.output);
  checkLayout(t, reps, [2, 2]);
  for (const rep of reps.filter(Boolean)) {
    t.match(rep, { source: 'ompi', rendezvous: new RegExp(`^${slurm.nodes[0]}:\\d+$`), secretDerived: false }, `rank ${rep.rank} met at the first node of SLURM_JOB_NODELIST`);
  }
});

test('elastic inside an allocation: a discovery script reads it; a worker SIGKILLed, the job goes on', async (t) => {
  const { EXPECTED, STEPS } = require('./support/elastic-job');
  // The allocation's nodes, two slots each, as a user's script would list them.
  const discover = path.join(slurm.dir, 'discover.sh');
  fs.writeFileSync(discover, '#!/bin/bash\nscontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/$/:2/"\n', { mode: 0o755 });
  const r = await sbatch(t, `${NODE} ${HORA} run --min-np 2 --max-np 4 --host-discovery-script ${discover} ${NODE} ${ELASTIC_WORKER}`, ['-N2', '--ntasks-per-node=2'], {
    env: { HORA_ELASTIC_SETTLE_S: '2', ELASTIC_STEPS: String(STEPS), ELASTIC_KILL: '3:20:SIGKILL' },
  });
  t.match(r, { state: 'COMPLETED', exitCode: 0 }, `the batch job succeeded\n${r.output}`);
  t.match(r.output, /\[3@\S+\] signal SIGKILL/, 'worker 3 killed itself at step 20');
  const results = r.output.split('\n').map((l) => /^\[(\d+)(?:@\S+)?\] result (.*)$/.exec(l)).filter(Boolean).map((m) => JSON.parse(m[2]));
  t.ok(results.length >= 3, `the survivors finished (${results.length})`);
  t.notOk(results.some((x) => x.workerId === 3), 'worker 3 did not');
  for (const x of results) {
    t.match(x, { step: STEPS, checksum: EXPECTED }, `worker ${x.workerId} trained every step, bit-identical to a run without failures`);
  }
  t.match(r.output, /the world re-formed with \d rank\(s\)/);
});

// test/cluster/worker.js under hora run: reports its pid, then exits 3 (HORA_TEST_FAIL_RANK) or stays (HORA_TEST_HANG).
const HANG_WORKER = path.join(__dirname, 'cluster', 'worker.js');

test('hora run in a batch job, a worker on node 1 fails: the others are stopped on both nodes, the job ends with its status', async (t) => {
  const started = Date.now();
  const r = await sbatch(t, `${NODE} ${HORA} run -np 4 --grace 2 ${NODE} ${HANG_WORKER}`, ['-N2', '--ntasks-per-node=2'], {
    env: { HORA_TEST_FAIL_RANK: '2', HORA_TEST_HANG: '1' },
  });
  t.match(r, { state: 'FAILED', exitCode: 3 }, `the batch script exits 3, rank 2's status\n${r.output}`);
  t.match(r.output, new RegExp(`^hora run: rank 2 on ${slurm.nodes[1]} exited with code 3; stopping the other workers$`, 'm'), 'the worker\'s own failure, not srun\'s');
  t.ok(Date.now() - started < 30000, `within 30 s (${Date.now() - started} ms)`);
  t.same(await settle(), NOTHING_LEFT, 'no worker, srun step or port is left');
});

test('srun cannot start a worker (a node the allocation lacks): hora run says so and stops the others', async (t) => {
  // As if the allocation had a third node: srun refuses a step there.
  const nodes = `${slurm.nodes[0].replace(/\d+$/, '')}[0-2]`;
  const r = await sbatch(t, `SLURM_JOB_NODELIST='${nodes}' SLURM_TASKS_PER_NODE='1(x3)' ${NODE} ${HORA} run -np 3 --grace 1 ${NODE} ${HANG_WORKER}`, ['-N2', '--ntasks-per-node=2']);
  t.match(r, { state: 'FAILED', exitCode: 1 }, `hora run failed\n${r.output}`);
  t.match(r.output, /^hora run: rank 2 on \S+2: srun onto \S+2 failed \(exit 1\): srun: error: .*; stopping the other workers$/m, 'srun\'s own error, named');
  t.same(await settle(), NOTHING_LEFT, 'no worker, srun step or port is left');
});

test('scancel of a batch job running hora run: every worker exits within 10 s, nothing is left', async (t) => {
  const job = await submit(t, `${NODE} ${HORA} run -np 4 ${NODE} ${HANG_WORKER}`, ['-N2', '--ntasks-per-node=2'], { env: { HORA_TEST_HANG: '1' } });
  const pids = () => [...job.output().matchAll(/^\[\d+@\S+\] \{"rank":\d+.*"pid":(\d+)/gm)].map((m) => Number(m[1]));
  const by = Date.now() + 30000;
  while (pids().length < 4 && Date.now() < by) await new Promise((r) => setTimeout(r, 100));
  t.equal(pids().length, 4, `every worker is running\n${job.output()}`);
  t.same(secretsOnCommandLines(), [], 'no command line on either node (srun\'s, the workers\') holds the secret');
  const workers = pids();
  const cancelledAt = Date.now();
  const cancel = await slurm.run(0, 'scancel', [job.jobId]);
  t.equal(cancel.code, 0, `scancel ${job.jobId}: ${cancel.output}`);
  const alive = () => workers.filter(running);
  while (alive().length > 0 && Date.now() - cancelledAt < 10000) await new Promise((r) => setTimeout(r, 50));
  t.same(alive(), [], `every worker exited within 10 s (${Date.now() - cancelledAt} ms)`);
  t.match(await job.done, { state: 'CANCELLED' });
  t.same(await settle(), NOTHING_LEFT, 'no process, port or segment is left');
});
