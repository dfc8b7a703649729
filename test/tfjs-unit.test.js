'use strict';
// hora/tfjs pieces that need no second rank: fp16/bf16 rounding, option validation, shard, learning rates.
const t = require('tap');
const tf = require('@tensorflow/tfjs');
const hora = require('../dist/ts/index.js');
const tfjs = require('../dist/adapters/tfjs/index.js');

const half = (xs) => Array.from(tfjs.floatToHalf(Float32Array.from(xs)));
const bf16 = (xs) => Array.from(tfjs.floatToBFloat16(Float32Array.from(xs)));

t.test('float32 -> float16 rounds to nearest, ties to even', async (t) => {
  t.same(half([0, -0, 1, -2, 65504, 0.5]), [0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x3800], 'exact values');
  t.same(half([1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20]), [0x3c00, 0x3c02, 0x3c01], 'ties go to even, above a tie goes up');
  t.same(half([65519, 65520, 1e6, Infinity, -Infinity]), [0x7bff, 0x7c00, 0x7c00, 0x7c00, 0xfc00], 'overflow to infinity from 65520');
  t.same(half([2 ** -24, 2 ** -25, 1.5 * 2 ** -25, 3 * 2 ** -25, 2 ** -14 - 2 ** -25, 2 ** -30]), [0x0001, 0x0000, 0x0001, 0x0002, 0x0400, 0x0000], 'subnormals round the same way');
  t.equal(half([NaN])[0] & 0x7e00, 0x7e00, 'NaN stays NaN');
  const all = new Uint16Array(65536).map((_, i) => i);
  const back = tfjs.floatToHalf(tfjs.halfToFloat(all));
  let same = 0;
  for (let i = 0; i < 65536; i++) if (back[i] === all[i] || ((all[i] & 0x7c00) === 0x7c00 && (all[i] & 0x3ff))) same++;
  t.equal(same, 65536, 'every half survives half -> float -> half');
});

t.test('float32 -> bfloat16 rounds to nearest, ties to even', async (t) => {
  t.same(bf16([1, -2, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20]), [0x3f80, 0xc000, 0x3f80, 0x3f82, 0x3f81], 'ties to even');
  t.same(Array.from(tfjs.bfloat16ToFloat(Uint16Array.of(0x3f80, 0xc000, 0x7f80))), [1, -2, Infinity], 'back to float exactly');
  t.ok(Number.isNaN(tfjs.bfloat16ToFloat(tfjs.floatToBFloat16(Float32Array.of(NaN)))[0]), 'NaN stays NaN');
});

t.test('DistributedOptimizer validates its options, naming option and value', async (t) => {
  const sgd = tf.train.sgd(0.1);
  t.throws(() => new tfjs.DistributedOptimizer(sgd, { compression: 'fp8' }), /option 'compression' must be 'none', 'fp16' or 'bf16'; received 'fp8'/);
  t.throws(() => new tfjs.DistributedOptimizer(sgd, { backwardPassesPerStep: 0 }), /option 'backwardPassesPerStep' must be an integer >= 1; received 0/);
  t.throws(() => new tfjs.DistributedOptimizer(sgd, { backwardPassesPerStep: 1.5 }), /received 1.5/);
  t.throws(() => new tfjs.DistributedOptimizer(sgd, { op: 'max' }), /option 'op' must be 'avg' or 'sum'; received 'max'/);
  t.throws(() => new tfjs.DistributedOptimizer({}), /argument 'optimizer' must be a tf.train optimizer/);
  t.throws(() => new tfjs.DistributedOptimizer(sgd, { overlap: 'yes' }), /option 'overlap' must be true or false; received 'yes'/);
  t.throws(() => new tfjs.DistributedOptimizer(sgd, { bucketMB: 0 }), /option 'bucketMB' must be a finite number > 0; received 0/);
  t.throws(() => new tfjs.DistributedOptimizer(sgd, { bucketMB: NaN }), /option 'bucketMB' must be a finite number > 0; received NaN/);
  t.equal(new tfjs.DistributedOptimizer(sgd).overlap, true, 'overlap is on by default');
  t.throws(() => new tfjs.LearningRateWarmupCallback({ warmupEpochs: 0 }), /option 'warmupEpochs' must be a number > 0; received 0/);
});

t.test('DistributedOptimizer delegates to the inner optimizer', async (t) => {
  const opt = new tfjs.DistributedOptimizer(tf.train.adam(0.003));
  t.equal(opt.getClassName(), 'Adam');
  t.same(opt.getConfig(), tf.train.adam(0.003).getConfig());
  t.ok(opt instanceof tf.Optimizer);
  opt.learningRate = 0.5;
  t.equal(opt.optimizer.learningRate, 0.5, 'learningRate sets the inner rate');
  const sgd = tf.train.sgd(0.1);
  tfjs.setLearningRate(sgd, 0.25);
  t.equal(sgd.learningRate, 0.25, 'setLearningRate on SGD');
});

t.test('world of one: DistributedOptimizer is the inner optimizer; backwardPassesPerStep averages k passes', async (t) => {
  await hora.init();
  const v = tf.variable(tf.tensor1d([1, 2]), true, 'unit_v');
  const opt = new tfjs.DistributedOptimizer(tf.train.sgd(1), { backwardPassesPerStep: 2 });
  opt.applyGradients({ unit_v: tf.tensor1d([1, 1]) });
  t.same(Array.from(v.dataSync()), [1, 2], 'first pass only accumulates');
  opt.applyGradients([{ name: 'unit_v', tensor: tf.tensor1d([3, 5]) }]);
  t.same(Array.from(v.dataSync()), [-1, -1], 'second pass applies the mean (2, 3)');
  t.equal(opt.iterations, opt.optimizer.iterations);
  t.throws(() => { opt.applyGradients({ unit_v: tf.tensor1d([1, 1]) }); opt.applyGradients({ other: tf.tensor1d([1, 1]) }); }, /every pass of a step must update the same variables/);
});

t.test('world of one: setSampleCount weighs each pass of a step by its samples', async (t) => {
  await hora.init();
  const v = tf.variable(tf.tensor1d([0, 0]), true, 'unit_w');
  const opt = new tfjs.DistributedOptimizer(tf.train.sgd(1), { backwardPassesPerStep: 2, overlap: false });
  opt.setSampleCount(3);
  opt.applyGradients({ unit_w: tf.tensor1d([1, 2]) });
  opt.setSampleCount(1);
  opt.applyGradients({ unit_w: tf.tensor1d([5, 6]) });
  t.same(Array.from(v.dataSync()), [-2, -3], 'the step applies (3 x [1, 2] + 1 x [5, 6]) / 4, not the mean of the passes');
  opt.setSampleCount(0);
  opt.applyGradients({ unit_w: tf.tensor1d([NaN, NaN]) });
  opt.setSampleCount(2);
  opt.applyGradients({ unit_w: tf.tensor1d([1, 1]) });
  t.same(Array.from(v.dataSync()), [-3, -4], 'a pass of 0 samples contributes nothing, not even its NaN');
  t.throws(() => opt.setSampleCount(-1), /DistributedOptimizer\.setSampleCount: argument 'samples' must be an integer >= 0 or null; received -1/);
  t.throws(() => opt.setSampleCount(2.5), /received 2\.5/);
  v.dispose();
});

t.test('shard: equal contiguous or strided parts along axis 0, tensors and arrays', async (t) => {
  const x = tf.tensor2d([[0], [1], [2], [3], [4], [5], [6]]);
  const y = [0, 1, 2, 3, 4, 5, 6];
  const a = tfjs.shard(x, y, { rank: 1, size: 3 });
  t.same(Array.from(a.x.dataSync()), [2, 3]);
  t.same(a.y, [2, 3]);
  const b = tfjs.shard(x, Int32Array.from(y), { rank: 1, size: 3, mode: 'strided' });
  t.same(Array.from(b.x.dataSync()), [1, 4]);
  t.same(Array.from(b.y), [1, 4]);
  t.ok(b.y instanceof Int32Array, 'typed arrays keep their type');
  t.throws(() => tfjs.shard(x, [1, 2], { rank: 0, size: 2 }), /x has 7 samples but y has 2/);
  t.throws(() => tfjs.shard(x, y, { rank: 3, size: 3 }), /option 'rank' must be an integer from 0 to 2; received 3/);
});

t.test("shard with remainder: 'keep': every sample, parts differing by at most one", async (t) => {
  const x = tf.tensor2d([[0], [1], [2], [3], [4], [5], [6], [7]]);
  const y = [0, 1, 2, 3, 4, 5, 6, 7];
  const parts = (mode) => [0, 1, 2].map((rank) => tfjs.shard(x, y, { rank, size: 3, mode, remainder: 'keep' }));
  t.same(parts('contiguous').map((p) => Array.from(p.x.dataSync())), [[0, 1, 2], [3, 4, 5], [6, 7]], 'contiguous: 3 + 3 + 2');
  t.same(parts('contiguous').map((p) => p.y), [[0, 1, 2], [3, 4, 5], [6, 7]], 'y cut alike');
  t.same(parts('strided').map((p) => Array.from(p.x.dataSync())), [[0, 3, 6], [1, 4, 7], [2, 5]], 'strided: 3 + 3 + 2');
  t.same([0, 1, 2].map((rank) => tfjs.shard(x, y, { rank, size: 3 }).y), [[0, 1], [2, 3], [4, 5]], "the default stays 'drop'");
  t.throws(() => tfjs.shard(x, y, { rank: 0, size: 3, remainder: 'pad' }), /option 'remainder' must be 'drop' or 'keep'; received 'pad'/);
});

t.test('gradient-ready hooks: a dense kernel is ready before tfjs computes its layer\'s input gradient', async (t) => {
  // Each op leaves nodes on the tape whose outputs nothing uses, some with the kernel as input; they are
  // not part of the pass and must not hold the kernel back until the layer below has been computed.
  const { gradientsWithHooks } = require('../dist/adapters/tfjs/hooks.js');
  const model = tf.sequential({ layers: [
    tf.layers.dense({ units: 8, activation: 'relu', inputShape: [5], name: 'ready_low' }),
    tf.layers.dense({ units: 8, activation: 'relu', name: 'ready_mid' }),
    tf.layers.dense({ units: 2, name: 'ready_top' }),
  ] });
  const x = tf.randomNormal([4, 5], 0, 1, 'float32', 2);
  const f = () => tf.losses.meanSquaredError(tf.ones([4, 2]), model.apply(x));
  // Count the products tfjs runs, whatever op asks for them.
  const kernels = ['BatchMatMul', '_FusedMatMul'].map((name) => tf.getKernel(name, tf.getBackend())).filter(Boolean);
  t.ok(kernels.length > 0, 'the backend has a matrix product kernel to count');
  let products = 0;
  const originals = kernels.map((k) => k.kernelFunc);
  kernels.forEach((k, i) => { k.kernelFunc = (args) => { products++; return originals[i](args); }; });
  const at = {};
  let forwardProducts = 0;
  try {
    const { value, grads } = gradientsWithHooks(f, undefined, {
      forwardEnded: () => { forwardProducts = products; },
      ready: (name) => { at[name] = products - forwardProducts; },
    });
    tf.dispose([value, ...Object.values(grads)]);
  } finally {
    kernels.forEach((k, i) => { k.kernelFunc = originals[i]; });
  }
  const mid = Object.keys(at).find((n) => n.startsWith('ready_mid') && n.endsWith('kernel'));
  const low = Object.keys(at).find((n) => n.startsWith('ready_low') && n.endsWith('kernel'));
  t.ok(mid && low, 'both kernels were reported');
  // The pass multiplies: top kernel, top input, mid kernel, mid input, low kernel (no gradient for x).
  t.equal(at[mid], 3, 'the middle kernel leaves after the three products down to its own, before its input gradient');
  t.equal(at[low], 5, 'the lowest kernel after the five products of the pass');
  tf.dispose(x);
});

t.test('gradient-ready hooks report every gradient bit for bit as tfjs returns it, top layer first', async (t) => {
  const { gradientsWithHooks } = require('../dist/adapters/tfjs/hooks.js');
  const input = tf.input({ shape: [3] });
  const twice = tf.layers.dense({ units: 3, activation: 'tanh', name: 'hooks_twice' });
  const top = tf.layers.dense({ units: 2, name: 'hooks_top' });
  const lstm = tf.layers.lstm({ units: 2, name: 'hooks_lstm' });
  const out = top.apply(lstm.apply(tf.layers.reshape({ targetShape: [3, 1] }).apply(twice.apply(twice.apply(input)))));
  const model = tf.model({ inputs: input, outputs: out });
  const x = tf.randomNormal([4, 3], 0, 1, 'float32', 1);
  const f = () => tf.losses.meanSquaredError(tf.ones([4, 2]), model.apply(x));
  const varList = model.trainableWeights.map((w) => w.read());
  const seen = [];
  let forward = 0;
  const { value, grads, followed } = gradientsWithHooks(f, varList, {
    forwardEnded: () => { forward++; },
    ready: (name, values) => seen.push([name, Float32Array.from(values)]),
  });
  const expected = tf.variableGrads(f, varList).grads;
  t.equal(forward, 1, 'the forward end is signalled once');
  t.same(seen.map(([n]) => n).sort(), Object.keys(expected).sort(), 'every variable with a gradient was reported once');
  t.equal(followed.size, seen.length, 'and counted as followed');
  for (const [name, values] of seen) {
    t.same(Buffer.from(values.buffer), Buffer.from(grads[name].dataSync().buffer), `${name}: the value tfjs returns from this pass`);
    t.same(Buffer.from(values.buffer), Buffer.from(expected[name].dataSync().buffer), `${name}: the value of a pass without hooks`);
  }
  const order = seen.map(([n]) => n);
  t.ok(order.indexOf('hooks_top/kernel') < order.indexOf('hooks_lstm/kernel'), 'the top layer is ready before the LSTM');
  t.ok(order.indexOf('hooks_lstm/kernel') < order.indexOf('hooks_twice/kernel'), 'the LSTM before the layer used twice');
  tf.dispose([value, x, ...Object.values(grads), ...Object.values(expected)]);
});
