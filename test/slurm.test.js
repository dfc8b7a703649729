'use strict';
// hora under a real Slurm: munged, slurmctld and one slurmd per simulated host (test/cluster/slurm.js: two
// nodes, hslurm0 and hslurm1, of two CPUs each), and jobs run the way docs/cluster.md tells users to run
// them: srun with no hora launcher, sbatch of a script running `hora run` inside the allocation, mpirun
// inside an allocation, a task killed, a step cancelled, and an elastic job inside an allocation. Every
// job's secret is exported in the job's environment by the shell that runs srun, never on a command line.
const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const { canRunSlurm, upSlurm, mpirunVersion } = require('./cluster/slurm');

const reason = canRunSlurm();
if (reason) {
  t.plan(0, reason);
  return;
}

const NODE = process.execPath;
const WORKER = path.join(__dirname, 'workers', 'cluster-worker.js');
const LOOP_WORKER = path.join(__dirname, 'workers', 'slurm-loop-worker.js');
// What a batch script or a user's shell does before srun: one random secret per job, in the environment.
const SECRET = 'export HORA_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d " \\n")';
const PEER_LOST_BOUND_MS = 5000; // docs/failures.md: a killed rank is seen within 5 s

let slurm;
t.before(async () => {
  slurm = await upSlurm({ nodes: 2, cpus: 2, name: 'hslurm', subnet: 42 });
  t.comment(`${slurm.version}; ${mpirunVersion() || 'no mpirun'}`);
});
t.teardown(() => slurm?.down());

/** Runs a shell script on node 0 (the node a user's shell, or sbatch's script, would be on). */
function shell(script, { timeoutMs = 60000, env = {} } = {}) {
  return slurm.start(0, 'bash', ['-c', script], { timeoutMs, env: slurm.env(env) });
}

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
        hostId: new RegExp(`^hslurm${node}/`),
      }, `rank ${rank}: task ${local} of ${tasks} on hslurm${node}`);
    }
  });
}

/** What is left on either node after a job: processes other than the cluster's daemons, listening ports, the job's segments. */
async function leftovers(horaJob) {
  const out = {};
  for (const i of [0, 1]) {
    out[`hslurm${i} processes`] = slurm.leftovers(i).map((p) => `${p.pid} ${p.cmdline}`);
    const ss = await slurm.run(i, 'ss', ['-Htlnp']);
    out[`hslurm${i} listening`] = ss.stdout.split('\n').filter((l) => l.trim() && !/"(slurmd|slurmctld|sshd)"/.test(l));
  }
  // A rank unlinks its segment once its peers have mapped it; one that is left is named hora-<job>-<rank>.
  out.segments = fs.readdirSync('/dev/shm').filter((n) => n.startsWith(`hora-${horaJob}`));
  return out;
}

t.test('srun -N2 --ntasks-per-node=2 with no hora launcher', async (t) => {
  const job = shell(`${SECRET}\nexec srun -N2 --ntasks-per-node=2 ${NODE} ${WORKER}`, { env: { HORA_DEBUG: 'INFO' } });
  const r = await job.done;
  t.equal(r.code, 0, `srun exited 0\n${r.output}`);
  const reps = reports(r.stdout);
  checkLayout(t, reps, [2, 2]);
  for (const rep of reps.filter(Boolean)) {
    t.match(rep, { source: 'slurm', rendezvous: /^hslurm0:\d+$/, hostedRendezvous: rep.rank === 0, secretDerived: false }, `rank ${rep.rank} read Slurm's variables`);
  }
  // The topology: one peer over shared memory (the other task of its node), the two of the other node over TCP.
  const connected = [...r.stderr.matchAll(/connected to (\d+) peers in [\d.]+ ms \((\d+) over shared memory/g)].map((m) => [Number(m[1]), Number(m[2])]);
  t.same(connected, [[3, 1], [3, 1], [3, 1], [3, 1]], 'every rank: 3 peers, 1 of them over shared memory');
});

t.test('srun -N2 -n3: tasks per node 2,1', async (t) => {
  const r = await shell(`${SECRET}\nexec srun -N2 -n3 ${NODE} ${WORKER}`).done;
  t.equal(r.code, 0, `srun exited 0\n${r.output}`);
  checkLayout(t, reports(r.stdout), [2, 1]);
});

t.test('a task killed with SIGKILL: the others fail with ERR_PEER_LOST, srun ends non-zero', async (t) => {
  const job = shell(`${SECRET}\nexec srun -N2 --ntasks-per-node=2 ${NODE} ${LOOP_WORKER}`);
  t.ok(await job.waitFor(() => tagged(job.stdout, 'HORA_READY').length === 4, 30000), `every task is running\n${job.output}`);
  const victim = tagged(job.stdout, 'HORA_READY').find((x) => x.rank === 3);
  t.equal(victim.host, 'hslurm1', 'rank 3 runs on hslurm1');
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

t.test('scancel of a running step: every task exits within 10 s, nothing is left', async (t) => {
  const job = shell(`${SECRET}\nexec srun -N2 --ntasks-per-node=2 ${NODE} ${LOOP_WORKER}`);
  t.ok(await job.waitFor(() => tagged(job.stdout, 'HORA_READY').length === 4, 30000), `every task is running\n${job.output}`);
  const steps = await slurm.run(0, 'squeue', ['-h', '-s', '-o', '%i']);
  const step = steps.stdout.trim().split('\n')[0];
  t.match(step, /^\d+\.0$/, `one step runs (${steps.output.trim()})`);
  const ready = tagged(job.stdout, 'HORA_READY');
  const pids = ready.map((x) => x.pid);
  const cancelledAt = Date.now();
  const cancel = await slurm.run(0, 'scancel', [step]);
  t.equal(cancel.code, 0, `scancel ${step}: ${cancel.output}`);
  const alive = () => pids.filter((pid) => fs.existsSync(`/proc/${pid}`) && !/^State:\s*Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8')));
  while (alive().length > 0 && Date.now() - cancelledAt < 10000) await new Promise((r) => setTimeout(r, 50));
  t.same(alive(), [], `every task exited within 10 s (${Date.now() - cancelledAt} ms)`);
  const r = await job.done;
  t.not(r.code, 0, 'srun exits non-zero');
  // slurmstepd may still be reaping: give the nodes a moment to settle, then nothing may be left.
  let left;
  for (let i = 0; i < 40; i++) {
    left = await leftovers(ready[0].job);
    if (Object.values(left).every((v) => v.length === 0)) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  t.same(left, { 'hslurm0 processes': [], 'hslurm0 listening': [], 'hslurm1 processes': [], 'hslurm1 listening': [], segments: [] }, 'no process, port or segment is left');
});
