'use strict';
// hora/onnxruntime loads onnxruntime-web's training build by itself when create() is given no {ort}, although
// the package's "exports" hide both that build and its package.json from Node.
const t = require('tap');
const path = require('node:path');
const { ROOT } = require('./support/hora-job');

let installed = true;
try {
  require.resolve('onnxruntime-web', { paths: [ROOT] });
} catch {
  installed = false;
}

t.test('loadOrtTraining finds the training build', { skip: installed ? false : 'onnxruntime-web is not installed' }, async (t) => {
  const { loadOrtTraining } = require(path.join(ROOT, 'dist', 'adapters', 'onnxruntime', 'index.js'));
  const ort = loadOrtTraining();
  t.equal(typeof ort.TrainingSession?.create, 'function', 'it has TrainingSession.create');
  t.equal(typeof ort.Tensor, 'function', 'and Tensor');
  t.equal(ort.env.wasm.numThreads, 1, 'single-threaded wasm, as hora sets it');
});
