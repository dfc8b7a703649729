'use strict';
// model.fit inside hora.elastic.run through ElasticState.fit and ElasticCallback. The global batch is the
// same whatever the world size (strided shards, per-rank batch = 12 / size), so a world that shrinks goes
// on with the same batches. ELASTIC_KILL_AT "WORKER:EPOCH:BATCH": that worker SIGKILLs itself after that
// many batches of that epoch (ELASTIC_KILL_SIGNAL, e.g. SIGSTOP, sends that signal instead); workers with HORA_WORKER_ID >= ELASTIC_NO_REFILL exit at once (no refill).
// Each worker prints "result {json}": its weights' bytes as base64, and the batches it ran.
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { DistributedOptimizer, ElasticState, ElasticCallback, shard } = require('../../dist/adapters/tfjs/index.js');
const { prng } = require('../support/worker-util');

const G = 12;
const BATCHES = 10;
const EPOCHS = 3;
const workerId = Number(process.env.HORA_WORKER_ID);
const [killWorker, killEpoch, killBatch] = (process.env.ELASTIC_KILL_AT || '-1:-1:-1').split(':').map(Number);
const signal = process.env.ELASTIC_KILL_SIGNAL || 'SIGKILL';

(async () => {
  if (process.env.ELASTIC_NO_REFILL !== undefined && workerId >= Number(process.env.ELASTIC_NO_REFILL)) return;
  await hora.init();
  const rand = prng(5);
  const n = G * BATCHES;
  const xAll = tf.tensor2d(Float32Array.from({ length: n * 6 }, () => rand() * 2 - 1), [n, 6]);
  const yAll = tf.tensor2d(Float32Array.from({ length: n * 3 }, () => rand()), [n, 3]);
  const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [6], units: 8, activation: 'tanh' }), tf.layers.dense({ units: 3 })] });
  const init = prng(17);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => init() - 0.5), w.shape)));
  model.compile({ optimizer: new DistributedOptimizer(tf.train.adam(0.01)), loss: 'meanSquaredError' });
  const state = new ElasticState(model);
  let executed = 0;
  let resets = 0;
  state.onReset(() => { resets++; });
  const result = await hora.elastic.run(state, async (s) => {
    const size = hora.size();
    const { x, y } = shard(xAll, yAll, { mode: 'strided' });
    const count = new tf.CustomCallback({
      onBatchEnd: () => {
        executed++;
        if (workerId === killWorker && s.epoch === killEpoch && s.batch === killBatch) {
          console.log(`signal ${signal} t=${Date.now()}`);
          process.kill(process.pid, signal);
        }
      },
    });
    try {
      await s.fit(x, y, { batchSize: G / size, epochs: EPOCHS, shuffle: false, verbose: 0, callbacks: [new ElasticCallback(s, { commitEvery: 3 }), count] });
    } finally {
      tf.dispose([x, y]);
    }
    return { size, rank: hora.rank() };
  });
  const bytes = Float32Array.from(model.getWeights().flatMap((w) => Array.from(w.dataSync())));
  const weights = Buffer.from(bytes.buffer).toString('base64');
  console.log(`result ${JSON.stringify({ workerId, ...result, executed, resets, epoch: state.epoch, iterations: model.optimizer.iterations, weights })}`);
  await hora.shutdown();
})().catch((e) => {
  console.error(`worker ${workerId} failed: ${e.code || ''} ${e.stack}`);
  process.exit(1);
});
