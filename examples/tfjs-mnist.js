'use strict';
// Data-parallel training of a handwritten-digit classifier (real MNIST digits from the `mnist` package)
// with hora/tfjs. Every rank trains its shard of the training set; one DistributedOptimizer line makes the
// ranks apply the same averaged gradients, so N ranks train like one process on the same global batch.
// At the end rank 0 prints the scaling efficiency and hora's cost per step, measured in the same run
// (see scalingProbe below), and what that cost is made of.
//
//   node dist/ts/cli/main.js run -np 2 node examples/tfjs-mnist.js          (or: npm run demo)
//   node examples/tfjs-mnist.js                                             (one rank)
//
// Flags (or environment):
//   --model cnn|mlp (MODEL, default cnn): cnn = conv 5x5x8, maxpool 2, conv 5x5x16, maxpool 2, dense 10
//     (5,994 parameters, test accuracy about 0.95 after the default 6 epochs); mlp = dense 784-128-64-10
//     (109,386 parameters and little compute per sample, so tfjs's fixed cost per step dominates and it
//     scales poorly)
//   --epochs N (EPOCHS, default 6), --batch B: global batch (BATCH, default 128)
//   --lr (LR, default 0.003 for the cnn, 0.001 for the mlp)
//   --train / --test: digits per set (N_TRAIN / N_TEST, default 7500 / 1000, equally many of each digit)
//   --scaling-steps N (SCALING_STEPS, default 3): after every epoch, time N steps at the global batch and 2N at
//     the per-rank batch without hora, for the scaling efficiency and hora's share printed at the end
//     (0 turns it off; a run of one rank skips it)
//   --json: one JSON summary line at the end (bench/scaling.sh reads it)
//   --stock-kernels: keep tfjs's own cpu kernels for three gradient operations instead of hora/tfjs's
//     useFasterCpuKernels (docs/tfjs.md; the cnn then trains about 20x slower)
const tf = require('@tensorflow/tfjs');
const mnist = require('mnist');
const fs = require('node:fs');
const os = require('node:os');
const { PerformanceObserver } = require('node:perf_hooks');
const hora = require('hora');
const { DistributedOptimizer, broadcastModel, shard, useFasterCpuKernels } = require('hora/tfjs');

function flag(name, env, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i > 0 && process.argv[i + 1] !== undefined) return process.argv[i + 1];
  return process.env[env] ?? fallback;
}
const MODEL = flag('model', 'MODEL', 'cnn');
const EPOCHS = Number(flag('epochs', 'EPOCHS', 6));
const BATCH = Number(flag('batch', 'BATCH', 128));
const LR = Number(flag('lr', 'LR', MODEL === 'mlp' ? 0.001 : 0.003));
const N_TRAIN = Number(flag('train', 'N_TRAIN', 7500));
const N_TEST = Number(flag('test', 'N_TEST', 1000));
const SCALING_STEPS = Number(flag('scaling-steps', 'SCALING_STEPS', 3));
const JSON_OUT = process.argv.includes('--json');
const STOCK_KERNELS = process.argv.includes('--stock-kernels');

/** mulberry32, uniform in [0, 1): the same split and order on every rank and every run. */
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffled(items, seed) {
  const rand = generator(seed);
  const a = items.slice();
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/**
 * mnist.set() shuffles with Math.random; take the same samples per digit ourselves and shuffle with a seed.
 * The package holds 863 to 1127 images per digit, so train + test may take at most 863 of each.
 */
function digits(inputShape) {
  const perTrain = N_TRAIN / 10, perTest = N_TEST / 10;
  const fewest = Math.min(...Array.from({ length: 10 }, (_, d) => mnist[d].length));
  if (!Number.isInteger(perTrain) || !Number.isInteger(perTest) || perTrain + perTest > fewest) {
    throw new Error(`--train and --test must be multiples of 10 with train + test <= ${fewest * 10} ` +
      `(the mnist package has ${fewest} images of its rarest digit)`);
  }
  let train = [], test = [];
  for (let d = 0; d < 10; d++) {
    train = train.concat(mnist[d].set(0, perTrain - 1));
    test = test.concat(mnist[d].set(perTrain, perTrain + perTest - 1));
  }
  const tensors = (set) => ({
    x: tf.tensor(Float32Array.from(set.flatMap((s) => s.input)), [set.length, ...inputShape]),
    y: tf.tensor2d(Float32Array.from(set.flatMap((s) => s.output)), [set.length, 10]),
  });
  return { train: tensors(shuffled(train, 42)), test: tensors(test) };
}

const MODELS = {
  cnn: {
    inputShape: [28, 28, 1],
    describe: 'CNN conv5x5x8-pool-conv5x5x16-pool-dense10',
    layers: () => [
      tf.layers.conv2d({ inputShape: [28, 28, 1], filters: 8, kernelSize: 5, activation: 'relu' }),
      tf.layers.maxPooling2d({ poolSize: 2 }),
      tf.layers.conv2d({ filters: 16, kernelSize: 5, activation: 'relu' }),
      tf.layers.maxPooling2d({ poolSize: 2 }),
      tf.layers.flatten(),
      tf.layers.dense({ units: 10, activation: 'softmax' }),
    ],
  },
  mlp: {
    inputShape: [784],
    describe: 'MLP 784-128-64-10',
    layers: () => [
      tf.layers.dense({ inputShape: [784], units: 128, activation: 'relu' }),
      tf.layers.dense({ units: 64, activation: 'relu' }),
      tf.layers.dense({ units: 10, activation: 'softmax' }),
    ],
  },
};

/** Mean over ranks of a few numbers. */
async function averaged(values) {
  return Array.from(await hora.allreduce(Float64Array.from(values), { op: 'avg' }));
}

/** Milliseconds V8 has spent in garbage collection so far (major and minor). */
function gcClock() {
  let ms = 0;
  const add = (entries) => { for (const e of entries) ms += e.duration; };
  const observer = new PerformanceObserver((list) => add(list.getEntries()));
  observer.observe({ entryTypes: ['gc'] });
  return () => { add(observer.takeRecords()); return ms; };
}

/**
 * tfjs's cpu backend greets its first tensor under Node with a banner that recommends tfjs-node, once per
 * rank. The example uses the cpu backend on purpose (plain JavaScript: nothing to build beyond hora), so
 * that first tensor is made with tfjs's warnings off (its PROD flag); later warnings are shown as usual.
 */
async function useCpuBackendQuietly() {
  await tf.setBackend('cpu');
  const prod = tf.env().getBool('PROD');
  tf.env().set('PROD', true);
  tf.tensor1d([0]).dispose();
  tf.env().set('PROD', prod);
}

/**
 * Busy and total CPU time of the whole machine so far, in clock ticks (Linux /proc/stat; null elsewhere):
 * with this job's own CPU time it tells how much other processes took while the figures were measured.
 */
function machineTicks() {
  try {
    const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    const [user, nice, system, idle, iowait, irq, softirq, steal] = f;
    return { busy: user + nice + system + irq + softirq + steal, total: user + nice + system + idle + iowait + irq + softirq + steal };
  } catch {
    return null;
  }
}

/** One training step on rows s*batch ... (s+1)*batch - 1 of `order`; resolves [loss, accuracy]. */
async function trainStep(model, data, order, s, batch) {
  const [x, y] = tf.tidy(() => {
    const idx = order.slice(s * batch, batch);
    return [tf.gather(data.x, idx), tf.gather(data.y, idx)];
  });
  try {
    return await model.trainOnBatch(x, y);
  } finally {
    tf.dispose([x, y]);
  }
}

/**
 * The scaling figures, measured in the same run as the training. A copy of the model, trained with plain
 * Adam and no hora, runs between the epochs:
 * - `SCALING_STEPS` steps on the global batch: one process training alone on what the job trains on together,
 *   the baseline of the scaling efficiency. Every rank times it at the same time, so that each has one core,
 *   as the ranks have while training (a process alone on this machine would get V8's helper threads onto the
 *   idle core; bench/scaling.sh pins ranks to cores for the same reason).
 * - twice as many steps on this rank's batch: the training step without the allreduce, so the training
 *   step against it is what hora adds (reading the gradients, the allreduce, waiting for the other ranks).
 * bench/scaling.sh measures the same quantities over whole runs, repeated.
 */
function scalingProbe(spec, data, local) {
  const model = tf.sequential({ layers: spec.layers() });
  model.compile({ optimizer: tf.train.adam(LR), loss: 'categoricalCrossentropy', metrics: ['accuracy'] });
  const total = { globalMs: 0, globalSteps: 0, localMs: 0, localSteps: 0 };
  let round = 0;
  async function timed(batch, steps) {
    const order = tf.tensor1d(shuffled([...Array(data.x.shape[0]).keys()], 7 + round++), 'int32');
    await hora.barrier(); // all ranks start together, so they run at the same time
    const t0 = performance.now();
    for (let s = 0; s < steps; s++) await trainStep(model, data, order, s % Math.floor(data.x.shape[0] / batch), batch);
    const ms = performance.now() - t0;
    order.dispose();
    return ms;
  }
  return {
    total,
    /** Times one round; `keep` false for the warm-up round. */
    async run(keep) {
      const globalMs = await timed(BATCH, SCALING_STEPS);
      const localMs = await timed(local, 2 * SCALING_STEPS);
      if (!keep) return;
      total.globalMs += globalMs; total.globalSteps += SCALING_STEPS;
      total.localMs += localMs; total.localSteps += 2 * SCALING_STEPS;
    },
  };
}

async function main() {
  const spec = MODELS[MODEL];
  if (!spec) throw new Error(`--model must be one of ${Object.keys(MODELS).join(', ')}, not ${MODEL}`);
  if (!Number.isInteger(SCALING_STEPS) || SCALING_STEPS < 0) throw new Error(`--scaling-steps must be a whole number >= 0, not ${SCALING_STEPS}`);
  await useCpuBackendQuietly();
  if (!STOCK_KERNELS) useFasterCpuKernels(tf);
  await hora.init();
  const rank = hora.rank(), size = hora.size();
  const log = (...a) => { if (rank === 0) console.log(...a); };
  if (BATCH % size !== 0) throw new Error(`--batch ${BATCH} must be divisible by the number of ranks (${size})`);
  const gcMsSoFar = gcClock();

  const data = digits(spec.inputShape);
  const mine = shard(data.train.x, data.train.y); // this rank's contiguous 1/size of the shuffled set
  const myTest = shard(data.test.x, data.test.y);
  const local = BATCH / size;
  const steps = Math.floor(mine.x.shape[0] / local); // the same steps, and samples, per epoch for any size

  const model = tf.sequential({ layers: spec.layers() });
  const optimizer = new DistributedOptimizer(tf.train.adam(LR));
  model.compile({ optimizer, loss: 'categoricalCrossentropy', metrics: ['accuracy'] });
  await broadcastModel(model); // rank 0's random initial weights everywhere
  const probe = size > 1 && SCALING_STEPS > 0 ? scalingProbe(spec, mine, local) : null;

  log(`hora/tfjs MNIST: ${size} rank(s), ${N_TRAIN} train / ${N_TEST} test digits, global batch ${BATCH} (${local} per rank), ` +
    `${steps} steps per epoch, ${EPOCHS} epochs, ${spec.describe} (${model.countParams()} parameters), Adam lr ${LR}, ` +
    `tfjs ${tf.getBackend()} backend (plain JavaScript, one core per rank)`);
  // Steady state: the epochs after the first (JIT warm-up), each timed from a common start to this rank's
  // last step; the last step's allreduce makes every rank end it together.
  const steady = { ms: 0, steps: 0, waitMs: 0, gcMs: 0 };
  let testAcc = 0;
  const ticksBefore = machineTicks(), cpuBefore = process.cpuUsage(), wallBefore = performance.now();
  for (let epoch = 0; epoch < EPOCHS; epoch++) {
    const order = tf.tensor1d(shuffled([...Array(mine.x.shape[0]).keys()], 1000 * epoch + rank), 'int32');
    let lossSum = 0, accSum = 0;
    const waitBefore = optimizer.stats.waitMs;
    await hora.barrier();
    const gcBefore = gcMsSoFar();
    const t0 = performance.now();
    for (let s = 0; s < steps; s++) {
      const [loss, acc] = await trainStep(model, mine, order, s, local);
      lossSum += loss; accSum += acc;
    }
    const ms = performance.now() - t0;
    await new Promise(setImmediate); // V8 reports GC pauses from the event loop, which the steps never reach
    const counted = epoch > 0 || EPOCHS === 1;
    if (counted) {
      steady.ms += ms; steady.steps += steps;
      steady.waitMs += optimizer.stats.waitMs - waitBefore;
      steady.gcMs += gcMsSoFar() - gcBefore;
    }
    order.dispose();
    if (probe) await probe.run(counted);
    const [evalLoss, evalAcc] = tf.tidy(() => model.evaluate(myTest.x, myTest.y, { batchSize: 500 }).map((t) => t.dataSync()[0]));
    const [loss, acc, testLoss, meanTestAcc, rankMs] = await averaged([lossSum / steps, accSum / steps, evalLoss, evalAcc, ms]);
    testAcc = meanTestAcc;
    const sps = (steps * BATCH) / (rankMs / 1000);
    log(`epoch ${epoch + 1}/${EPOCHS}  loss ${loss.toFixed(4)}  acc ${acc.toFixed(4)}  test loss ${testLoss.toFixed(4)}  test acc ${testAcc.toFixed(4)}  ` +
      `${(rankMs / 1000).toFixed(2)} s  ${sps.toFixed(0)} samples/s (${(sps / size).toFixed(0)} per rank)`);
  }

  const cpu = process.cpuUsage(cpuBefore), wallS = (performance.now() - wallBefore) / 1000, ticksAfter = machineTicks();
  // This job's share of the machine's CPU capacity; the rest of the busy share is other processes.
  const [jobShare] = await hora.allreduce(Float64Array.of((cpu.user + cpu.system) / 1e6 / (wallS * os.cpus().length)), { op: 'sum' });
  const otherShare = ticksBefore && ticksAfter && hora.localSize() === size
    ? Math.max(0, (ticksAfter.busy - ticksBefore.busy) / (ticksAfter.total - ticksBefore.total) - jobShare) : null;
  const [stepMs, waitMs, gcMs] = await averaged([steady.ms / steady.steps, steady.waitMs / steady.steps, steady.gcMs / steady.steps]);
  const sps = BATCH / (stepMs / 1000);
  const epochs = EPOCHS === 1 ? '1' : `2..${EPOCHS}`;
  log(`steady state (epochs ${epochs}): ${sps.toFixed(0)} samples/s total, ${(sps / size).toFixed(0)} per rank, ` +
    `${stepMs.toFixed(2)} ms per step (${gcMs.toFixed(2)} ms of it in GC)`);

  // Pure communication of one step's gradients, nothing else running: what an overlap could hide at most.
  let commMs = 0;
  if (size > 1) {
    const grads = model.trainableWeights.map((w) => new Float32Array(w.shape.reduce((a, b) => a * b, 1)));
    const rounds = 50;
    for (let r = 0; r < rounds + 5; r++) {
      if (r === 5) commMs = performance.now();
      const works = grads.map((g, i) => hora.allreduce(g, { name: `bench.${i}`, inplace: true }));
      for (const w of works) w.wait();
    }
    commMs = (await averaged([(performance.now() - commMs) / rounds]))[0];
  }

  let scaling = null;
  if (probe) {
    const { globalMs, globalSteps, localMs, localSteps } = probe.total;
    const [baselineStepMs, plainStepMs] = await averaged([globalMs / globalSteps, localMs / localSteps]);
    const baselineSps = BATCH / (baselineStepMs / 1000);
    scaling = { baselineStepMs, plainStepMs, efficiency: sps / (size * baselineSps), commFactor: plainStepMs / stepMs };
    log(`scaling efficiency ${scaling.efficiency.toFixed(3)}: ${sps.toFixed(0)} samples/s on ${size} ranks against ${size} x ${baselineSps.toFixed(0)} ` +
      `for one process on the global batch of ${BATCH}`);
    log(`  measured in this run: after each epoch, all ranks at once (one core each, as in training) timed ${SCALING_STEPS} steps of ` +
      `batch ${BATCH} on a copy of the model trained with plain Adam, without hora (${globalSteps} steps per rank in epochs ${epochs})`);
    // What hora costs: the training step against the same step without hora, timed in this run.
    const costMs = stepMs - plainStepMs;
    const against = `the same ${local}-sample step with plain Adam took ${plainStepMs.toFixed(2)} ms (${localSteps} steps per rank)`;
    log(costMs > 0
      ? `hora's cost per step: ${costMs.toFixed(2)} ms of ${stepMs.toFixed(2)} ms (${(100 * costMs / stepMs).toFixed(1)}%); ${against}`
      : `hora's cost per step: too small to measure here: the step took ${stepMs.toFixed(2)} ms with hora; ${against}`);
  }
  if (size > 1) {
    // What the cost is made of: the optimizer's wait for the allreduce includes waiting for the other ranks to
    // reach it; the allreduce alone (above) is the communication itself.
    const rest = waitMs > commMs ? `; the rest, ${(waitMs - commMs).toFixed(2)} ms, is waiting for the slowest rank to reach it (the ranks' steps differ in length)` : '';
    log(`  in that step, ${waitMs.toFixed(2)} ms waiting for the gradients' allreduce (Work.wait): ${commMs.toFixed(3)} ms is the allreduce ` +
      `itself (timed alone after training, nothing else running)${rest}`);
  }
  if (scaling && otherShare !== null && otherShare > 0.05) {
    log(`  other processes took ${(100 * otherShare).toFixed(0)}% of this machine's CPU during the training, so these figures are noisy ` +
      `(bench/scaling.sh repeats them and leaves out runs above 5%)`);
  }
  log(`test accuracy: ${testAcc.toFixed(4)} (${N_TEST} digits)`);
  if (JSON_OUT) {
    log(JSON.stringify({ size, model: MODEL, batch: BATCH, steps: steady.steps, sps, stepMs, waitMs, gcMs, commMs, testAcc,
      skipAllreduce: process.env.HORA_TFJS_SKIP_ALLREDUCE === '1', otherShare, ...scaling }));
  }
  await hora.shutdown();
}

main().catch((e) => {
  console.error(`rank ${process.env.HORA_RANK ?? 0}:`, e);
  process.exit(1);
});
