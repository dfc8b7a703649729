// The ONNX Runtime training artifacts the hora/onnxruntime tests train: the project's own (always there) and
// ORT's MNIST test artifacts from ../shared (when that folder is there). Each test runs on every set it finds
// and says, as a skip, which set is missing. The worker reads the set's folder from ORT_ARTIFACTS.
const fs = require('node:fs');
const path = require('node:path');
const { ROOT } = require('./hora-job');

const SETS = [
  { name: 'the project\'s MLP 784-32-10 (test/fixtures)', dir: path.join(ROOT, 'test', 'fixtures', 'onnxruntime-training'), parameters: 25450, own: true },
  { name: 'ORT\'s MNIST MLP 784-500-10 (../shared)', dir: path.join(ROOT, '..', 'shared', 'fixtures', 'onnxruntime-training'), parameters: 397510, own: false },
];

/** Every set, with `missing`: null when its files are there, else why it is skipped. */
function artifactSets() {
  return SETS.map((s) => ({
    ...s,
    env: { ORT_ARTIFACTS: s.dir },
    missing: fs.existsSync(path.join(s.dir, 'training_model.onnx')) ? null : `the artifacts are absent (looked in ${s.dir})`,
  }));
}

module.exports = { artifactSets };
