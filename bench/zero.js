'use strict';
// Memory and step time of DistributedOptimizer's shard modes (docs/zero.md): an MLP of --params parameters
// trained with Adam at each rank count, each mode.
//
//   node bench/zero.js [--params 50M] [--ranks 1,2,4] [--modes none,optimizer,gradients,weights]
//                      [--steps 5] [--pairs 6 (0: no step times)] [--batch 8] [--against none] [--memory on]
//
// A mode with '/no-overlap' after it (weights/no-overlap) is that mode with overlap: false. --against: the mode
// the step times are compared with (default none; --against weights/no-overlap --modes weights: stage 3's
// overlap against none). --memory off: step times only.
//
// The MLP: 4 dense layers of D x D (+ biases) with D chosen for --params (50M: D = 3536), tanh, MSE loss;
// every rank trains on --batch samples of its own per step, on the cpu backend.
//
// Memory, one job per rank count and mode (`hora run -np N node bench/zero.js --worker memory`), after
// 1 warm-up step and --steps measured steps:
//   optimizer state   the bytes of the optimizer's state this rank holds: the wrapped optimizer's slots
//                     (Adam's m and v: only this rank's blocks when sharded) and its scalars
//   model state       between steps: tf.memory().numBytes (weights, optimizer state, the shard copies of the
//                     weights, the batch); during a step: tf.profile()'s peakBytes of one step (the tensors
//                     the step holds at its fullest: the gradients, their averaged blocks, the update's
//                     temporaries). Gradient buckets in JS arrays are not tensors: they are in the RSS
//   peak RSS          process.resourceUsage().maxRSS of the rank at the end
// The figures are the largest over the ranks.
// Step time, one job per rank count and sharded mode (`--worker time`): one model and two optimizers, the
// unsharded one and the sharded one, taking turns on the same model (its weights go on from either): after a
// warm-up step of each, --pairs pairs of steps, the first of each pair alternating; per pair the ratio
// sharded / unsharded; printed: the median of the ratios, and the ratio of the two lowest step times.
// A mode the option refuses ('weights' where it is not in the build) is skipped with a line saying why.
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ROOT = path.join(__dirname, '..');
const HORA = path.join(ROOT, 'dist', 'ts', 'cli', 'main.js');
const NODE = process.execPath;
const LAYERS = 4;

function count(text) {
  const m = /^(\d+(?:\.\d+)?)([kKmM]?)$/.exec(text);
  if (!m) return NaN;
  return Math.round(Number(m[1]) * (m[2] === '' ? 1 : /k/i.test(m[2]) ? 1e3 : 1e6));
}

function parseArgs(argv) {
  const o = { params: 50e6, ranks: [1, 2, 4], modes: ['none', 'optimizer', 'gradients', 'weights'], steps: 5, pairs: 6, batch: 8, against: 'none', memory: true };
  const usage = 'usage: node bench/zero.js [--params 50M] [--ranks 1,2,4] [--modes none,optimizer,gradients,weights] [--steps 5] [--pairs 6 (0: no step times)] [--batch 8] ' +
    '[--against none] [--memory on|off] (a mode may end in /no-overlap)';
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i], value = argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value (${usage})`);
    if (flag === '--params' && count(value) >= 16) o.params = count(value);
    else if (flag === '--ranks' && value.split(',').every((r) => Number(r) >= 1)) o.ranks = value.split(',').map(Number);
    else if (flag === '--modes') o.modes = value.split(',');
    else if (flag === '--steps' && Number(value) >= 1) o.steps = Number(value);
    else if (flag === '--pairs' && Number(value) >= 0) o.pairs = Number(value);
    else if (flag === '--batch' && Number(value) >= 1) o.batch = Number(value);
    else if (flag === '--against') o.against = value;
    else if (flag === '--memory' && (value === 'on' || value === 'off')) o.memory = value === 'on';
    else throw new Error(`unknown or invalid ${flag} ${value} (${usage})`);
  }
  return o;
}

// ---------------------------------------------------------------------------------------------------------
// Worker: one rank of a job.

async function worker(kind) {
  const tf = require('@tensorflow/tfjs');
  const hora = require('../dist/ts/index.js');
  const { DistributedOptimizer } = require('../dist/adapters/tfjs/index.js');
  await tf.setBackend('cpu');
  await hora.init();
  const r = hora.rank();
  const params = Number(process.env.ZERO_BENCH_PARAMS), batch = Number(process.env.ZERO_BENCH_BATCH), mode = process.env.ZERO_BENCH_MODE;
  const d = Math.max(2, Math.round(Math.sqrt(params / LAYERS)));
  const build = () => {
    const m = tf.sequential();
    for (let l = 0; l < LAYERS; l++) m.add(tf.layers.dense({ units: d, activation: l < LAYERS - 1 ? 'tanh' : 'linear', ...(l === 0 ? { inputShape: [d] } : {}) }));
    return m;
  };
  const model = build();
  const x = tf.randomNormal([batch, d], 0, 1, 'float32', 7 + r);
  const y = tf.randomNormal([batch, d], 0, 1, 'float32', 70 + r);
  // A trainer: an optimizer and the loss of the model it trains. shard 'weights' shards the model it is given
  // (stage 3): the time job gives it a model of its own. spec: a mode, '/no-overlap' after it for overlap: false.
  const make = (spec, m = model) => {
    const { shard, overlap } = modeOf(spec);
    return {
      opt: new DistributedOptimizer(tf.train.adam(1e-4), shard === 'weights' ? { shard, overlap, model: m } : { shard, overlap }),
      loss: () => tf.losses.meanSquaredError(y, m.apply(x)),
    };
  };
  const stepMs = ({ opt, loss }) => {
    const t0 = performance.now();
    tf.dispose(opt.minimize(loss, true));
    return performance.now() - t0;
  };
  const out = { params: model.countParams(), d };
  if (kind === 'memory') {
    const trainer = make(mode), { opt } = trainer;
    stepMs(trainer);
    const times = [];
    for (let s = 0; s < Number(process.env.ZERO_BENCH_STEPS); s++) times.push(stepMs(trainer));
    const inner = await opt.optimizer.getWeights();
    out.optimizerBytes = inner.slice(1).reduce((sum, w) => sum + w.tensor.size * 4, 0) +
      Object.values(opt.optimizer).filter((v) => v instanceof tf.Variable).reduce((sum, v) => sum + v.size * 4, 0);
    inner[0].tensor.dispose();
    out.betweenBytes = tf.memory().numBytes;
    const profile = await tf.profile(() => { tf.dispose(opt.minimize(trainer.loss, true)); });
    out.duringBytes = profile.peakBytes;
    out.stepMs = median(times);
  } else {
    const against = process.env.ZERO_BENCH_AGAINST;
    const none = make(against, modeOf(against).shard === 'weights' ? build() : model), sharded = make(mode, modeOf(mode).shard === 'weights' ? build() : model);
    stepMs(none);
    stepMs(sharded);
    out.pairs = [];
    for (let p = 0; p < Number(process.env.ZERO_BENCH_PAIRS); p++) {
      // Alternating which goes first; the same on every rank (they run the same collectives).
      let a, b;
      if (p % 2 === 0) {
        a = stepMs(none);
        b = stepMs(sharded);
      } else {
        b = stepMs(sharded);
        a = stepMs(none);
      }
      out.pairs.push([a, b]);
    }
  }
  out.maxRssBytes = process.resourceUsage().maxRSS * 1024;
  const all = await hora.allgatherObject(out);
  if (r === 0) process.stdout.write(`ZERO_BENCH ${JSON.stringify(all)}\n`);
  await hora.shutdown();
}

// ---------------------------------------------------------------------------------------------------------
// Driver.

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const mib = (bytes) => (bytes / 1048576).toFixed(1);
/** A mode as --modes and --against give it: the shard option, and overlap (false after '/no-overlap'). */
function modeOf(spec) {
  const [shard, variant] = spec.split('/');
  return { shard, overlap: variant !== 'no-overlap' };
}

/** Whether this build's DistributedOptimizer takes the mode; null, or why not. */
function refusal(spec) {
  const { shard: mode, overlap } = modeOf(spec);
  if (spec.split('/').length > 1 && overlap) return `'${spec.split('/')[1]}' is not a variant (only /no-overlap is)`;
  const tf = require('@tensorflow/tfjs');
  const { DistributedOptimizer } = require('../dist/adapters/tfjs/index.js');
  try {
    // 'weights' shards a model at once, which takes a job (hora.init): its option check is the model's.
    new DistributedOptimizer(tf.train.adam(1e-4), mode === 'weights' ? { shard: mode, model: null } : { shard: mode }).dispose();
    return null;
  } catch (e) {
    if (mode === 'weights' && /option 'model'/.test(e.message)) return null;
    return e.message;
  }
}

function job(np, kind, mode, o) {
  const env = {
    ...process.env, ZERO_BENCH_PARAMS: String(o.params), ZERO_BENCH_BATCH: String(o.batch), ZERO_BENCH_MODE: mode,
    ZERO_BENCH_STEPS: String(o.steps), ZERO_BENCH_PAIRS: String(o.pairs), ZERO_BENCH_AGAINST: o.against, HORA_TIMEOUT_S: '600',
  };
  const r = spawnSync(NODE, [HORA, 'run', '-np', String(np), '--', NODE, __filename, '--worker', kind], { encoding: 'utf8', timeout: 3_600_000, env, maxBuffer: 64 << 20 });
  const line = (r.stdout || '').split('\n').find((l) => l.includes('ZERO_BENCH '));
  if (r.status !== 0 || !line) throw new Error(`hora run -np ${np} (${kind}, ${mode}) failed (status ${r.status}):\n${(r.stdout || '').slice(-3000)}\n${(r.stderr || '').slice(-3000)}`);
  return JSON.parse(line.slice(line.indexOf('ZERO_BENCH ') + 11));
}

function main() {
  const argv = process.argv.slice(2);
  if (argv[0] === '--worker') return worker(argv[1]).catch((e) => {
    console.error(e);
    process.exit(1);
  });
  const o = parseArgs(argv);
  console.log(`bench/zero.js: MLP of ${LAYERS} dense layers, about ${(o.params / 1e6).toFixed(1)}M parameters, Adam, batch ${o.batch} per rank, ` +
    `ranks ${o.ranks.join(',')}, modes ${o.modes.join(',')}${o.against === 'none' ? '' : `, step times against ${o.against}`}`);
  console.log(`${os.cpus().length} CPUs, ${os.cpus()[0]?.model ?? ''}, node ${process.version}, ${new Date().toISOString()}`);
  const modes = o.modes.filter((m) => {
    const why = refusal(m);
    if (why) console.log(`shard '${m}': skipped: this build refuses it (${why})`);
    return !why;
  });
  const why = refusal(o.against);
  if (why) throw new Error(`--against ${o.against}: this build refuses it (${why})`);
  const memory = {};
  if (o.memory) {
    console.log('\nmemory per rank (the largest over the ranks), MiB:');
    console.log('ranks  mode        params   optimizer state  x 1/N of none  model state between / during  peak RSS  step ms');
  }
  for (const np of o.memory ? o.ranks : []) {
    for (const mode of modes) {
      const all = job(np, 'memory', mode, o);
      const max = (k) => Math.max(...all.map((a) => a[k]));
      const row = { opt: max('optimizerBytes'), between: max('betweenBytes'), during: max('duringBytes'), rss: max('maxRssBytes'), ms: max('stepMs') };
      memory[`${np} ${mode}`] = row;
      const base = memory[`${np} none`];
      const share = base && mode !== 'none' ? (row.opt / (base.opt / np)).toFixed(3) : '-';
      console.log(`${String(np).padStart(5)}  ${mode.padEnd(10)}  ${(all[0].params / 1e6).toFixed(1).padStart(5)}M  ${mib(row.opt).padStart(15)}  ${share.padStart(13)}  ` +
        `${`${mib(row.between)} / ${mib(row.during)}`.padStart(28)}  ${mib(row.rss).padStart(8)}  ${row.ms.toFixed(0).padStart(7)}`);
    }
  }
  if (o.pairs === 0) {
    console.log(`\nstep time against shard '${o.against}': not measured (--pairs 0)`);
    return;
  }
  console.log(`\nstep time against shard '${o.against}' in the same job (${o.pairs} alternating pairs; rank 0's times):`);
  console.log(`ranks  mode        ${`${o.against} ms (median)`.padStart(16)}  sharded ms (median)  median ratio  lowest pair`);
  for (const np of o.ranks) {
    for (const mode of modes.filter((m) => m !== o.against)) {
      const [all0] = job(np, 'time', mode, o);
      const ratios = all0.pairs.map(([a, b]) => b / a);
      const lowA = Math.min(...all0.pairs.map((p) => p[0])), lowB = Math.min(...all0.pairs.map((p) => p[1]));
      console.log(`${String(np).padStart(5)}  ${mode.padEnd(10)}  ${median(all0.pairs.map((p) => p[0])).toFixed(0).padStart(16)}  ` +
        `${median(all0.pairs.map((p) => p[1])).toFixed(0).padStart(19)}  ${median(ratios).toFixed(3).padStart(12)}  ${(lowB / lowA).toFixed(3)} (${lowB.toFixed(0)} / ${lowA.toFixed(0)})`);
    }
  }
}

main();
