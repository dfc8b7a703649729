'use strict';
// How long an elastic hora job takes to train again after losing a worker, against restarting the job
// from a checkpoint (torchrun's way), and what ElasticState.commit() costs in steady state.
//
//   node bench/elastic-recovery.js [--part recovery|commit|all] [--rounds 5] [--cases shm2,shm3,hosts4]
//                                  [--commit-steps 51] [--backends cpu,wasm] [--refill 0|1] [--model small|large]
//
// Recovery (bench/elastic-recovery-worker.js, a tfjs MLP on the cpu backend: small, 64-256-256-10, or with
// --model large the 5.8M-parameter 784-2048-2048-10 of the commit part, whose state the sync then carries). Recovery time = from
// the SIGKILL of one worker (not rank 0) to the first training step completed at the smaller size, both
// stamped with Date.now() on this machine (the simulated hosts are namespaces of this machine: one clock).
//   elastic: `hora run -np N --min-np N-1`, ElasticState committed every 10 steps; the survivors roll back
//            to the last commit in memory and train on. The launcher refills the lost slot; the refilled
//            worker exits at once, so the world stays at N-1 (see the worker). With --refill 1 it stays:
//            it loads tfjs while the survivors recover, and the world grows back to N at a later commit.
//   restart: `hora run -np N` (no --min-np), rank 0 writes a checkpoint file every 10 steps; the kill ends
//            the job, and as soon as its launcher has exited `hora run -np N-1` starts from the checkpoint.
// Cases: shm2 (2 -> 1) and shm3 (3 -> 2) on this machine (shared memory); hosts4 (4 -> 3), one worker on
// each of 4 simulated hosts (test/cluster/cluster.sh: network namespaces with sshd, cluster `hrc`, subnet
// 57, taken down at the end whatever happens), launched over ssh. Each round runs both ways on the same
// kill step, in alternating order; the kill step moves from round to round so the steps since the last
// commit vary. Steps lost = steps completed before the kill that were trained again after it; "caught up" =
// from the kill to the first step past the last one completed before it.
//
// Commit (bench/elastic-commit-worker.js): a ~5.8M-parameter MLP 784-2048-2048-10 with Adam in an
// ElasticState, 2 ranks (`hora run -np 2 --min-np 1`); times every commit() and every training step.
//
// Writes docs/bench-results/elastic-recovery-<date>/ (every round as JSON, summary.txt) and prints the
// summary. Jobs run without any HORA_* variable (hora's defaults). Every child runs in its own process
// group with a deadline; all are killed on exit, and workers still alive after a round are SIGKILLed.
const fs = require('node:fs');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');

const ROOT = path.join(__dirname, '..');
const HORA = path.join(ROOT, 'dist', 'ts', 'cli', 'main.js');
const NODE = process.execPath;
const WORKER = path.join(__dirname, 'elastic-recovery-worker.js');
const COMMIT_WORKER = path.join(__dirname, 'elastic-commit-worker.js');
const CLUSTER_NAME = 'hrc';
const CLUSTER_SUBNET = 57;
let JOB_TIMEOUT_MS = 120_000;
let STEPS_AFTER_KILL = 25;
const REFILL_STEPS_AFTER_KILL = 60;
// The first step a worker is killed at (it moves by up to 9 over the rounds); lower for the large model,
// whose steps take seconds.
let FIRST_KILL_STEP = 25;

function parseArgs(argv) {
  const opts = { part: 'all', refill: false, model: 'small', rounds: 5, cases: ['shm2', 'shm3', 'hosts4'], commitSteps: 51, backends: ['cpu', 'wasm'] };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === '--part' && ['recovery', 'commit', 'all'].includes(value)) opts.part = value;
    else if (flag === '--rounds' && Number(value) >= 1) opts.rounds = Number(value);
    else if (flag === '--cases') opts.cases = value.split(',');
    else if (flag === '--commit-steps' && Number(value) >= 11) opts.commitSteps = Number(value);
    else if (flag === '--backends') opts.backends = value.split(',');
    else if (flag === '--refill' && ['0', '1'].includes(value)) opts.refill = value === '1';
    else if (flag === '--model' && ['small', 'large'].includes(value)) opts.model = value;
    else throw new Error(`unknown flag or bad value: ${flag} ${value}`);
  }
  for (const c of opts.cases) if (!CASES[c]) throw new Error(`--cases: unknown case ${c} (shm2, shm3, hosts4)`);
  return opts;
}

const CASES = {
  shm2: { np: 2, hosts: false },
  shm3: { np: 3, hosts: false },
  hosts4: { np: 4, hosts: true },
};

// --- children: each in its own process group, with a deadline --------------------------------------

const live = new Set();

/** This environment without HORA_* variables: every job runs with hora's defaults. */
function defaultEnv() {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HORA_')));
}

function killGroup(child, signal) {
  try {
    process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/**
 * Runs `node args...` in a new process group; onLine(line, child) sees each line of its stdout and stderr.
 * Resolves {code, signal, output} when it exits; past timeoutMs its group gets SIGTERM, 15 s later SIGKILL.
 */
function runChild(args, { onLine = () => undefined, timeoutMs = JOB_TIMEOUT_MS, env = defaultEnv() } = {}) {
  return new Promise((resolve) => {
    const child = spawn(NODE, args, { cwd: ROOT, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    live.add(child);
    const output = [];
    const lines = (stream) => {
      let rest = '';
      stream.on('data', (d) => {
        rest += d;
        const parts = rest.split('\n');
        rest = parts.pop();
        for (const line of parts) {
          output.push(line);
          onLine(line, child);
        }
      });
    };
    lines(child.stdout);
    lines(child.stderr);
    let timedOut = false;
    const term = setTimeout(() => {
      timedOut = true;
      killGroup(child, 'SIGTERM');
    }, timeoutMs);
    // The launcher forwards SIGTERM to its workers and escalates after its grace period: give it that.
    const kill = setTimeout(() => killGroup(child, 'SIGKILL'), timeoutMs + 15000);
    child.on('close', (code, signal) => {
      clearTimeout(term);
      clearTimeout(kill);
      // The launcher is gone; anything of its group still running is left over: end it.
      killGroup(child, 'SIGKILL');
      live.delete(child);
      resolve({ code, signal, timedOut, output });
    });
  });
}

function killEverything() {
  for (const child of live) {
    killGroup(child, 'SIGTERM');
    killGroup(child, 'SIGKILL');
  }
}

// --- the simulated cluster ---------------------------------------------------------------------------

let cluster = null;

async function clusterUp(k) {
  const { up } = require('../test/cluster/cluster');
  cluster = await up(k, { name: CLUSTER_NAME, subnet: CLUSTER_SUBNET });
  return cluster;
}

function clusterDownSync() {
  if (!cluster) return;
  spawnSync('bash', [path.join(ROOT, 'test', 'cluster', 'cluster.sh'), 'down', '--name', CLUSTER_NAME], { stdio: 'ignore', timeout: 60000 });
  cluster = null;
}

// --- one job -----------------------------------------------------------------------------------------

const STEP_LINE = /^\[[^\]]*\] step (\d+) (\d+) (\d+)$/;
const PID_LINE = /^\[[^\]]*\] pid (\d+) (\d+)$/;

function launchArgs(c, np) {
  if (!c.hosts) return ['-np', String(np)];
  const spec = cluster.hosts.map((h) => `${h}:1`).join(',');
  return ['-np', String(np), '-H', spec, '--ssh-opts', `-F ${cluster.sshConfig}`, '--iface', cluster.bridgeAddr];
}

/**
 * One job of the worker; when rank 0 reports step killAt (or later) at size np, SIGKILLs worker 1.
 * Resolves with the job's exit, its steps [{t, size, step}], and the kill's time and pid (if it killed).
 */
async function job(c, np, workerArgs, { minNp, killAt } = {}) {
  const pids = new Map();
  const steps = [];
  let kill = null;
  const args = [HORA, 'run', ...launchArgs(c, np), ...(minNp ? ['--min-np', String(minNp)] : []), '--', NODE, WORKER, ...workerArgs];
  const run = await runChild(args, {
    onLine(line) {
      let m = PID_LINE.exec(line);
      if (m) pids.set(Number(m[1]), Number(m[2]));
      m = STEP_LINE.exec(line);
      if (!m) return;
      const s = { t: Number(m[1]), size: Number(m[2]), step: Number(m[3]) };
      steps.push(s);
      if (killAt !== undefined && !kill && s.size === np && s.step >= killAt && pids.has(1)) {
        const pid = pids.get(1);
        kill = { t: Date.now(), pid, atStep: s.step };
        process.kill(pid, 'SIGKILL');
      }
    },
  });
  return { ...run, steps, kill, pids: [...pids.values()] };
}

/**
 * Recovery time and steps lost. `before` holds the steps of the world that lost a worker, `after` those of
 * the one that goes on (the same job's list for elastic: the old world's steps are those before the first
 * step at the smaller size; with a refill the world may grow back to np later).
 */
function measure(kill, np, before, after) {
  if (!kill) return { error: 'no kill happened' };
  const i = after.findIndex((s) => s.t >= kill.t && s.size < np);
  if (i < 0) return { error: 'no step at the smaller size' };
  const first = after[i];
  const old = before === after ? before.slice(0, i) : before;
  const lastBefore = old.filter((s) => s.size === np).reduce((m, s) => Math.max(m, s.step), 0);
  const caughtUp = after.slice(i).find((s) => s.step > lastBefore);
  return { recoveryMs: first.t - kill.t, caughtUpMs: caughtUp ? caughtUp.t - kill.t : NaN,
    stepsLost: lastBefore - (first.step - 1), resumedAt: first.step, lastBefore, killAtStep: kill.atStep };
}

/** The world sizes rank 0 trained at, in order, as [size, steps] runs. */
function worlds(steps) {
  const out = [];
  for (const s of steps) {
    if (out.length && out[out.length - 1][0] === s.size) out[out.length - 1][1]++;
    else out.push([s.size, 1]);
  }
  return out;
}

/** Median interval between rank 0's consecutive steps at `size`, in ms. */
function stepMs(steps, size) {
  const t = steps.filter((s) => s.size === size);
  const d = [];
  for (let i = 1; i < t.length; i++) if (t[i].step === t[i - 1].step + 1) d.push(t[i].t - t[i - 1].t);
  return median(d);
}

async function elasticRound(c, killAt, refill) {
  const np = c.np;
  // A refilled worker needs a few seconds to start and register; one that registers after the training
  // function returned is never let go (it waits in hora.init() until the deadline here): train long
  // enough after the kill for it to join.
  const steps = killAt + (refill ? REFILL_STEPS_AFTER_KILL : STEPS_AFTER_KILL);
  // The worker's NP argument: workers with a higher id (refills) exit at once. Past any id: refills stay.
  const keep = refill ? 1_000_000 : np;
  const r = await job(c, np, ['elastic', String(keep), String(steps)], { minNp: np - 1, killAt });
  const m = measure(r.kill, np, r.steps, r.steps);
  const tail = r.output.filter((l) => !STEP_LINE.test(l)).slice(-15);
  return { way: 'elastic', code: r.code, ...m, worlds: worlds(r.steps), stepMsBefore: stepMs(r.steps, np), stepMsAfter: stepMs(r.steps, np - 1),
    lastStep: r.steps.length ? r.steps[r.steps.length - 1].step : 0, pids: r.pids, log: m.error || r.code !== 0 ? tail : undefined };
}

async function restartRound(c, killAt, checkpoint) {
  const np = c.np;
  const steps = killAt + STEPS_AFTER_KILL;
  fs.rmSync(checkpoint, { force: true });
  const first = await job(c, np, ['restart', String(np), String(steps), checkpoint], { killAt });
  const second = await job(c, np - 1, ['restart', String(np - 1), String(steps), checkpoint]);
  fs.rmSync(checkpoint, { force: true });
  fs.rmSync(`${checkpoint}.tmp`, { force: true });
  const m = measure(first.kill, np, first.steps, second.steps);
  const tail = [...first.output, '--- restarted job ---', ...second.output].filter((l) => !STEP_LINE.test(l)).slice(-20);
  return { way: 'restart', code: first.code, restartCode: second.code, ...m, stepMsBefore: stepMs(first.steps, np),
    stepMsAfter: stepMs(second.steps, np - 1), lastStep: second.steps.length ? second.steps[second.steps.length - 1].step : 0,
    pids: [...first.pids, ...second.pids], log: m.error || second.code !== 0 ? tail : undefined };
}

// --- statistics and output ---------------------------------------------------------------------------

function median(xs) {
  const v = xs.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const h = Math.floor(v.length / 2);
  return v.length % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

const fmt = (x, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : '-');

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function shmSegments() {
  try {
    return fs.readdirSync('/dev/shm').filter((n) => n.startsWith('hora-'));
  } catch {
    return [];
  }
}

async function recoveryPart(opts, out, say) {
  const rows = {};
  for (const name of opts.cases) {
    const c = CASES[name];
    if (c.hosts) {
      const why = require('../test/cluster/cluster').canRun();
      if (why) {
        say(`# ${name}: skipped: ${why}`);
        continue;
      }
      await clusterUp(c.np);
    }
    try {
      rows[name] = [];
      for (let round = 0; round < opts.rounds; round++) {
        const killAt = FIRST_KILL_STEP + ((round * 3) % 10);
        const checkpoint = path.join(out, `checkpoint-${name}.bin`);
        const order = round % 2 === 0 ? ['elastic', 'restart'] : ['restart', 'elastic'];
        const res = {};
        for (const way of order) res[way] = way === 'elastic' ? await elasticRound(c, killAt, opts.refill) : await restartRound(c, killAt, checkpoint);
        const stray = [...res.elastic.pids, ...res.restart.pids].filter(alive);
        for (const pid of stray) process.kill(pid, 'SIGKILL');
        const row = { round, killAt, order, ...res, ratio: res.restart.recoveryMs / res.elastic.recoveryMs, strayWorkers: stray.length };
        rows[name].push(row);
        fs.writeFileSync(path.join(out, `${name}-round-${round}.json`), `${JSON.stringify(row, null, 2)}\n`);
        say(`# ${name} round ${round}: kill at step ${killAt}; elastic ${fmt(res.elastic.recoveryMs)} ms (lost ${res.elastic.stepsLost}), ` +
          `restart ${fmt(res.restart.recoveryMs)} ms (lost ${res.restart.stepsLost})${res.elastic.error ? ` elastic: ${res.elastic.error}` : ''}` +
          `${res.restart.error ? ` restart: ${res.restart.error}` : ''}${stray.length ? `; ${stray.length} stray worker(s) killed` : ''}`);
      }
    } finally {
      if (c.hosts) clusterDownSync();
    }
  }
  const lines = ['', '## Recovery: SIGKILL of one worker to the first step completed at the smaller size (ms)', '',
    '| case | rounds | hora elastic median (min-max) | restart from checkpoint median (min-max) | median of restart/elastic | steps lost elastic / restart (median) | caught up elastic / restart (median) | step ms before / after, elastic |',
    '|---|---:|---:|---:|---:|---:|---:|---:|'];
  for (const [name, rs] of Object.entries(rows)) {
    const c = CASES[name];
    const e = rs.map((r) => r.elastic.recoveryMs);
    const s = rs.map((r) => r.restart.recoveryMs);
    const range = (xs) => `${fmt(Math.min(...xs.filter(Number.isFinite)))}-${fmt(Math.max(...xs.filter(Number.isFinite)))}`;
    lines.push(`| ${name} ${c.np} -> ${c.np - 1}${c.hosts ? ', simulated hosts' : ', shared memory'} | ${rs.length} | ${fmt(median(e))} (${range(e)}) | ` +
      `${fmt(median(s))} (${range(s)}) | ${fmt(median(rs.map((r) => r.ratio)), 2)}x | ${fmt(median(rs.map((r) => r.elastic.stepsLost)), 1)} / ` +
      `${fmt(median(rs.map((r) => r.restart.stepsLost)), 1)} | ${fmt(median(rs.map((r) => r.elastic.caughtUpMs)))} / ` +
      `${fmt(median(rs.map((r) => r.restart.caughtUpMs)))} | ${fmt(median(rs.map((r) => r.elastic.stepMsBefore)))} / ${fmt(median(rs.map((r) => r.elastic.stepMsAfter)))} |`);
  }
  for (const [name, rs] of Object.entries(rows)) {
    lines.push('', `${name} per round: kill step, elastic ms (steps lost), restart ms (steps lost), restart/elastic`);
    for (const r of rs) {
      lines.push(`  round ${r.round} (${r.order.join(' first, ')} second): step ${r.killAt}, ${fmt(r.elastic.recoveryMs)} (${r.elastic.stepsLost}), ` +
        `${fmt(r.restart.recoveryMs)} (${r.restart.stepsLost}), ${fmt(r.ratio, 2)}x`);
    }
  }
  return lines;
}

async function commitPart(opts, out, say) {
  const lines = ['', '## commit() of a 5.8M-parameter MLP (784-2048-2048-10, Adam), 2 ranks, committing every 10 steps', '',
    '| backend | steps | step ms (median) | commit ms (median, first commit left out) | commit / 10 steps |', '|---|---:|---:|---:|---:|'];
  for (const backend of opts.backends) {
    let result = null;
    const r = await runChild([HORA, 'run', '-np', '2', '--min-np', '1', '--', NODE, COMMIT_WORKER, backend, String(opts.commitSteps)], {
      timeoutMs: 600_000,
      onLine(line) {
        const m = /^\[0\] result (.*)$/.exec(line);
        if (m) result = JSON.parse(m[1]);
      },
    });
    if (!result) {
      say(`# commit, ${backend}: no result (exit ${r.code ?? r.signal}): ${r.output.slice(-6).join(' | ')}`);
      lines.push(`| ${backend} | - | - | - | failed: ${r.output.slice(-1)[0] || ''} |`);
      continue;
    }
    fs.writeFileSync(path.join(out, `commit-${backend}.json`), `${JSON.stringify(result, null, 2)}\n`);
    const step = median(result.stepMs);
    const commit = median(result.commitMs.slice(1));
    say(`# commit, ${backend}: ${result.params} parameters, step ${fmt(step)} ms, commit ${fmt(commit, 1)} ms (all: ${result.commitMs.map((x) => fmt(x, 1)).join(', ')})`);
    lines.push(`| ${backend} | ${result.stepMs.length} | ${fmt(step)} | ${fmt(commit, 1)} | ${fmt((100 * commit) / (10 * step), 2)}% |`);
  }
  return lines;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.model === 'large') {
    // The workers read it (every job inherits this environment, less HORA_*).
    process.env.ELASTIC_BENCH_MODEL = 'large';
    FIRST_KILL_STEP = 12;
    STEPS_AFTER_KILL = 5;
    JOB_TIMEOUT_MS = 400_000;
  }
  const stamp = new Date().toISOString().slice(0, 16).replace(/:/g, '') + 'Z';
  const variant = `${opts.refill ? '-refill' : ''}${opts.model === 'large' ? '-large' : ''}`;
  const out = path.join(ROOT, 'docs', 'bench-results', `elastic-recovery${variant}-${stamp}`);
  fs.mkdirSync(out, { recursive: true });
  const summary = [];
  const say = (line) => {
    console.log(line);
    summary.push(line);
  };
  const shmBefore = new Set(shmSegments());
  say(`# elastic recovery benchmark${opts.refill ? ' (refilled workers stay)' : ''}, ${require('node:os').cpus().length} CPUs, Node ${process.version}, ` +
    `${new Date().toISOString().slice(0, 16)}Z, load ${fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`);
  let lines = [];
  if (opts.part !== 'commit') lines = lines.concat(await recoveryPart(opts, out, say));
  if (opts.part !== 'recovery') lines = lines.concat(await commitPart(opts, out, say));
  const leaked = shmSegments().filter((n) => !shmBefore.has(n));
  lines.push('', `/dev/shm/hora-* segments left by the runs: ${leaked.length}`);
  for (const l of lines) say(l);
  fs.writeFileSync(path.join(out, 'summary.txt'), `${summary.join('\n')}\n`);
  console.log(`\nwritten to ${path.relative(ROOT, out)}/`);
}

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    killEverything();
    clusterDownSync();
    process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
  });
}
process.on('exit', () => {
  killEverything();
  clusterDownSync();
});

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exitCode = 1;
});
