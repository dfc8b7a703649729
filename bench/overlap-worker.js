'use strict';
// bench/overlap.sh's job, run by every rank under `hora run`: the same tfjs MLP trained three ways in one
// process, DistributedOptimizer with overlap: true, with overlap: false, and its plain optimizer (no
// communication), one step of each in turn (the order rotating), so that a change in the machine's load
// hits all three alike; WARMUP such rounds, then ROUNDS timed ones; then the allreduce of one step's
// gradients alone. Rank 0 prints one JSON line: per round and mode the step time and the optimizer's stats.
// Settings as NAME=VALUE arguments (hora run hands remote hosts only HORA_* variables):
//   LAYERS=784,2048,2048,10  BATCH=64 (per rank)  ROUNDS=8  WARMUP=2  BUCKET_MB=
const tf = require('@tensorflow/tfjs');
const hora = require('../dist/ts/index.js');
const { DistributedOptimizer } = require('../dist/adapters/tfjs/index.js');

const args = Object.fromEntries(process.argv.slice(2).map((a) => a.split('=')).filter(([, v]) => v !== undefined && v !== ''));
const LAYERS = (args.LAYERS || '784,2048,2048,10').split(',').map(Number);
const BATCH = Number(args.BATCH || 64);
const ROUNDS = Number(args.ROUNDS || 8);
const WARMUP = Number(args.WARMUP || 2);
const BUCKET_MB = args.BUCKET_MB ? Number(args.BUCKET_MB) : undefined;
const MODES = ['overlap', 'sync', 'plain'];

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function buildModel() {
  const layers = LAYERS.slice(1).map((units, i) => tf.layers.dense({
    units, activation: i === LAYERS.length - 2 ? 'softmax' : 'relu', ...(i === 0 ? { inputShape: [LAYERS[0]] } : {}),
  }));
  return tf.sequential({ layers });
}

async function main() {
  await hora.init();
  const x = tf.randomNormal([BATCH, LAYERS[0]], 0, 1, 'float32', 1 + hora.rank());
  const labels = tf.randomUniform([BATCH], 0, LAYERS[LAYERS.length - 1], 'int32', 2 + hora.rank());
  const y = tf.oneHot(labels, LAYERS[LAYERS.length - 1]).asType('float32');
  const runs = {};
  for (const mode of MODES) {
    const model = buildModel();
    const sgd = tf.train.sgd(0.01);
    const optimizer = mode === 'plain' ? sgd : new DistributedOptimizer(sgd, { overlap: mode === 'overlap', bucketMB: BUCKET_MB });
    model.compile({ optimizer, loss: 'categoricalCrossentropy' });
    runs[mode] = { model, optimizer };
  }
  const rounds = [];
  for (let r = 0; r < WARMUP + ROUNDS; r++) {
    const round = {};
    for (let i = 0; i < MODES.length; i++) {
      const mode = MODES[(r + i) % MODES.length];
      const { model, optimizer } = runs[mode];
      const before = { ...optimizer.stats };
      const t0 = performance.now();
      await model.trainOnBatch(x, y);
      round[mode] = { stepMs: performance.now() - t0 };
      if (mode !== 'plain') for (const k of ['backwardMs', 'hiddenMs', 'exposedMs']) round[mode][k] = optimizer.stats[k] - before[k];
    }
    if (r >= WARMUP) rounds.push(round);
  }
  const params = runs.plain.model.countParams();
  // One step's gradients in one allreduce, with nothing else running: the communication to hide.
  const buffer = new Float32Array(params);
  const alone = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    hora.allreduce(buffer, { inplace: true, name: 'bench allreduce alone' }).wait();
    alone.push(performance.now() - t0);
  }
  if (hora.rank() === 0) {
    process.stdout.write(JSON.stringify({ layers: LAYERS, batch: BATCH, params, size: hora.size(), bucketMB: BUCKET_MB, allreduceMs: median(alone), rounds }) + '\n');
  }
  await hora.shutdown();
}

main().catch((e) => {
  process.stderr.write(`overlap-worker rank ${process.env.HORA_RANK}: ${e && e.stack}\n`);
  process.exit(1);
});
