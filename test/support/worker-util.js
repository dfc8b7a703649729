// Helpers for test workers: reporting a rank's result, and a seeded PRNG so every process builds the
// same data (Math.random would give each rank different numbers).
const fs = require('node:fs');
const path = require('node:path');

/** Writes this rank's result to $HORA_TEST_RESULT_DIR/rank-N.json, or prints it. */
function report(rank, data) {
  const line = JSON.stringify({ rank, ...data });
  if (process.env.HORA_TEST_RESULT_DIR) fs.writeFileSync(path.join(process.env.HORA_TEST_RESULT_DIR, `rank-${rank}.json`), line + '\n');
  else process.stdout.write(line + '\n');
}

/** mulberry32: uniform in [0, 1). */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A thrown error as plain data a worker can report. */
function describeError(e) {
  return {
    ok: false, isHoraError: e instanceof require('../../dist/ts/index.js').HoraError, code: e && e.code, message: e && e.message, rank: e && e.rank, peer: e && e.peer,
    ...(e && e.osCode !== undefined ? { osCode: e.osCode, path: e.path } : {}),
  };
}

/** What a call did: {sync} when it threw synchronously, else the settled outcome of its Work. */
async function outcome(call) {
  let work;
  try {
    work = call();
  } catch (e) {
    return { sync: true, ...describeError(e) };
  }
  try {
    const value = await work;
    return { ok: true, value: value === undefined ? null : Array.from(value, String) };
  } catch (e) {
    return describeError(e);
  }
}

/**
 * A worker's main: joins the job, runs the scenario named by argv[2] as fn(rank, size), reports its result
 * (or what it threw) and shuts down, except in the scenarios listed in `noShutdown` (a rank that is killed).
 */
function runScenarios(hora, scenarios, { noShutdown = [] } = {}) {
  async function main() {
    const scenario = process.argv[2];
    await hora.init();
    const r = hora.rank(), p = hora.size();
    let result;
    try {
      result = await scenarios[scenario](r, p);
    } catch (e) {
      result = { threw: describeError(e) };
    }
    report(r, { scenario, result });
    if (!noShutdown.includes(scenario)) await hora.shutdown();
  }
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}

// V8 sizes its young generation as a program goes. In a loop of small collectives it grew once (8 to 16 MiB
// semi-spaces) a third of the way in, and the resident size stepped up by that much, once, which a check
// of memory growth over the loop would count as a leak. Short-lived objects that survive a scavenge or two
// make V8 grow it at once: call this before the first sample.
function growYoungGeneration() {
  let keep = [];
  for (let i = 0; i < 2000000; i++) {
    keep.push({ i });
    if (keep.length === 100000) keep = [];
  }
}

/**
 * For a scenario that loses a rank: every rank passes a barrier, then the last rank SIGKILLs itself (it
 * never returns); the others go on to the call whose failure the test checks.
 */
async function lastRankDies(hora, r, p) {
  await hora.barrier();
  if (r === p - 1) {
    process.kill(process.pid, 'SIGKILL');
    await new Promise(() => {});
  }
}

module.exports = { report, prng, outcome, describeError, runScenarios, growYoungGeneration, lastRankDies };
