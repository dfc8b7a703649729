'use strict';
// Worker for the monitoring tests (stall.test.js, dashboard.test.js).
//   HORA_TEST_MODE=stall      three warm-up allreduces, then every rank but the last submits
//                             allreduce 'grad/dense/kernel' at once, the last after HORA_TEST_STALL_MS
//   HORA_TEST_MODE=steps      training-like steps (some compute, one allreduce inside each step) until
//                             the file HORA_TEST_STOP_FILE exists on any rank, or 60 s have passed
//   HORA_TEST_MODE=pipeline   the same steps, each also reported as a batch of a pipeline stage of
//                             2 stages x size/2 replicas (rank = replica x 2 + stage): stage 0 busy 3/4
//                             of each batch, stage 1 1/4; weights 1000 x (stage + 1) bytes, peak stash
//                             100 x (rank + 1) bytes
//   HORA_TEST_MODE=messages   the same steps, each also passing a 16 KiB message from rank to rank + 1
//                             (in a ring), awaited as a pipeline stage awaits its input
const fs = require('node:fs');
const path = require('node:path');
const hora = require('../../dist/ts/index.js');
const { steps } = require('../../dist/ts/stats.js');
const { reportPipelineBatch } = require('../../dist/adapters/tfjs/pipeline/stats.js');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function busy(ms) {
  const until = Date.now() + ms;
  let x = 0;
  while (Date.now() < until) x += Math.sqrt(x + 1);
  return x;
}

async function stall() {
  const rank = hora.rank();
  for (let i = 0; i < 3; i++) await hora.allreduce(new Float32Array(16).fill(rank), { name: 'warmup' });
  if (rank === hora.size() - 1) await sleep(Number(process.env.HORA_TEST_STALL_MS || 4000));
  const out = await hora.allreduce(new Float32Array(1024).fill(rank), { name: 'grad/dense/kernel', op: 'sum' });
  return { sum: out[0] };
}

async function trainSteps(pipeline, messages = false) {
  const stopFile = process.env.HORA_TEST_STOP_FILE;
  const deadline = Date.now() + 60000;
  const grad = new Float32Array(64 * 1024);
  let n = 0;
  for (;;) {
    steps.begin();
    busy(4);
    if (messages) {
      const rank = hora.rank(), size = hora.size();
      const sent = hora.send(new Float32Array(4096).fill(rank), { to: (rank + 1) % size, tag: 3 });
      await steps.wait(Promise.all([sent, hora.recv(new Float32Array(4096), { from: (rank + size - 1) % size, tag: 3 })]));
    }
    grad[0] = (stopFile && fs.existsSync(stopFile)) || Date.now() > deadline ? 1 : 0;
    // 'max' makes the stop flag everyone's: all ranks leave after the same step.
    const out = await steps.wait(hora.allreduce(grad, { name: 'grad/w', op: 'max' }));
    steps.end();
    if (pipeline) {
      const rank = hora.rank(), stage = rank % 2;
      reportPipelineBatch({
        stage, stages: 2, replica: (rank - stage) / 2, replicas: hora.size() / 2, busyMs: stage === 0 ? 7.5 : 2.5, wallMs: 10,
        weightBytes: 1000 * (stage + 1), peakStashBytes: 100 * (rank + 1),
      });
    }
    n++;
    if (out[0] === 1) break;
  }
  return { steps: n };
}

(async () => {
  await hora.init();
  const mode = process.env.HORA_TEST_MODE;
  const report = mode === 'stall' ? await stall() : await trainSteps(mode === 'pipeline', mode === 'messages');
  const dir = process.env.HORA_TEST_RESULT_DIR;
  if (dir) fs.writeFileSync(path.join(dir, `rank-${hora.rank()}.json`), JSON.stringify(report));
  await hora.shutdown();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
