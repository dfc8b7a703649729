'use strict';
// examples/tfjs-mnist.js (npm run demo): its replacement cpu kernels compute what tfjs's own compute, and it trains
// on 2 ranks, opens with its own line, measures its scaling efficiency and hora's share of a step in the same run,
// and prints the JSON summary that bench/scaling.sh reads.
const t = require('tap');
const path = require('node:path');
const tf = require('@tensorflow/tfjs');
const { runJob, tail, ROOT } = require('./support/hora-job');

const KERNELS = ['Conv2DBackpropFilter', 'MaxPoolGrad', 'Sum'];

t.test('the example\'s cpu kernels give the results of tfjs\'s own', async (t) => {
  await tf.setBackend('cpu');
  const backend = tf.backend();
  const stock = Object.fromEntries(KERNELS.map((k) => [k, tf.getKernel(k, 'cpu').kernelFunc]));
  require(path.join(ROOT, 'examples', 'tfjs-cpu-kernels.js')).useFasterCpuKernels();
  t.teardown(() => {
    for (const k of KERNELS) {
      tf.unregisterKernel(k, 'cpu');
      tf.registerKernel({ kernelName: k, backendName: 'cpu', kernelFunc: stock[k] });
    }
  });
  t.ok(KERNELS.every((k) => tf.getKernel(k, 'cpu').kernelFunc !== stock[k]), 'all three are replaced');

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
});

t.test('examples/tfjs-mnist.js trains on 2 ranks, measures its scaling and prints the summary bench/scaling.sh reads', async (t) => {
  const job = await runJob(2, path.join(ROOT, 'examples', 'tfjs-mnist.js'),
    { args: ['--train', '2000', '--test', '200', '--epochs', '2', '--json'] });
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  t.match(job.stdout, /\[0\] epoch 2\/2 .* test acc /, 'rank 0 logs every epoch');
  t.notMatch(job.stdout, /\[1\] epoch/, 'rank 1 does not log');
  const line = job.stdout.split('\n').find((l) => l.startsWith('[0] {'));
  t.ok(line, 'rank 0 prints one JSON summary line', { output: tail(job) });
  const summary = JSON.parse(line.slice(4));
  t.match(summary, { size: 2, model: 'cnn', batch: 128, steps: 15, skipAllreduce: false }, 'the run it describes');
  for (const key of ['sps', 'stepMs', 'waitMs', 'gcMs', 'commMs']) {
    t.ok(Number.isFinite(summary[key]) && summary[key] >= 0, `${key} is a number >= 0 (${summary[key]})`);
  }
  t.ok(summary.commMs > 0, 'the allreduce of one step\'s gradients alone is timed');

  const lines = job.stdout.split('\n');
  t.match(lines[0], /^\[0\] hora\/tfjs MNIST: 2 rank\(s\), .* tfjs cpu backend/, 'the first line is the example\'s own', { output: tail(job) });
  t.notMatch(`${job.stdout}${job.stderr}`, /looks like you are running TensorFlow\.js|tfjs-node for more details/, 'no tfjs-node banner');
  t.notMatch(job.stderr, /^\s+at /m, 'no stack trace', { stderr: job.stderr });
  // Efficiency = samples/s of the 2-rank steps / (2 x samples/s of one process stepping the global batch alone).
  for (const key of ['baselineStepMs', 'plainStepMs', 'efficiency', 'commFactor']) {
    t.ok(Number.isFinite(summary[key]) && summary[key] > 0, `${key} is a number > 0 (${summary[key]})`);
  }
  t.ok(Math.abs(summary.efficiency - summary.baselineStepMs / (2 * summary.stepMs)) < 1e-9 * summary.efficiency,
    'efficiency = baseline step / (2 x 2-rank step)');
  t.ok(Math.abs(summary.commFactor - summary.plainStepMs / summary.stepMs) < 1e-9 * summary.commFactor,
    'hora\'s factor = step without hora / step with it');
  const efficiency = lines.find((l) => l.startsWith('[0] scaling efficiency '));
  t.match(efficiency, /^\[0\] scaling efficiency (\d+\.\d{3}): \d+ samples\/s on 2 ranks against 2 x \d+ for one process on the global batch of 128$/,
    'rank 0 prints the scaling efficiency against one process on the same global batch', { output: tail(job) });
  t.equal(efficiency && efficiency.split(' ')[3].replace(':', ''), summary.efficiency.toFixed(3), 'the printed efficiency is the measured one');
  t.match(job.stdout, /\[0\]   measured in this run: after each epoch, all ranks at once .* timed 3 steps of batch 128 .* without hora \(3 steps per rank in epochs 2\.\.2\)/,
    'it says how the baseline was measured');
  t.match(job.stdout, /\[0\] hora's share of a step: .*the same 64-sample step with plain Adam took \d+\.\d\d ms \(6 steps per rank\)/,
    'it prints hora\'s share: the step without the allreduce against the step with it');
  t.ok(summary.testAcc > 0.6, `it learns: test accuracy ${summary.testAcc} > 0.6 after 30 steps`);
});
