'use strict';
// An elastic fit (hora.elastic.run, ElasticState.fit, ElasticCallback commitEvery 3) with a sharded
// DistributedOptimizer (ZERO_SHARD: none, optimizer, gradients, weights) and ElasticState's checkpoint option
// (ZE_CKPT dir, ZE_EVERY commits). The global batch is the same at every world size (strided shards,
// per-rank batch 12 / size). ELASTIC_KILL_AT "WORKER:EPOCH:BATCH": that worker SIGKILLs itself there;
// workers with HORA_WORKER_ID >= ELASTIC_NO_REFILL exit at once; a refill (id >= 3) waits ZE_JOIN_DELAY_MS
// before it starts, and ranks of a world smaller than 3 wait ZE_BATCH_DELAY_MS per batch, so that the refill
// joins at a later commit (the in-memory reshard) rather than in the world re-formed after the loss.
// ZE_OPT: adam (default), momentum or sgd. ZE_EXIT_AT "EPOCH:BATCH": every worker SIGKILLs itself there (a job
// that dies whole, to be started again from the checkpoint).
// Each worker prints "result {json}": its weights as base64, batches run, optimizer iterations, reshards.
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { DistributedOptimizer, ElasticState, ElasticCallback, shard } = require('../../dist/adapters/tfjs/index.js');
const { prng } = require('../support/worker-util');

const G = 12;
const BATCHES = 10;
const EPOCHS = 3;
const workerId = Number(process.env.HORA_WORKER_ID);
const [killWorker, killEpoch, killBatch] = (process.env.ELASTIC_KILL_AT || '-1:-1:-1').split(':').map(Number);
const [exitEpoch, exitBatch] = (process.env.ZE_EXIT_AT || '-1:-1').split(':').map(Number);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

(async () => {
  if (process.env.ELASTIC_NO_REFILL !== undefined && workerId >= Number(process.env.ELASTIC_NO_REFILL)) return;
  if (workerId >= 3) await sleep(Number(process.env.ZE_JOIN_DELAY_MS || 0));
  await hora.init();
  const rand = prng(5);
  const n = G * BATCHES;
  const xAll = tf.tensor2d(Float32Array.from({ length: n * 6 }, () => rand() * 2 - 1), [n, 6]);
  const yAll = tf.tensor2d(Float32Array.from({ length: n * 3 }, () => rand()), [n, 3]);
  // 6*7+7 and 7*3+3 parameters: neither divides by 2 or 3.
  const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [6], units: 7, activation: 'tanh' }), tf.layers.dense({ units: 3 })] });
  const init = prng(17);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => init() - 0.5), w.shape)));
  const shardMode = process.env.ZERO_SHARD || 'none';
  const inner = { momentum: () => tf.train.momentum(0.05, 0.9), sgd: () => tf.train.sgd(0.05) }[process.env.ZE_OPT]?.() ?? tf.train.adam(0.01);
  // Stage 3 shards the model's weights as it is built (each rank keeps its block of the values set above).
  model.compile({ optimizer: new DistributedOptimizer(inner, shardMode === 'weights' ? { shard: shardMode, model } : { shard: shardMode }), loss: 'meanSquaredError' });
  const options = process.env.ZE_CKPT ? { checkpoint: { dir: process.env.ZE_CKPT, everySteps: Number(process.env.ZE_EVERY || 1) } } : undefined;
  const state = new ElasticState(model, null, {}, options);
  let executed = 0;
  let resets = 0;
  // Where each reset left the state (after its sync), and how many batches had run by then.
  const resetPoints = [];
  state.onReset(() => {
    resets++;
    resetPoints.push({ executed, epoch: state.epoch, batch: state.batch });
  });
  const result = await hora.elastic.run(state, async (s) => {
    const size = hora.size();
    const { x, y } = shard(xAll, yAll, { mode: 'strided' });
    // Before ElasticCallback: a batch is counted before its commit, which may throw (a join re-forms the world there).
    const count = new tf.CustomCallback({
      onBatchEnd: async () => {
        executed++;
        // ElasticCallback, after this, sets s.batch to the batches done: this one is batch s.batch + 1.
        if (workerId === killWorker && s.epoch === killEpoch && s.batch + 1 === killBatch) process.kill(process.pid, 'SIGKILL');
        if (s.epoch === exitEpoch && s.batch + 1 === exitBatch) process.kill(process.pid, 'SIGKILL');
        if (size < 3) await sleep(Number(process.env.ZE_BATCH_DELAY_MS || 0));
      },
    });
    try {
      await s.fit(x, y, { batchSize: G / size, epochs: EPOCHS, shuffle: false, verbose: 0, callbacks: [count, new ElasticCallback(s, { commitEvery: 3 })] });
    } finally {
      tf.dispose([x, y]);
    }
    // Inside run: with shard 'weights' each read is an allgather, and collectives run only inside it.
    const bytes = Float32Array.from(model.getWeights().flatMap((w) => Array.from(w.dataSync())));
    return { size, rank: hora.rank(), weights: Buffer.from(bytes.buffer).toString('base64') };
  });
  console.log(`result ${JSON.stringify({ workerId, ...result, executed, resets, resetPoints, epoch: state.epoch, iterations: model.optimizer.iterations, reshards: state.reshards })}`);
  await hora.shutdown();
})().catch((e) => {
  console.error(`worker ${workerId} failed: ${e.code || ''} ${e.stack}`);
  process.exit(1);
});
