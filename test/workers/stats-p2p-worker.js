'use strict';
// What a rank's Stats reports (the dashboard's and the status line's figures) say about point-to-point traffic.
// Usage: node stats-p2p-worker.js <scenario>
//   messages  rank 0 sends 5 messages of 1000 float32 to rank 1, then both allreduce once: each rank's Stats
//   pipeline  a 2-stage tfjs pipeline, stage 0 heavy (three 256-wide layers), stage 1 light (one): 6 batches;
//             each rank's Stats and its stage's busy and wall time
// Each rank writes one JSON line to $HORA_TEST_RESULT_DIR/rank-<rank>.json.
const hora = require('../../dist/ts/index.js');
const { runScenarios } = require('../support/worker-util');

const statsNow = () => require('../../dist/ts/hora.js').current('test').dispatcher.stats.snapshot();

async function messages(rank) {
  for (let i = 0; i < 5; i++) {
    if (rank === 0) await hora.send(new Float32Array(1000).fill(i), { to: 1, tag: 7 });
    else await hora.recv(new Float32Array(1000), { from: 0, tag: 7 });
  }
  await hora.allreduce(new Float32Array(10), { name: 'after' });
  return statsNow();
}

async function pipelineSteps(rank) {
  const tf = require('@tensorflow/tfjs');
  const { pipeline } = require('../../dist/adapters/tfjs/index.js');
  const widths = [64, 256, 256, 256, 4];
  const model = tf.sequential({
    layers: widths.slice(1).map((units, i) => tf.layers.dense({ units, activation: 'relu', name: `d${i}`, ...(i === 0 ? { inputShape: [widths[0]] } : {}) })),
  });
  const pipe = pipeline(model, { stages: 2, microBatches: 4, partition: [3, 1] });
  pipe.compile({ optimizer: tf.train.sgd(0.01), loss: 'meanSquaredError' });
  for (let b = 0; b < 6; b++) {
    const x = rank === 0 ? tf.randomNormal([64, widths[0]]) : null;
    const y = rank === 1 ? tf.randomNormal([64, widths[widths.length - 1]]) : null;
    await pipe.trainOnBatch(x, y);
    tf.dispose([x, y].filter(Boolean));
  }
  return statsNow();
}

runScenarios(hora, { messages, pipeline: pipelineSteps });
