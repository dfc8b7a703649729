'use strict';
// Data-parallel training of a handwritten-digit classifier (real MNIST digits from the `mnist` package)
// with hora/tfjs. Every rank trains its shard of the training set; one DistributedOptimizer line makes the
// ranks apply the same averaged gradients, so N ranks train like one process on the same global batch.
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
//   --baseline-sps S: the 1-rank samples/s at the same global batch, to print the scaling efficiency
//   --json: one JSON summary line at the end (bench/scaling.sh reads it)
//   --stock-kernels: keep tfjs's own cpu kernels for three gradient operations (see tfjs-cpu-kernels.js;
//     the cnn then trains about 20x slower)
const tf = require('@tensorflow/tfjs');
const mnist = require('mnist');
const { PerformanceObserver } = require('node:perf_hooks');
const hora = require('hora');
const { DistributedOptimizer, broadcastModel, shard } = require('hora/tfjs');
const { useFasterCpuKernels } = require('./tfjs-cpu-kernels');

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
const BASELINE = Number(flag('baseline-sps', 'BASELINE_SPS', 0));
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

async function main() {
  const spec = MODELS[MODEL];
  if (!spec) throw new Error(`--model must be one of ${Object.keys(MODELS).join(', ')}, not ${MODEL}`);
  await useCpuBackendQuietly();
  if (!STOCK_KERNELS) useFasterCpuKernels();
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

  log(`hora/tfjs MNIST: ${size} rank(s), ${N_TRAIN} train / ${N_TEST} test digits, global batch ${BATCH} (${local} per rank), ` +
    `${steps} steps per epoch, ${EPOCHS} epochs, ${spec.describe} (${model.countParams()} parameters), Adam lr ${LR}, ` +
    `tfjs ${tf.getBackend()} backend (plain JavaScript, one core per rank)`);
  // Steady state: the epochs after the first (JIT warm-up), each timed from a common start to this rank's
  // last step; the last step's allreduce makes every rank end it together.
  const steady = { ms: 0, steps: 0, waitMs: 0, gcMs: 0 };
  let testAcc = 0;
  for (let epoch = 0; epoch < EPOCHS; epoch++) {
    const order = tf.tensor1d(shuffled([...Array(mine.x.shape[0]).keys()], 1000 * epoch + rank), 'int32');
    let lossSum = 0, accSum = 0;
    const waitBefore = optimizer.stats.waitMs;
    await hora.barrier();
    const gcBefore = gcMsSoFar();
    const t0 = performance.now();
    for (let s = 0; s < steps; s++) {
      const [x, y] = tf.tidy(() => {
        const idx = order.slice(s * local, local);
        return [tf.gather(mine.x, idx), tf.gather(mine.y, idx)];
      });
      const [loss, acc] = await model.trainOnBatch(x, y);
      lossSum += loss; accSum += acc;
      tf.dispose([x, y]);
    }
    const ms = performance.now() - t0;
    await new Promise(setImmediate); // V8 reports GC pauses from the event loop, which the steps never reach
    if (epoch > 0 || EPOCHS === 1) {
      steady.ms += ms; steady.steps += steps;
      steady.waitMs += optimizer.stats.waitMs - waitBefore;
      steady.gcMs += gcMsSoFar() - gcBefore;
    }
    order.dispose();
    const [evalLoss, evalAcc] = tf.tidy(() => model.evaluate(myTest.x, myTest.y, { batchSize: 500 }).map((t) => t.dataSync()[0]));
    const [loss, acc, testLoss, meanTestAcc, rankMs] = await averaged([lossSum / steps, accSum / steps, evalLoss, evalAcc, ms]);
    testAcc = meanTestAcc;
    const sps = (steps * BATCH) / (rankMs / 1000);
    log(`epoch ${epoch + 1}/${EPOCHS}  loss ${loss.toFixed(4)}  acc ${acc.toFixed(4)}  test loss ${testLoss.toFixed(4)}  test acc ${testAcc.toFixed(4)}  ` +
      `${(rankMs / 1000).toFixed(2)} s  ${sps.toFixed(0)} samples/s (${(sps / size).toFixed(0)} per rank)`);
  }

  const [stepMs, waitMs, gcMs] = await averaged([steady.ms / steady.steps, steady.waitMs / steady.steps, steady.gcMs / steady.steps]);
  const sps = BATCH / (stepMs / 1000);
  log(`steady state (epochs ${EPOCHS === 1 ? 1 : `2..${EPOCHS}`}): ${sps.toFixed(0)} samples/s total, ${(sps / size).toFixed(0)} per rank, ` +
    `${stepMs.toFixed(2)} ms per step, of which ${waitMs.toFixed(2)} ms blocked on communication and ${gcMs.toFixed(2)} ms in GC`);
  if (BASELINE > 0) log(`scaling efficiency vs the 1-rank baseline of ${BASELINE.toFixed(0)} samples/s: ${(sps / (size * BASELINE)).toFixed(3)}`);
  log(`test accuracy: ${testAcc.toFixed(4)} (${N_TEST} digits)`);

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
    log(`allreduce of one step's gradients alone: ${commMs.toFixed(3)} ms`);
  }
  if (JSON_OUT) {
    log(JSON.stringify({ size, model: MODEL, batch: BATCH, steps: steady.steps, sps, stepMs, waitMs, gcMs, commMs, testAcc,
      skipAllreduce: process.env.HORA_TFJS_SKIP_ALLREDUCE === '1' }));
  }
  await hora.shutdown();
}

main().catch((e) => {
  console.error(`rank ${process.env.HORA_RANK ?? 0}:`, e);
  process.exit(1);
});
