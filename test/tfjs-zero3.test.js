'use strict';
// DistributedOptimizer with shard: 'weights' (ZeRO stage 3, issue 41): each rank keeps 1/N of each weight, the
// layers allgather their weights in the forward and backward pass and reduce-scatter their gradients. It ends
// where the unsharded DistributedOptimizer ends (2, 3 and 4 ranks, counts that do not divide by the world size,
// Dense and Conv2D, model.fit and a minimize loop, SGD and momentum within 1e-6 relative, Adam and RMSProp within
// 1e-5), with the gathered weights bit-identical on every rank; getWeights, predict, save and saveCheckpoint see
// full weights; layers it cannot shard are refused by name; the tensor bytes held between steps are 1/N. These
// run with the default overlap: true (prefetched allgathers, reduce-scatters waited for in applyGradients); the
// 'overlap' scenario checks that overlap: false ends with the same weights, bit for bit.
// test/workers/tfjs-zero3-worker.js trains; this file asserts.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { runScenario } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'tfjs-zero3-worker.js');
const TOLERANCE = { sgd: 1e-6, momentum: 1e-6, adam: 1e-5, rmsprop: 1e-5 };
const FULL_SHAPES = { dense: [[7, 5], [5], [5, 3], [3]], conv: [[3, 3, 2, 3], [3], [48, 2], [2]] };

/** The blocks of reduceScatter: the first count % size ranks one element more. */
const blockLength = (count, size, rank) => Math.floor(count / size) + (rank < count % size ? 1 : 0);
const countOf = (shape) => shape.reduce((a, b) => a * b, 1);

for (const np of [2, 3, 4]) {
  t.test(`${np} ranks: shard: 'weights' ends where the unsharded optimizer ends, Dense and Conv2D, fit and a loop`, async (t) => {
    const { results } = await runScenario(t, np, WORKER, 'compare');
    const first = results[0];
    t.ok(first && Object.keys(first).length === 16, 'rank 0 ran 2 models x 4 optimizers x 2 ways', { keys: first && Object.keys(first) });
    for (const [key, got] of Object.entries(first || {})) {
      const [kind, opt] = key.split(' ');
      const tol = TOLERANCE[opt];
      t.ok(got.weights.every((r) => r <= tol), `${key}: every weight within ${tol} relative of the unsharded run`, { relative: got.weights });
      t.ok(Array.isArray(got.state) && got.state.every((r) => r <= tol), `${key}: the optimizer state (getWeights, gathered) within ${tol}`, { state: got.state });
      t.ok(got.predict <= tol, `${key}: predict() within ${tol}`, { predict: got.predict });
      t.same(got.shapes.sharded, FULL_SHAPES[kind], `${key}: model.getWeights() gives the full shapes`);
      t.ok(got.setWeights, `${key}: model.setWeights() of the unsharded model's weights gives them back, bit for bit`);
      t.ok(got.evaluate, `${key}: then model.evaluate() gives the unsharded model's loss, bit for bit`);
      t.same(got.saved.sharded.map((s) => s.shape), FULL_SHAPES[kind], `${key}: model.save() writes the full shapes`);
      for (const [rank, r] of results.entries()) {
        t.equal(r && r[key].hash, got.hash, `${key}: rank ${rank}'s gathered weights are bit-identical to rank 0's`);
        t.same(r && r[key].trainable, FULL_SHAPES[kind].map((s) => [blockLength(countOf(s), np, rank)]),
          `${key}: rank ${rank} trains its block of each weight (reduceScatter's split)`);
      }
    }
  });
}

t.test('3 ranks: compression, backwardPassesPerStep, op sum, a tf.model, Adamax, Adagrad and Adadelta work with shard: weights', async (t) => {
  const { results } = await runScenario(t, 3, WORKER, 'options');
  const tolerance = { fp16: 1e-3, bf16: 1e-2, 'backwardPassesPerStep 2': 1e-5, 'op sum': 1e-5, adamax: 1e-5, adagrad: 1e-5, adadelta: 1e-5, functional: 1e-5 };
  for (const [rank, result] of results.entries()) {
    for (const [name, tol] of Object.entries(tolerance)) {
      const got = result && result[name];
      t.ok(got && got.weights.every((r) => r <= tol), `rank ${rank}, ${name}: weights within ${tol} of the unsharded optimizer with the same options`, { got: got && got.weights });
      t.equal(got && got.hash, results[0] && results[0][name].hash, `rank ${rank}, ${name}: weights bit-identical to rank 0's`);
      t.ok(got && got.setWeights && got.evaluate, `rank ${rank}, ${name}: setWeights and evaluate as unsharded`);
    }
  }
});

for (const np of [2, 3]) {
  t.test(`${np} ranks: overlap prefetches the next layer's allgather and defers the reduce-scatters, with the weights of overlap: false, bit for bit`, async (t) => {
    const { results } = await runScenario(t, np, WORKER, 'overlap');
    const first = results[0];
    t.ok(first && Object.keys(first).length === 9, 'rank 0 ran 8 models and options, and the reordered MLP', { keys: first && Object.keys(first) });
    for (const [key, got] of Object.entries(first || {})) {
      t.ok(got.identical, `${key}: overlap: true ends with the weights of overlap: false, bit for bit`);
      t.same(got.off, { prefetched: 0, onDemand: 0, dropped: 0, deferred: 0, waitedEarly: 0, maxInFlightAtLayer: 0 }, `${key}: overlap: false starts nothing ahead`);
      if (key !== 'reordered') {
        // 2 sharded layers, 4 passes: after the first, each pass's second layer (forward and backward) has its
        // weights gathered ahead by the first; the first layer of a pass is gathered when it starts.
        t.same([got.on.prefetched, got.on.onDemand], [2 * 3, 2 * 4 + 2], `${key}: with overlap each layer after a pass's first was gathered by the layer before`, { stats: got.on });
      } else {
        t.ok(got.on.prefetched > 0, `${key}: with overlap some layer allgathers were started by the layer before`, { stats: got.on });
      }
      t.ok(got.on.deferred > 0, `${key}: the gradients' reduce-scatters were left in flight past their layer's backward`, { stats: got.on });
      t.ok(got.on.maxInFlightAtLayer >= 1, `${key}: a layer's backward began with an earlier layer's reduce-scatter still in flight`, { stats: got.on });
      if (key !== 'reordered') t.equal(got.on.dropped, 0, `${key}: the same order every step: no prefetch dropped`);
      for (const [rank, r] of results.entries()) t.equal(r && r[key].hash, got.hash, `${key}: rank ${rank}'s weights are bit-identical to rank 0's`);
    }
    const bounded = first && first['conv adam fit bucketMB 0.0001'];
    t.ok(bounded && bounded.on.waitedEarly > 0, 'bucketMB bounds the gradient bytes in flight: older reduce-scatters were waited for in the backward', { stats: bounded && bounded.on });
    const reordered = first && first.reordered;
    t.ok(reordered && reordered.on.dropped > 0, 'layers run in another order than learnt: the prefetch is dropped and the layer gathered on demand', { stats: reordered && reordered.on });
    t.ok(reordered && reordered.relative.every((r) => r <= 1e-5), 'and the weights end within 1e-5 of the unsharded optimizer (a layer run twice in a pass included)', { relative: reordered && reordered.relative });
  });
}

t.test('layers that cannot be sharded, and a missing model, are ERR_INVALID_ARGUMENT naming them; nothing changes', async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'refused');
  for (const [rank, r] of results.entries()) {
    if (!r) continue;
    for (const k of ['batchNorm', 'lstm', 'noModel', 'notAModel', 'modelAlone', 'badShard', 'elastic', 'elasticNoCheckpoint', 'twice', 'lamb']) {
      t.equal(r[k].code, 'ERR_INVALID_ARGUMENT', `rank ${rank}, ${k}: ERR_INVALID_ARGUMENT`, { got: r[k] });
    }
    t.match(r.batchNorm.message, /cannot shard layer 'bn_refused' \(BatchNormalization\): it updates its moving mean/, `rank ${rank}: names the batch-norm layer and why`);
    t.match(r.lstm.message, /cannot shard layer 'lstm_refused' \(LSTM\): a recurrent layer/, `rank ${rank}: names the LSTM layer and why`);
    t.match(r.noModel.message, /option 'model' must be a tf.LayersModel .*received undefined/, `rank ${rank}: a missing model names the option`);
    t.match(r.notAModel.message, /option 'model' must be .*received number 42/, `rank ${rank}: a number for a model`);
    t.match(r.modelAlone.message, /option 'model' is used with shard: 'weights' only/, `rank ${rank}: a model without shard`);
    t.match(r.badShard.message, /option 'shard' must be .*received the string "everything"/, `rank ${rank}: an unknown shard`);
    t.match(r.elastic.message, /ElasticState: argument 'optimizer' must be the DistributedOptimizer with shard: 'weights' that shards this model's weights .*received undefined/,
      `rank ${rank}: ElasticState of a sharded model without its optimizer names the optimizer`);
    t.match(r.elasticNoCheckpoint.message, /ElasticState: argument 'options.checkpoint' must be an object \{dir, everySteps\} with a DistributedOptimizer of shard 'weights' \(each rank holds only its part of the weights and the optimizer state/,
      `rank ${rank}: ElasticState with shard 'weights' needs the checkpoint option`);
    t.match(r.twice.message, /not sharded yet/, `rank ${rank}: a model is sharded once`);
    t.match(r.lamb.message, /argument 'optimizer' must be one of tf.train's elementwise optimizers .*shard: 'weights'.*received Lamb/, `rank ${rank}: names the optimizer it refuses`);
    t.ok(r.unchanged, `rank ${rank}: the refused model keeps its weights, unsharded`);
  }
});

for (const np of [2, 4]) {
  t.test(`${np} ranks: the tensor bytes held between steps (weights and Adam's state) are 1/${np} of the unsharded rank's`, async (t) => {
    const { results } = await runScenario(t, np, WORKER, 'memory');
    for (const [rank, r] of results.entries()) {
      if (!r) continue;
      const { unsharded, sharded } = r;
      // Weights, first and second moments: 3 float32 per parameter, a few scalars more.
      t.ok(unsharded.held >= 12 * unsharded.params && unsharded.held < 12 * unsharded.params + 1024, `rank ${rank}: unsharded holds 3 x 4 bytes per parameter`, { unsharded });
      const ratio = sharded.held / unsharded.held;
      t.ok(ratio <= 1 / np + 0.01, `rank ${rank}: sharded holds ${(100 * ratio).toFixed(1)}% of it (peak during a step: ${(100 * sharded.peak / unsharded.held).toFixed(1)}%)`, { sharded, unsharded });
      t.equal(sharded.heldLater, sharded.held, `rank ${rank}: two steps more hold no more bytes`);
      t.equal(sharded.tensorsLater, sharded.tensors, `rank ${rank}: nor more tensors`);
    }
  });
}

for (const [savers, loaders] of [[2, 3], [4, 2]]) {
  t.test(`saveCheckpoint of a sharded model and Adam at ${savers} ranks, loadCheckpoint at ${loaders} ranks, resumes where it was`, async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero3-'));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const saved = await runScenario(t, savers, WORKER, 'save', { CKPT_DIR: dir });
    const loaded = await runScenario(t, loaders, WORKER, 'load', { CKPT_DIR: dir });
    const before = saved.results[0];
    for (const [rank, r] of loaded.results.entries()) {
      if (!r || !before || r.threw || before.threw) continue;
      t.equal(r.step, 3, `rank ${rank}: loaded step 3`);
      t.equal(r.iterations, 5, `rank ${rank}: the iteration count came back (3), and 2 steps more`);
      t.same(r.loaded, before.atSave, `rank ${rank}: the weights as saved, bit for bit, at another world size`);
      const worst = Math.max(...r.end.map((w, i) => {
        const a = before.end[i];
        const scale = Math.max(...a.map(Math.abs));
        return Math.max(...w.map((v, j) => Math.abs(v - a[j]))) / scale;
      }));
      t.ok(worst <= 1e-5, `rank ${rank}: two more steps end within 1e-5 of the run that went on (Adam's moments were restored): ${worst}`);
    }
  });
}

t.test('a sharded model loads an unsharded checkpoint; an unsharded optimizer refuses a sharded one, by name', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero3-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const { results } = await runScenario(t, 2, WORKER, 'crossload', { CKPT_DIR: dir });
  for (const [rank, r] of results.entries()) {
    if (!r || r.threw) continue;
    t.equal(r.iterations, 5, `rank ${rank}: the sharded optimizer took the iteration count`);
    const worst = Math.max(...r.sharded.map((w, i) => {
      const a = r.unsharded[i];
      return Math.max(...w.map((v, j) => Math.abs(v - a[j]))) / Math.max(...a.map(Math.abs));
    }));
    t.ok(worst <= 1e-5, `rank ${rank}: 2 steps after the load, within 1e-5 of the unsharded run: ${worst}`);
    t.equal(r.refused && r.refused.code, 'ERR_MISMATCH', `rank ${rank}: an unsharded optimizer refuses the sharded checkpoint`, { refused: r.refused });
    t.match(r.refused && r.refused.message, /manifest.*keeps its own \(sharded\) state/, `rank ${rank}: saying why, naming the manifest`);
    t.ok(r.unchanged, `rank ${rank}: and loads nothing`);
  }
});
