'use strict';
// Runs inside every rank of a `hora run` job for test/checkpoint.test.js: a hora.elastic.State made with
// {checkpoint: {dir: CKPT_DIR, everySteps: 3}} under hora.elastic.run, STEPS steps of an allreduce whose
// global batch does not depend on the world size. With CKPT_KILL_AT=k, rank 0 SIGKILLs the launcher and
// every worker (by PID) in the middle of step k, after its allreduce and before its commit. CKPT_STEPS and
// CKPT_STEP_MS (a pause after each commit) set the length of the run.
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

const fs = require('node:fs');

const N = 5, SAMPLES = 60, STEPS = Number(process.env.CKPT_STEPS || 12);
const STEP_MS = Number(process.env.CKPT_STEP_MS || 0);

function blockRange(count, size, block) {
  const base = Math.floor(count / size), extra = count % size;
  const start = (b) => b * base + Math.min(b, extra);
  return [start(block), start(block + 1)];
}

/** Samples [b, e) of step s summed into N slots: integers, so any split sums to the same float64 values. */
function contribution(s, b, e) {
  const out = new Float64Array(N);
  for (let j = b; j < e; j++) out[j % N] += (s * 7 + j) % 13;
  return out;
}

/** Each step halves w and adds the step's sum: a step missed or applied twice changes the end. */
function update(w, sum) {
  for (let i = 0; i < N; i++) w[i] = w[i] * 0.5 + sum[i];
}

function reference() {
  const w = new Float64Array(N);
  for (let s = 0; s < STEPS; s++) update(w, contribution(s, 0, SAMPLES));
  return w;
}

async function main() {
  await hora.init();
  const killAt = process.env.CKPT_KILL_AT ? Number(process.env.CKPT_KILL_AT) : -1;
  const state = new hora.elastic.State({ step: 0, w: new Float64Array(N) }, { checkpoint: { dir: process.env.CKPT_DIR, everySteps: 3, keep: 2 } });
  let startedAt = -1;
  await hora.elastic.run(state, async (s) => {
    if (startedAt < 0) startedAt = s.step;
    const pids = await hora.allgatherObject(process.pid);
    while (s.step < STEPS) {
      const [b, e] = blockRange(SAMPLES, hora.size(), hora.rank());
      const sum = await hora.allreduce(contribution(s.step, b, e), { op: 'sum' });
      if (s.step === killAt && hora.rank() === 0) {
        process.kill(process.ppid, 'SIGKILL');
        for (const pid of pids) if (pid !== process.pid) process.kill(pid, 'SIGKILL');
        process.kill(process.pid, 'SIGKILL');
      }
      update(s.w, sum);
      s.step++;
      await s.commit();
      // CKPT_LEAVE_AT=k: rank 2 of the first world SIGKILLs itself after commit k; the launcher starts a
      // worker in its place, which joins at a later commit (CKPT_LEAVE_MARK: so that it does not leave too).
      if (s.step === Number(process.env.CKPT_LEAVE_AT) && hora.rank() === 2 && !fs.existsSync(process.env.CKPT_LEAVE_MARK)) {
        fs.writeFileSync(process.env.CKPT_LEAVE_MARK, String(process.pid));
        process.kill(process.pid, 'SIGKILL');
      }
      if (STEP_MS) await new Promise((resolve) => setTimeout(resolve, STEP_MS));
    }
  });
  const ref = reference();
  report(hora.rank(), { startedAt, step: state.step, same: Buffer.from(state.w.buffer).equals(Buffer.from(ref.buffer)), w: Array.from(state.w), ref: Array.from(ref) });
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
