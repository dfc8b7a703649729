'use strict';
// Runs a worker script under `hora run -np N` and collects what each rank reported.
//
// Workers write one JSON line per rank to $<resultVar>/rank-<rank>.json; runJob returns those reports
// with the launcher's exit code and output, so tests can assert on behaviour of every rank.
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { startProcess, spawnAndCollect, timeoutNote } = require('./spawn');

const ROOT = path.join(__dirname, '..', '..');
const HORA = path.join(ROOT, 'dist', 'ts', 'cli', 'main.js');
const NODE = process.execPath;

/**
 * Resolves {code, signal, stdout, stderr, reports (by rank, null where none), seconds, resultDir}.
 * env is added to the environment of the launcher (and so of the workers); timeoutMs kills the launcher;
 * cwd is where the launcher (and so the workers) start, the checkout's root unless given.
 */
// Runs `node args...` in cwd and collects its output; SIGKILLs it after timeoutMs so a hang fails the test.
function runProcess(args, env, timeoutMs = 60000, cwd = ROOT) {
  return spawnAndCollect(NODE, args, { env, cwd, timeoutMs });
}

async function runJob(np, script, { env = {}, args = [], timeoutMs = 120000, resultVar = 'HORA_TEST_RESULT_DIR', launcherArgs = [], cwd = ROOT } = {}) {
  const resultDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-test-'));
  const started = process.hrtime.bigint();
  const run = await runProcess([HORA, 'run', '-np', String(np), ...launcherArgs, '--', NODE, script, ...args],
    { ...process.env, HORA_TIMEOUT_S: '60', ...env, [resultVar]: resultDir }, timeoutMs, cwd);
  const reports = [];
  for (let r = 0; r < np; r++) {
    const file = path.join(resultDir, `rank-${r}.json`);
    reports.push(fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : null);
  }
  fs.rmSync(resultDir, { recursive: true, force: true });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return { ...run, reports, seconds };
}

/** The last `n` characters of a job's output, for assertion messages. */
function tail(job, n = 3000) {
  const text = `${job.stdout}\n--- stderr ---\n${job.stderr}${timeoutNote(job)}`;
  return text.length > n ? text.slice(-n) : text;
}

/**
 * Runs scenario `name` of a worker built on runScenarios (support/worker-util.js) on np ranks and returns
 * each rank's result, after asserting that the job exited 0 (unless exitZero is false) and that no rank threw.
 */
async function runScenario(t, np, worker, name, env = {}, { exitZero = true } = {}) {
  const job = await runJob(np, worker, { args: [name], env, timeoutMs: 240000 });
  if (exitZero) t.equal(job.code, 0, `${name}: hora run exits 0`, { output: tail(job) });
  const results = job.reports.map((r) => (r ? r.result : null));
  for (const [rank, r] of results.entries()) {
    if (exitZero || r) t.notOk(r && r.threw, `${name}: rank ${rank} did not throw`, { threw: r && r.threw });
  }
  return { results, job };
}

/** A loopback port that was free a moment ago (for a rendezvous started without the launcher). */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** This environment without any launcher's variables (hora's, Open MPI's, Slurm's, torchrun's), plus extra. */
function cleanEnv(extra) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(HORA_|OMPI_|PMI_|SLURM_)/.test(k) || ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'].includes(k)) continue;
    env[k] = v;
  }
  return { ...env, ...extra };
}

/** The hora shared-memory segments in /dev/shm now (names only). */
function shmLeft() {
  try {
    return fs.readdirSync('/dev/shm').filter((n) => n.startsWith('hora-'));
  } catch {
    return [];
  }
}

/** Live processes whose command line names `script` and whose environment holds `marker` (NAME=value). */
function processesAlive(script, marker) {
  let out = '';
  try {
    out = require('node:child_process').execFileSync('pgrep', ['-f', script], { encoding: 'utf8' });
  } catch {
    return [];
  }
  return out.split('\n').filter(Boolean).map(Number).filter((pid) => {
    try {
      return fs.readFileSync(`/proc/${pid}/environ`, 'utf8').includes(marker);
    } catch {
      return false;
    }
  });
}

module.exports = { startProcess, spawnAndCollect, runJob, runProcess, runScenario, tail, freePort, cleanEnv, shmLeft, processesAlive, ROOT, HORA, NODE };
