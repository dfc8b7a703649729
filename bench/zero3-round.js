'use strict';
// What the round of a pass costs with shard: 'weights' (docs/zero-weights.md, "Uneven data"): every pass of a
// sharded-weights step begins with an allgather of 3 float64 per rank ([stepping, samples, counted]), so that
// a rank whose data has ended can serve the others' passes. This measures that allgather alone and a whole
// step (setSampleCount, then minimize) of an MLP of 4 dense layers of D x D with SGD, at each rank count.
//
//   node bench/zero3-round.js [--ranks 2,3] [--params 10k,1M] [--steps 20] [--rounds 500] [--batch 8]
//
// Prints, per rank count and size: the median step, the median round, and the round's share of the step.
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ROOT = path.join(__dirname, '..');
const HORA = path.join(ROOT, 'dist', 'ts', 'cli', 'main.js');

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

function count(text) {
  const m = /^(\d+(?:\.\d+)?)([kKmM]?)$/.exec(text);
  if (!m) throw new TypeError(`bench/zero3-round.js: a size must be like 10k or 1M; received '${text}'`);
  return Math.round(Number(m[1]) * (m[2] === '' ? 1 : /k/i.test(m[2]) ? 1e3 : 1e6));
}

const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function worker() {
  const tf = require('@tensorflow/tfjs');
  const hora = require(path.join(ROOT, 'dist', 'ts', 'index.js'));
  const { DistributedOptimizer } = require(path.join(ROOT, 'dist', 'adapters', 'tfjs', 'index.js'));
  await tf.setBackend('cpu');
  await hora.init();
  const steps = Number(arg('steps', '20')), rounds = Number(arg('rounds', '500')), batch = Number(arg('batch', '8'));
  const out = [];
  for (const text of arg('params', '10k,1M').split(',')) {
    const d = Math.max(1, Math.round(Math.sqrt(count(text) / 4)));
    const model = tf.sequential({ layers: [0, 1, 2, 3].map((i) => tf.layers.dense({ units: d, activation: 'tanh', ...(i === 0 ? { inputShape: [d] } : {}) })) });
    const opt = new DistributedOptimizer(tf.train.sgd(0.01), { shard: 'weights', model });
    const x = tf.randomNormal([batch, d], 0, 1, 'float32', 1), y = tf.randomNormal([batch, d], 0, 1, 'float32', 2);
    const stepMs = [];
    for (let s = 0; s < steps + 2; s++) {
      const t0 = performance.now();
      opt.setSampleCount(batch);
      opt.minimize(() => tf.losses.meanSquaredError(y, model.predict(x)));
      if (s >= 2) stepMs.push(performance.now() - t0);
    }
    const roundUs = [];
    for (let i = 0; i < rounds; i++) {
      const t0 = performance.now();
      hora.allgather(Float64Array.of(1, batch, 1), { name: 'zero round' }).wait();
      roundUs.push((performance.now() - t0) * 1000);
    }
    out.push({ params: 4 * d * (d + 1), step: median(stepMs), round: median(roundUs) });
    x.dispose();
    y.dispose();
  }
  if (hora.rank() === 0) process.stdout.write(`RESULT ${JSON.stringify({ ranks: hora.size(), out })}\n`);
  await hora.shutdown();
}

function main() {
  console.log('ranks  parameters  step (median)  round (median)  round / step');
  for (const np of arg('ranks', '2,3').split(',')) {
    const run = spawnSync(process.execPath, [HORA, 'run', '-np', np, '--', process.execPath, __filename, '--worker', ...process.argv.slice(2)],
      { encoding: 'utf8', cwd: ROOT, timeout: 600000 });
    const line = (run.stdout || '').split('\n').find((l) => l.includes('RESULT '));
    if (!line) {
      console.log(`${np} ranks: no result (exit ${run.status}): ${(run.stderr || run.stdout || '').slice(-800)}`);
      process.exitCode = 1;
      continue;
    }
    const { ranks, out } = JSON.parse(line.slice(line.indexOf('RESULT ') + 7));
    for (const o of out) {
      console.log(`${String(ranks).padStart(5)}  ${String(o.params).padStart(10)}  ${o.step.toFixed(2).padStart(10)} ms  ${o.round.toFixed(1).padStart(11)} us  ${(100 * o.round / 1000 / o.step).toFixed(2).padStart(10)}%`);
    }
  }
}

if (process.argv.includes('--worker')) worker().catch((e) => { console.error(e); process.exit(1); });
else main();
