'use strict';
// Runs `hora run` jobs of test/workers/elastic-worker.js for the elastic tests, and checks their ends.
// The worker's training is deterministic whatever the world size, so every run must end with the
// weights of a run without failures, bit for bit (EXPECTED).
const crypto = require('node:crypto');
const path = require('node:path');
const { shmLeft, processesAlive, spawnAndCollect } = require('./hora-job');

const HORA = path.join(__dirname, '..', '..', 'dist', 'ts', 'cli', 'main.js');
const WORKER = path.join(__dirname, '..', 'workers', 'elastic-worker.js');
const NODE = process.execPath;
const STEPS = 60;

// The weights after `steps` steps without hora: what every run must end with.
function expectedChecksum(steps = STEPS) {
  let w = new Float64Array(1024);
  for (let step = 0; step < steps; step++) {
    const g = new Float64Array(w.length);
    for (let i = 0; i < w.length; i++) g[i] = (w[i] * 31 + step + i) % 1000003;
    w = g;
  }
  return crypto.createHash('sha256').update(Buffer.from(w.buffer)).digest('hex');
}
const EXPECTED = expectedChecksum();

const workersAlive = (tag) => processesAlive(WORKER, `ELASTIC_TAG=${tag}`);

let runs = 0;
/**
 * Runs `hora ...args`; resolves with {code, signal, stdout, stderr, results (the workers' "result" lines),
 * orphans, leaked}. onLine(line, child) sees each line of the launcher's stdout and stderr as it comes.
 */
async function hora(args, env = {}, { timeoutMs = 90000, onLine } = {}) {
  const tag = `${process.pid}-${++runs}`;
  const shmBefore = new Set(shmLeft());
  const lines = (text, handle) => {
    if (onLine) for (const line of text.split('\n')) if (line) onLine(line, handle.child);
  };
  const { code, signal, stdout, stderr, timedOut } = await spawnAndCollect(NODE, [HORA, ...args], {
    env: { ...process.env, HORA_ELASTIC_SETTLE_S: '2', ELASTIC_STEPS: String(STEPS), ELASTIC_TAG: tag, ...env },
    timeoutMs, onStdout: lines, onStderr: lines,
  });
  await new Promise((r) => setTimeout(r, 300));
  const results = stdout.split('\n').map((l) => /^\[(\d+)(?:@\S+)?\] result (.*)$/.exec(l)).filter(Boolean).map((m) => JSON.parse(m[2]));
  return { code, signal, stdout, stderr, timedOut, results, orphans: workersAlive(tag), leaked: shmLeft().filter((n) => !shmBefore.has(n)) };
}

function checkClean(t, r) {
  t.same(r.orphans, [], 'no worker process is left');
  t.same(r.leaked, [], 'no /dev/shm/hora-* segment is left');
}

function checkFinished(t, r, survivors, { steps = STEPS, expected = EXPECTED } = {}) {
  t.equal(r.code, 0, `the job succeeds\n${r.stderr}`);
  t.equal(r.results.length, survivors, `${survivors} workers finish`);
  for (const x of r.results) {
    t.equal(x.step, steps, `worker ${x.workerId} trained every step`);
    t.equal(x.checksum, expected, `worker ${x.workerId} ends bit-identical to a run without failures`);
  }
}

module.exports = { HORA, WORKER, NODE, STEPS, EXPECTED, expectedChecksum, workersAlive, hora, checkClean, checkFinished };
