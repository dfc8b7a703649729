'use strict';
// The training job of bench/elastic-recovery.js: a tfjs MLP (cpu backend) trained step by step.
//
//   node bench/elastic-recovery-worker.js MODE NP STEPS [CHECKPOINT]
//
// MODE elastic: the job runs under `hora run --min-np`; the model and Adam live in an ElasticState with a
//   `step` field, committed every COMMIT_EVERY steps inside hora.elastic.run. The launcher refills the
//   slot of a lost worker; a refilled worker (HORA_WORKER_ID >= NP) exits at once, before loading tfjs,
//   so that the world stays at the smaller size the benchmark measures.
// MODE restart: the job runs under plain `hora run` (a lost worker ends it). Rank 0 writes CHECKPOINT
//   (weights, Adam's slots and iteration count, step) every COMMIT_EVERY steps, by rename so that a kill
//   never leaves half a file; a job that finds CHECKPOINT starts from it. This is the restart-everything
//   way of torchrun, with hora's launcher standing in for torchrun's.
//
// Every process prints `pid WORKER_ID PID` first, and rank 0 prints `step MS SIZE STEP` after each
// completed step (MS: Date.now() when the step's update is done; STEP: steps done, 1-based). The global
// batch is the same at every world size: each rank trains on its strided share of it.
const fs = require('node:fs');

const [mode, npText, stepsText, checkpoint] = process.argv.slice(2);
const NP = Number(npText);
const STEPS = Number(stepsText);
const COMMIT_EVERY = 10;
// ELASTIC_BENCH_MODEL=large: the 5.8M-parameter MLP 784-2048-2048-10 (bench/elastic-recovery.js --model large).
const LARGE = process.env.ELASTIC_BENCH_MODEL === 'large';
const IN = LARGE ? 784 : 64;
const HIDDEN = LARGE ? 2048 : 256;
const CLASSES = 10;
const GLOBAL_BATCH = 96; // divisible by 1, 2, 3 and 4
const DISTINCT_BATCHES = 16;

if (!['elastic', 'restart'].includes(mode) || !(NP >= 1) || !(STEPS >= 1) || (mode === 'restart' && !checkpoint)) {
  console.error('usage: elastic-recovery-worker.js elastic|restart NP STEPS [CHECKPOINT]');
  process.exit(2);
}
const workerId = Number(process.env.HORA_WORKER_ID ?? process.env.HORA_RANK);
if (mode === 'elastic' && workerId >= NP) process.exit(0);
console.log(`pid ${workerId} ${process.pid}`);

const tf = require('@tensorflow/tfjs');
const hora = require('../dist/ts/index.js');
const { DistributedOptimizer, ElasticState } = require('../dist/adapters/tfjs/index.js');

/** A deterministic stream of numbers in [0, 1) (xorshift32). */
function prng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 4294967296;
  };
}

/** DISTINCT_BATCHES global batches of a made-up classification task, the same in every process. */
function makeData() {
  const rand = prng(7);
  const n = GLOBAL_BATCH * DISTINCT_BATCHES;
  const x = Float32Array.from({ length: n * IN }, () => rand() * 2 - 1);
  const y = new Float32Array(n * CLASSES);
  for (let i = 0; i < n; i++) {
    let s = 0;
    for (let j = 0; j < IN; j += 7) s += x[i * IN + j];
    y[i * CLASSES + (Math.floor((s + 5) * 3) % CLASSES + CLASSES) % CLASSES] = 1;
  }
  return { x, y };
}

/** This rank's strided share of global batch `step`. */
function shareOf(data, step, rank, size) {
  const first = (step % DISTINCT_BATCHES) * GLOBAL_BATCH;
  const rows = [];
  for (let i = rank; i < GLOBAL_BATCH; i += size) rows.push(first + i);
  const x = new Float32Array(rows.length * IN);
  const y = new Float32Array(rows.length * CLASSES);
  rows.forEach((r, k) => {
    x.set(data.x.subarray(r * IN, (r + 1) * IN), k * IN);
    y.set(data.y.subarray(r * CLASSES, (r + 1) * CLASSES), k * CLASSES);
  });
  return { x: tf.tensor2d(x, [rows.length, IN]), y: tf.tensor2d(y, [rows.length, CLASSES]) };
}

function buildModel() {
  const model = tf.sequential({
    layers: [
      tf.layers.dense({ inputShape: [IN], units: HIDDEN, activation: 'relu', kernelInitializer: tf.initializers.glorotUniform({ seed: 1 }) }),
      tf.layers.dense({ units: HIDDEN, activation: 'relu', kernelInitializer: tf.initializers.glorotUniform({ seed: 2 }) }),
      tf.layers.dense({ units: CLASSES, activation: 'softmax', kernelInitializer: tf.initializers.glorotUniform({ seed: 3 }) }),
    ],
  });
  model.compile({ optimizer: new DistributedOptimizer(tf.train.adam(0.001)), loss: 'categoricalCrossentropy' });
  return model;
}

async function trainStep(model, data, step) {
  const { x, y } = shareOf(data, step, hora.rank(), hora.size());
  try {
    await model.trainOnBatch(x, y);
  } finally {
    tf.dispose([x, y]);
  }
}

function report(step) {
  if (hora.rank() === 0) console.log(`step ${Date.now()} ${hora.size()} ${step}`);
}

async function elastic(model, data) {
  const state = new ElasticState(model, null, { step: 0 });
  await hora.elastic.run(state, async (s) => {
    while (s.step < STEPS) {
      await trainStep(model, data, s.step);
      s.step++;
      report(s.step);
      if (s.step % COMMIT_EVERY === 0) await s.commit();
    }
  });
}

// Checkpoint file: a JSON header line (step, iterations, each tensor's name, shape and length), then the
// tensors' float32 bytes in that order.
function saveCheckpoint(model, optimizer, step) {
  const inner = optimizer.optimizer;
  return inner.getWeights().then((named) => {
    const tensors = [...model.weights.map((w) => ({ name: w.name, tensor: w.read() })), ...named.slice(1)];
    const arrays = tensors.map((t) => t.tensor.dataSync());
    named[0].tensor.dispose();
    const header = { step, iterations: inner.iterations, tensors: tensors.map((t, i) => [t.name, t.tensor.shape, arrays[i].length]) };
    const head = Buffer.from(`${JSON.stringify(header)}\n`);
    const body = arrays.map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength));
    fs.writeFileSync(`${checkpoint}.tmp`, Buffer.concat([head, ...body]));
    fs.renameSync(`${checkpoint}.tmp`, checkpoint);
  });
}

async function loadCheckpoint(model, optimizer) {
  if (!fs.existsSync(checkpoint)) return 0;
  const bytes = fs.readFileSync(checkpoint);
  const nl = bytes.indexOf(10);
  const header = JSON.parse(bytes.subarray(0, nl).toString('utf8'));
  let offset = nl + 1;
  const tensors = header.tensors.map(([name, shape, n]) => {
    const a = new Float32Array(n);
    Buffer.from(a.buffer).set(bytes.subarray(offset, offset + 4 * n));
    offset += 4 * n;
    return { name, tensor: tf.tensor(a, shape) };
  });
  const nWeights = model.weights.length;
  model.setWeights(tensors.slice(0, nWeights).map((t) => t.tensor));
  const iter = tf.scalar(header.iterations, 'int32');
  await optimizer.optimizer.setWeights([{ name: 'iter', tensor: iter }, ...tensors.slice(nWeights)]);
  tf.dispose([iter, ...tensors.map((t) => t.tensor)]);
  return header.step;
}

async function restart(model, data) {
  const optimizer = model.optimizer;
  let step = await loadCheckpoint(model, optimizer);
  while (step < STEPS) {
    await trainStep(model, data, step);
    step++;
    report(step);
    if (step % COMMIT_EVERY === 0 && hora.rank() === 0) await saveCheckpoint(model, optimizer, step);
  }
}

(async () => {
  await tf.setBackend('cpu');
  await hora.init();
  const data = makeData();
  const model = buildModel();
  if (mode === 'elastic') await elastic(model, data);
  else await restart(model, data);
  await hora.shutdown();
})().catch((e) => {
  console.error(`worker ${workerId} failed: ${e.code || ''} ${e.message}`);
  process.exit(1);
});
