'use strict';
// Data-parallel training of a handwritten-digit classifier (real MNIST digits from the `mnist` package)
// with hora/tfjs. Every rank trains its shard of the training set; one DistributedOptimizer line makes the
// ranks apply the same averaged gradients, so N ranks train like one process on the same global batch.
//
//   node dist/ts/cli/main.js run -np 2 node examples/tfjs-mnist.js          (or: npm run demo)
//   node examples/tfjs-mnist.js                                             (one rank)
//
// Flags (or environment): --epochs N (EPOCHS, default 4), --batch B global batch (BATCH, default 128),
// --lr (default 0.001), --train / --test sample counts (default 8000 / 2000), --baseline-sps S: the 1-rank
// samples/s of the same global batch, to print the scaling efficiency, --json: one JSON summary line at
// the end (bench/scaling.sh reads it).
const tf = require('@tensorflow/tfjs');
const mnist = require('mnist');
const hora = require('hora');
const { DistributedOptimizer, broadcastModel, shard } = require('hora/tfjs');

function flag(name, env, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i > 0 && process.argv[i + 1] !== undefined) return process.argv[i + 1];
  return process.env[env] ?? fallback;
}
const EPOCHS = Number(flag('epochs', 'EPOCHS', 4));
const BATCH = Number(flag('batch', 'BATCH', 128));
const LR = Number(flag('lr', 'LR', 0.001));
const N_TRAIN = Number(flag('train', 'N_TRAIN', 8000));
const N_TEST = Number(flag('test', 'N_TEST', 2000));
const BASELINE = Number(flag('baseline-sps', 'BASELINE_SPS', 0));
const JSON_OUT = process.argv.includes('--json');

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

/** mnist.set() shuffles with Math.random; take the same samples per digit ourselves and shuffle with a seed. */
function digits() {
  const perTrain = N_TRAIN / 10, perTest = N_TEST / 10;
  let train = [], test = [];
  for (let d = 0; d < 10; d++) {
    train = train.concat(mnist[d].set(0, perTrain - 1));
    test = test.concat(mnist[d].set(perTrain, perTrain + perTest - 1));
  }
  const tensors = (set) => ({
    x: tf.tensor2d(Float32Array.from(set.flatMap((s) => s.input)), [set.length, 784]),
    y: tf.tensor2d(Float32Array.from(set.flatMap((s) => s.output)), [set.length, 10]),
  });
  return { train: tensors(shuffled(train, 42)), test: tensors(test) };
}

function buildModel() {
  return tf.sequential({
    layers: [
      tf.layers.dense({ inputShape: [784], units: 128, activation: 'relu' }),
      tf.layers.dense({ units: 64, activation: 'relu' }),
      tf.layers.dense({ units: 10, activation: 'softmax' }),
    ],
  });
}

/** Mean over ranks of a few numbers. */
async function averaged(values) {
  return Array.from(await hora.allreduce(Float64Array.from(values), { op: 'avg' }));
}

async function main() {
  await hora.init();
  const rank = hora.rank(), size = hora.size();
  const log = (...a) => { if (rank === 0) console.log(...a); };
  if (BATCH % size !== 0) throw new Error(`--batch ${BATCH} must be divisible by the number of ranks (${size})`);

  const data = digits();
  const mine = shard(data.train.x, data.train.y); // this rank's contiguous 1/size of the shuffled set
  const myTest = shard(data.test.x, data.test.y);
  const local = BATCH / size;
  const steps = Math.floor(mine.x.shape[0] / local);

  const model = buildModel();
  const optimizer = new DistributedOptimizer(tf.train.adam(LR));
  model.compile({ optimizer, loss: 'categoricalCrossentropy', metrics: ['accuracy'] });
  await broadcastModel(model); // rank 0's random initial weights everywhere

  log(`hora/tfjs MNIST: ${size} rank(s), ${N_TRAIN} train / ${N_TEST} test digits, global batch ${BATCH} (${local} per rank), ` +
    `${steps} steps per epoch, ${EPOCHS} epochs, MLP 784-128-64-10 (${model.countParams()} parameters), Adam lr ${LR}`);
  const epochSps = [];
  let trainMs = 0, trainSteps = 0, waitMs0 = 0;
  for (let epoch = 0; epoch < EPOCHS; epoch++) {
    const order = tf.tensor1d(shuffled([...Array(mine.x.shape[0]).keys()], 1000 * epoch + rank), 'int32');
    let lossSum = 0, accSum = 0;
    const waitBefore = optimizer.stats.waitMs;
    await hora.barrier().catch(() => undefined); // start every epoch's clock together
    const t0 = performance.now();
    for (let s = 0; s < steps; s++) {
      const idx = order.slice(s * local, local);
      const x = tf.gather(mine.x, idx), y = tf.gather(mine.y, idx);
      const [loss, acc] = await model.trainOnBatch(x, y);
      lossSum += loss; accSum += acc;
      tf.dispose([idx, x, y]);
    }
    const ms = performance.now() - t0;
    order.dispose();
    if (epoch > 0 || EPOCHS === 1) { trainMs += ms; trainSteps += steps; waitMs0 += optimizer.stats.waitMs - waitBefore; }
    const [evalLoss, evalAcc] = model.evaluate(myTest.x, myTest.y, { batchSize: 500 }).map((t) => t.dataSync()[0]);
    const [loss, acc, testLoss, testAcc, rankMs] = await averaged([lossSum / steps, accSum / steps, evalLoss, evalAcc, ms]);
    const sps = (steps * BATCH) / (rankMs / 1000);
    epochSps.push(sps);
    log(`epoch ${epoch + 1}/${EPOCHS}  loss ${loss.toFixed(4)}  acc ${acc.toFixed(4)}  test loss ${testLoss.toFixed(4)}  test acc ${testAcc.toFixed(4)}  ` +
      `${(rankMs / 1000).toFixed(2)} s  ${sps.toFixed(0)} samples/s (${(sps / size).toFixed(0)} per rank)`);
  }

  // Steady state: epochs after the first (JIT warm-up), averaged over ranks.
  const [stepMs, waitMs] = await averaged([trainMs / trainSteps, waitMs0 / trainSteps]);
  const sps = BATCH / (stepMs / 1000);
  log(`steady state (epochs 2..${EPOCHS}): ${sps.toFixed(0)} samples/s total, ${(sps / size).toFixed(0)} per rank, ` +
    `${stepMs.toFixed(2)} ms per step, of which ${waitMs.toFixed(2)} ms blocked on communication`);
  if (BASELINE > 0) log(`scaling efficiency vs the 1-rank baseline of ${BASELINE.toFixed(0)} samples/s: ${(sps / (size * BASELINE)).toFixed(3)}`);

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
    log(`allreduce of one step's gradients alone: ${commMs.toFixed(2)} ms`);
  }
  if (JSON_OUT) log(JSON.stringify({ size, batch: BATCH, sps, stepMs, waitMs, commMs, testAcc: null, skipAllreduce: process.env.HORA_TFJS_SKIP_ALLREDUCE === '1' }));
  await hora.shutdown();
}

main().catch((e) => {
  console.error(`rank ${process.env.HORA_RANK ?? 0}:`, e);
  process.exit(1);
});
