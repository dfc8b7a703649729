'use strict';
// examples/tfjs-mnist.js (npm run demo) trains on 2 ranks, opens with its own line, measures its scaling efficiency
// and hora's cost per step in the same run, says what that cost is made of, and prints the JSON summary that
// bench/scaling.sh reads. (The cpu kernels it uses, hora/tfjs's useFasterCpuKernels: test/tfjs-cpu-kernels.test.js.)
const t = require('tap');
const path = require('node:path');
const { runJob, tail, ROOT } = require('./support/hora-job');

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
  t.match(job.stdout, /\[0\] hora's cost per step: .*the same 64-sample step with plain Adam took \d+\.\d\d ms \(6 steps per rank\)/,
    'it prints hora\'s cost: the step without the allreduce against the step with it');
  // The wait in the optimizer and the allreduce alone are parts of that cost, each said to be what it is.
  const parts = lines.find((l) => l.startsWith('[0]   in that step, '));
  t.ok(parts, 'it says what the cost is made of, on the line after it', { output: tail(job) });
  t.equal(lines.indexOf(parts), lines.findIndex((l) => l.startsWith('[0] hora\'s cost per step: ')) + 1, 'right after the cost');
  t.match(parts, `in that step, ${summary.waitMs.toFixed(2)} ms waiting for the gradients' allreduce (Work.wait): ${summary.commMs.toFixed(3)} ms is the allreduce itself (timed alone after training, nothing else running)`,
    'the wait and the allreduce alone, as the summary has them');
  if (summary.waitMs > summary.commMs) t.match(parts, `; the rest, ${(summary.waitMs - summary.commMs).toFixed(2)} ms, is waiting for the slowest rank to reach it`, 'and what the rest of the wait is');
  t.notMatch(job.stdout, /blocked on communication|allreduce of one step's gradients alone/, 'no figure of the cost that does not say what it measures');
  t.ok(summary.testAcc > 0.6, `it learns: test accuracy ${summary.testAcc} > 0.6 after 30 steps`);
});
