'use strict';
// hora/tfjs useFasterCpuKernels(tf): the kernels it registers on the tfjs instance passed in compute what tfjs's
// own cpu kernels compute (bit-identical, except max-pool gradients of overlapping windows, within 1e-6), it
// can be undone, a second call changes nothing, and a wrong argument is refused with a clear error.
const t = require('tap');
const path = require('node:path');
const tf = require('@tensorflow/tfjs');
const { ROOT } = require('./support/hora-job');

const { useFasterCpuKernels } = require(path.join(ROOT, 'dist', 'adapters', 'tfjs', 'index.js'));
const KERNELS = ['Conv2DBackpropFilter', 'MaxPoolGrad', 'Sum'];

t.test('the kernels give the results of tfjs\'s own', async (t) => {
  await tf.setBackend('cpu');
  const backend = tf.backend();
  const stock = Object.fromEntries(KERNELS.map((k) => [k, tf.getKernel(k, 'cpu').kernelFunc]));
  const restore = useFasterCpuKernels(tf);
  t.teardown(restore);
  t.ok(KERNELS.every((k) => tf.getKernel(k, 'cpu').kernelFunc !== stock[k]), 'all three are replaced on this tf instance');

  /** Largest |difference| between tfjs's kernel and the registered one; -1 when the shapes differ. */
  const difference = (name, inputs, attrs) => {
    const expected = stock[name]({ inputs, backend, attrs });
    const got = tf.engine().runKernel(name, inputs, attrs);
    if (JSON.stringify(expected.shape) !== JSON.stringify(got.shape)) return -1;
    const a = backend.data.get(expected.dataId).values, b = got.dataSync();
    let worst = 0;
    for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
    return worst;
  };

  for (const [xShape, filterShape, strides, pad] of [
    [[4, 12, 12, 8], [5, 5, 8, 16], [1, 1], 'valid'],
    [[3, 9, 10, 2], [3, 3, 2, 4], [2, 2], 'same'],
    [[2, 28, 28, 1], [5, 5, 1, 8], [1, 2], 'same'],
  ]) {
    const x = tf.relu(tf.randomNormal(xShape));
    const dy = tf.randomNormal(tf.conv2d(x, tf.randomNormal(filterShape), strides, pad).shape);
    t.equal(difference('Conv2DBackpropFilter', { x, dy }, { strides, pad, dataFormat: 'NHWC', filterShape }), 0,
      `conv2d filter gradient, x ${xShape}, filter ${filterShape}, strides ${strides}, ${pad}: bit-identical`);
  }

  for (const [xShape, filterSize, strides, pad, tolerance] of [
    [[4, 24, 24, 8], [2, 2], [2, 2], 'valid', 0],
    [[2, 7, 7, 3], [2, 2], [2, 2], 'valid', 0],
    [[3, 9, 10, 2], [3, 3], [2, 2], 'same', 1e-6], // overlapping windows: sums may round differently
  ]) {
    const input = tf.relu(tf.randomNormal(xShape)); // ReLU output: many ties at 0, where the first maximum wins
    const output = tf.maxPool(input, filterSize, strides, pad);
    const d = difference('MaxPoolGrad', { dy: tf.randomNormal(output.shape), input, output }, { filterSize, strides, pad });
    t.ok(d >= 0 && d <= tolerance, `max-pool gradient, x ${xShape}, window ${filterSize}, ${pad}: difference ${d} <= ${tolerance}`);
  }

  for (const [xShape, axis, keepDims] of [
    [[64, 24, 24, 8], [0, 1, 2], false], [[64, 10], [0], false], [[5, 6, 7], [1, 0], true], // its own path
    [[5, 6, 7], [0, 2], false], [[5, 6, 7], -1, false], [[5, 6, 7], null, true], // tfjs's kernel
  ]) {
    t.equal(difference('Sum', { x: tf.randomNormal(xShape) }, { axis, keepDims }), 0,
      `sum of ${xShape} over axis ${JSON.stringify(axis)}, keepDims ${keepDims}: bit-identical`);
  }

  // A model's gradients through all three, with the kernels and without: the same to the last bit.
  const model = () => {
    const m = tf.sequential({ layers: [
      tf.layers.conv2d({ inputShape: [12, 12, 1], filters: 4, kernelSize: 3, activation: 'relu', kernelInitializer: tf.initializers.glorotUniform({ seed: 1 }) }),
      tf.layers.maxPooling2d({ poolSize: 2 }), tf.layers.flatten(),
      tf.layers.dense({ units: 3, kernelInitializer: tf.initializers.glorotUniform({ seed: 2 }) }),
    ] });
    return m;
  };
  const x = tf.randomNormal([8, 12, 12, 1], 0, 1, 'float32', 3), y = tf.oneHot(tf.tensor1d([0, 1, 2, 0, 1, 2, 0, 1], 'int32'), 3);
  const gradients = (m) => {
    const { grads } = tf.variableGrads(() => tf.losses.softmaxCrossEntropy(y, m.predict(x)), m.trainableWeights.map((w) => w.val));
    return Object.values(grads).map((g) => Array.from(g.dataSync()));
  };
  const m = model();
  const faster = gradients(m);
  restore();
  t.ok(KERNELS.every((k) => tf.getKernel(k, 'cpu').kernelFunc === stock[k]), 'the function it returned puts tfjs\'s own kernels back');
  t.same(faster, gradients(m), 'a small CNN\'s gradients (conv, 2x2 max-pool, dense) are bit-identical with and without them');
});

t.test('a second call changes nothing; a wrong argument is refused', async (t) => {
  const first = useFasterCpuKernels(tf);
  t.teardown(first);
  const registered = KERNELS.map((k) => tf.getKernel(k, 'cpu').kernelFunc);
  t.equal(useFasterCpuKernels(tf), first, 'the same restore function');
  t.same(KERNELS.map((k) => tf.getKernel(k, 'cpu').kernelFunc), registered, 'and the same kernels (not wrapped twice)');
  for (const wrong of [undefined, null, {}, tf.layers]) {
    t.throws(() => useFasterCpuKernels(wrong), { code: 'ERR_INVALID_ARGUMENT', message: /hora\/tfjs useFasterCpuKernels: argument 'tf' must be the @tensorflow\/tfjs module your model uses .*; received / },
      `refuses ${wrong === tf.layers ? 'tf.layers' : JSON.stringify(wrong)}`);
  }
});
