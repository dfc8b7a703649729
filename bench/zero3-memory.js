'use strict';
// Memory and step time of DistributedOptimizer with shard: 'weights' (ZeRO stage 3) against the unsharded
// DistributedOptimizer, an MLP trained with Adam on tfjs's cpu backend.
//
//   node bench/zero3-memory.js [--params 5e6] [--ranks 1,2,4] [--steps 3] [--batch 32]
//
// For each rank count N it runs `hora run -np N node bench/zero3-memory.js --worker` twice, unsharded and
// sharded (a process each, so that peak resident memory is the mode's own). Each rank builds an MLP of about
// --params parameters (8 Dense layers of equal width), trains --steps steps of --batch samples per rank with
// Adam in a minimize loop, and reports:
//   held   tensor bytes (tf.memory().numBytes) after the steps, less the batch: the weights and the optimizer
//          state kept between steps (unsharded: weights + Adam's two moments = 12 bytes per parameter)
//   step   the most tensor bytes seen during a step, less the batch: unsharded, when the inner optimizer is
//          handed the averaged gradients (weights, moments and full gradients alive); sharded, the most seen
//          while a layer's full weights or gradients were alive, or at the update
//   rss    peak resident memory of the process (process.resourceUsage().maxRSS)
//   ms     the median step time
// Prints one line per rank count and mode, then the sharded figures as a fraction of the unsharded ones at the
// same rank count. Timings on a shared machine are noisy; the memory figures are not.
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ROOT = path.join(__dirname, '..');
const HORA = path.join(ROOT, 'dist', 'ts', 'cli', 'main.js');
const NODE = process.execPath;
const LAYERS = 8;

function parseArgs(argv) {
  const o = { params: 5e6, ranks: [1, 2, 4], steps: 3, batch: 32, worker: false, mode: 'unsharded' };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--worker') {
      o.worker = true;
      continue;
    }
    const value = argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === '--params' && Number(value) >= 1e4) o.params = Number(value);
    else if (flag === '--ranks') o.ranks = value.split(',').map(Number);
    else if (flag === '--steps' && Number(value) >= 1) o.steps = Number(value);
    else if (flag === '--batch' && Number(value) >= 1) o.batch = Number(value);
    else if (flag === '--mode' && (value === 'unsharded' || value === 'weights')) o.mode = value;
    else throw new Error(`unknown or invalid ${flag} ${value} (usage: node bench/zero3-memory.js [--params 5e6] [--ranks 1,2,4] [--steps 3] [--batch 32])`);
  }
  return o;
}

async function worker(o) {
  const tf = require('@tensorflow/tfjs');
  const hora = require('../dist/ts/index.js');
  const { DistributedOptimizer } = require('../dist/adapters/tfjs/index.js');
  tf.setBackend('cpu');
  await hora.init();
  // LAYERS square layers of width w: about LAYERS * w * w parameters.
  const width = Math.max(8, Math.round(Math.sqrt(o.params / LAYERS)));
  const base = tf.memory().numBytes;
  const layers = [];
  for (let l = 0; l < LAYERS; l++) {
    layers.push(tf.layers.dense({ units: width, activation: l < LAYERS - 1 ? 'relu' : 'linear', ...(l === 0 ? { inputShape: [width] } : {}) }));
  }
  const model = tf.sequential({ layers });
  const params = model.countParams();
  const optimizer = new DistributedOptimizer(tf.train.adam(1e-4), o.mode === 'weights' ? { shard: 'weights', model } : {});
  // The unsharded peak: at the update, with the full averaged gradients alive.
  let peak = 0;
  const inner = optimizer.optimizer;
  const apply = inner.applyGradients.bind(inner);
  inner.applyGradients = (g) => {
    peak = Math.max(peak, tf.memory().numBytes);
    return apply(g);
  };
  const x = tf.randomNormal([o.batch, width], 0, 1, 'float32', 1 + hora.rank());
  const y = tf.randomNormal([o.batch, width], 0, 1, 'float32', 100 + hora.rank());
  const batchBytes = (x.size + y.size) * 4;
  const times = [];
  for (let s = 0; s < o.steps; s++) {
    const t0 = performance.now();
    optimizer.minimize(() => tf.losses.meanSquaredError(y, model.apply(x)));
    times.push(performance.now() - t0);
  }
  const held = tf.memory().numBytes - base - batchBytes;
  if (optimizer.weightShards) peak = Math.max(peak, optimizer.weightShards.peakBytes);
  times.sort((a, b) => a - b);
  const out = { rank: hora.rank(), params, held, step: peak - base - batchBytes, rss: process.resourceUsage().maxRSS * 1024, ms: times[Math.floor(times.length / 2)] };
  if (hora.rank() === 0) process.stdout.write(`RESULT ${JSON.stringify(out)}\n`);
  await hora.shutdown();
}

function main(o) {
  const mb = (b) => (b / 1048576).toFixed(1).padStart(8);
  console.log(`MLP of ${LAYERS} Dense layers, about ${o.params} parameters, Adam, ${o.steps} steps of ${o.batch} samples per rank (rank 0's figures)`);
  console.log('ranks  mode        params     held MiB   step MiB    rss MiB   step ms');
  const rows = {};
  for (const n of o.ranks) {
    for (const mode of ['unsharded', 'weights']) {
      const args = [HORA, 'run', '-np', String(n), '--', NODE, __filename, '--worker', '--mode', mode, '--params', String(o.params), '--steps', String(o.steps), '--batch', String(o.batch)];
      const run = spawnSync(NODE, args, { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
      // hora run prefixes each rank's lines with [rank].
      const line = (run.stdout || '').split('\n').find((l) => l.includes('RESULT '));
      if (run.status !== 0 || !line) {
        console.error(`${n} ranks, ${mode}: hora run exited ${run.status}\n${(run.stdout || '').slice(-2000)}\n${(run.stderr || '').slice(-2000)}`);
        process.exitCode = 1;
        continue;
      }
      const r = JSON.parse(line.slice(line.indexOf('RESULT ') + 7));
      rows[`${n} ${mode}`] = r;
      console.log(`${String(n).padStart(5)}  ${mode.padEnd(10)} ${String(r.params).padStart(9)} ${mb(r.held)}   ${mb(r.step)} ${mb(r.rss)}   ${r.ms.toFixed(0).padStart(7)}`);
    }
  }
  for (const n of o.ranks) {
    const u = rows[`${n} unsharded`], s = rows[`${n} weights`];
    if (!u || !s) continue;
    const pct = (a, b) => `${((100 * a) / b).toFixed(1)}%`;
    console.log(`${n} ranks: sharded/unsharded held ${pct(s.held, u.held)}, step ${pct(s.step, u.step)}, held+step peak of model state ${pct(Math.max(s.held, s.step), Math.max(u.held, u.step))}, rss ${pct(s.rss, u.rss)}, time ${(s.ms / u.ms).toFixed(2)}x`);
  }
}

const options = parseArgs(process.argv.slice(2));
if (options.worker) {
  worker(options).catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else {
  main(options);
}
