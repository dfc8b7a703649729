'use strict';
// The commit() part of bench/elastic-recovery.js: what ElasticState.commit() costs next to a training step
// for a ~5.8M-parameter MLP (784-2048-2048-10, Adam: weights and two moments, 17.5M floats to copy).
//
//   hora run -np 2 --min-np 1 node bench/elastic-commit-worker.js BACKEND STEPS
//
// BACKEND cpu or wasm (@tensorflow/tfjs-backend-wasm). Inside hora.elastic.run each rank trains STEPS
// steps of a batch of 32 random samples and commits after every 10th, the ranks starting each commit
// together; rank 0 prints
// `result {params, stepMs: [...], commitMs: [...]}` (each step's and each commit's wall time).
const tf = require('@tensorflow/tfjs');
const hora = require('../dist/ts/index.js');
const { DistributedOptimizer, ElasticState } = require('../dist/adapters/tfjs/index.js');

const [backend, stepsText] = process.argv.slice(2);
const STEPS = Number(stepsText);
const LAYERS = [784, 2048, 2048, 10];
const BATCH = 32;
const COMMIT_EVERY = 10;

(async () => {
  if (backend === 'wasm') {
    require('@tensorflow/tfjs-backend-wasm');
  } else if (backend !== 'cpu') {
    throw new Error(`backend must be cpu or wasm; received ${backend}`);
  }
  if (!(await tf.setBackend(backend))) throw new Error(`tfjs could not start its ${backend} backend`);
  await hora.init();
  const model = tf.sequential();
  LAYERS.slice(1).forEach((units, i) => {
    const last = i === LAYERS.length - 2;
    model.add(tf.layers.dense({ units, activation: last ? 'softmax' : 'relu', ...(i === 0 ? { inputShape: [LAYERS[0]] } : {}) }));
  });
  model.compile({ optimizer: new DistributedOptimizer(tf.train.adam(0.0001)), loss: 'categoricalCrossentropy' });
  const x = tf.randomUniform([BATCH, LAYERS[0]]);
  const y = tf.oneHot(tf.randomUniform([BATCH], 0, LAYERS[3], 'int32'), LAYERS[3]).toFloat();
  const state = new ElasticState(model, null, { step: 0 });
  const stepMs = [];
  const commitMs = [];
  await hora.elastic.run(state, async (s) => {
    while (s.step < STEPS) {
      let t = performance.now();
      await model.trainOnBatch(x, y);
      stepMs.push(performance.now() - t);
      s.step++;
      if (s.step % COMMIT_EVERY === 0) {
        // commit() ends with an allreduce, which would also time the wait for a slower peer to finish its
        // step (a wait the next step's gradient allreduce has anyway): start the ranks together first.
        await hora.allreduce(new Int32Array(1), { name: 'bench barrier' });
        t = performance.now();
        await s.commit();
        commitMs.push(performance.now() - t);
      }
    }
  });
  if (hora.rank() === 0) {
    console.log(`result ${JSON.stringify({ backend, params: model.countParams(), layers: LAYERS, batch: BATCH, stepMs, commitMs })}`);
  }
  await hora.shutdown();
})().catch((e) => {
  console.error(`commit worker failed: ${e.code || ''} ${e.stack}`);
  process.exit(1);
});
