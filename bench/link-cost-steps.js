'use strict';
// bench/link-cost.sh's trainer: the overlap benchmark's MLP trained alone with its plain optimizer (no hora,
// no communication), one JSON line per step with its start and end (ms since the epoch), so that the script
// can tell the steps that ran beside a stream from those that did not.
//   node bench/link-cost-steps.js STEPS [LAYERS=784,1024,1024,1024,1024,1024,10] [BATCH=64]
const tf = require('@tensorflow/tfjs');

const steps = Number(process.argv[2] || 40);
const layers = (process.argv[3] || '784,1024,1024,1024,1024,1024,10').split(',').map(Number);
const batch = Number(process.argv[4] || 64);

async function main() {
  const model = tf.sequential({
    layers: layers.slice(1).map((units, i) => tf.layers.dense({
      units, activation: i === layers.length - 2 ? 'softmax' : 'relu', ...(i === 0 ? { inputShape: [layers[0]] } : {}),
    })),
  });
  model.compile({ optimizer: tf.train.sgd(0.01), loss: 'categoricalCrossentropy' });
  const x = tf.randomNormal([batch, layers[0]], 0, 1, 'float32', 1);
  const y = tf.oneHot(tf.randomUniform([batch], 0, layers[layers.length - 1], 'int32', 2), layers[layers.length - 1]).asType('float32');
  for (let i = 0; i < steps; i++) {
    const start = Date.now();
    await model.trainOnBatch(x, y);
    process.stdout.write(JSON.stringify({ start, end: Date.now() }) + '\n');
  }
}

main().catch((e) => {
  process.stderr.write(`link-cost-steps: ${e && e.stack}\n`);
  process.exit(1);
});
