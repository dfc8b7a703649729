'use strict';
// hora/tfjs DistributedOptimizer with shard 'optimizer' (ZeRO stage 1) and 'gradients' (stage 2) against
// the unsharded optimizer (shard 'none') on the same model, data and steps, at 2, 3 and 4 ranks, on weights
// of 35, 5, 15 and 3 values (none divides by 3 or 4; at 4 ranks one rank's block of the last bias is empty):
//  - every tf.train optimizer, then Adam with overlap off, fp16 and bf16 compression, backwardPassesPerStep 2,
//    tiny buckets, uneven sample counts and model.fit;
//  - stage 1 averages exactly as the unsharded optimizer and every optimizer is elementwise: bit-identical;
//    stage 2 reduce-scatters (another order of the sums): within 1e-6 (SGD, momentum) or 1e-5 (the others)
//    per element, relative to max(|x|, 1e-3); with compression within its rounding;
//  - weights bit-identical on every rank; each rank holds its 1/N of the optimizer state; getWeights gives
//    the full state under the unsharded names, broadcastOptimizer and model.save (includeOptimizer) work;
//  - saveCheckpoint at 4 ranks with shard 'optimizer', loadCheckpoint at 2 and 3, then more steps: the
//    weights of an uninterrupted unsharded run;
//  - a rank that joined (its data ended) fails the step on every rank that took part, with the reason;
//  - ElasticState takes a sharded optimizer with {checkpoint} only (elastic runs: test/tfjs-zero-elastic.test.js).
// test/workers/tfjs-zero-worker.js trains; this file asserts.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const t = require('tap');
const tf = require('@tensorflow/tfjs');
const { runJob, tail } = require('./support/hora-job');
const tfjs = require('../dist/adapters/tfjs/index.js');

const WORKER = path.join(__dirname, 'workers', 'tfjs-zero-worker.js');
const OPTIMIZERS = ['sgd', 'momentum', 'adam', 'adamax', 'rmsprop', 'rmsprop-centered', 'adagrad', 'adadelta'];
const VARIANTS = ['overlap=false', 'fp16', 'bf16', 'k=2', 'k=2 overlap=false', 'bucket=tiny', 'uneven', 'fit'];
/** Stage 2 against the unsharded optimizer, per element relative to max(|b|, 1e-3). */
const TOLERANCE = { sgd: 1e-6, momentum: 1e-6, fp16: 2e-3, bf16: 2e-2 };
const DEFAULT_TOLERANCE = 1e-5;

function worstRel(a, b) {
  let worst = 0;
  a.forEach((v, i) => { worst = Math.max(worst, Math.abs(v - b[i]) / Math.max(Math.abs(b[i]), 1e-3)); });
  return worst;
}

t.test('the shard option: none, optimizer, gradients and weights; anything else and non-elementwise optimizers refused by name', async (t) => {
  const adam = tf.train.adam(0.01);
  for (const shard of ['none', 'optimizer', 'gradients']) t.equal(new tfjs.DistributedOptimizer(adam, { shard }).shard, shard, `shard '${shard}' accepted`);
  t.equal(new tfjs.DistributedOptimizer(adam).shard, 'none', "'none' by default");
  for (const shard of ['all', 1, null]) {
    t.throws(() => new tfjs.DistributedOptimizer(adam, { shard }), { code: 'ERR_INVALID_ARGUMENT', message: /option 'shard' must be 'none', 'optimizer', 'gradients' or 'weights'; received/ }, `shard ${String(shard)} refused`);
  }
  class Lookahead extends tf.Optimizer {
    applyGradients() {}
    getClassName() { return 'Lookahead'; }
  }
  t.throws(() => new tfjs.DistributedOptimizer(new Lookahead(), { shard: 'optimizer' }), { code: 'ERR_INVALID_ARGUMENT', message: /argument 'optimizer' must be one of tf.train's elementwise optimizers.*received Lookahead/ });
  class MyAdam extends tf.AdamOptimizer {}
  t.throws(() => new tfjs.DistributedOptimizer(new MyAdam(0.1, 0.9, 0.999), { shard: 'gradients' }), { code: 'ERR_INVALID_ARGUMENT', message: /received Adam/ }, 'a subclass is not known to be elementwise');
  t.throws(() => new tfjs.DistributedOptimizer(new tfjs.DistributedOptimizer(adam), { shard: 'optimizer' }), { code: 'ERR_INVALID_ARGUMENT', message: /wrap the tf.train optimizer itself/ });
  t.doesNotThrow(() => new tfjs.DistributedOptimizer(new Lookahead()), 'any optimizer unsharded');
});

for (const np of [2, 3, 4]) {
  t.test(`${np} ranks: shard 'optimizer' and 'gradients' end where shard 'none' ends`, async (t) => {
    const job = await runJob(np, WORKER, { args: ['equiv'], timeoutMs: 240000 });
    t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
    const results = job.reports.map((r) => r && r.result);
    if (!results.every((r) => r && r.ok)) return t.fail('every rank reported', { output: tail(job), results: results.map((r) => r && r.threw) });
    const runs = results[0].runs;
    const names = [...OPTIMIZERS, ...VARIANTS.map((v) => `adam ${v}`)];
    for (const name of names) {
      const base = runs[`${name} none`];
      for (const shard of ['optimizer', 'gradients']) {
        const label = `${name}, shard '${shard}'`;
        const run = runs[`${name} ${shard}`];
        t.ok(results.every((r) => r.runs[`${name} ${shard}`].base64 === run.base64 && r.runs[`${name} ${shard}`].afterBase64 === run.afterBase64), `${label}: weights bit-identical on every rank`);
        if (shard === 'optimizer') {
          t.equal(run.base64, base.base64, `${label}: the weights of shard 'none', bit for bit`);
          t.equal(run.afterBase64, base.afterBase64, `${label}: after broadcastOptimizer and 2 more steps too`);
        } else {
          const variant = name.split(' ').slice(1).join(' ');
          const tol = TOLERANCE[variant] ?? TOLERANCE[name] ?? DEFAULT_TOLERANCE;
          const rel = Math.max(worstRel(run.weights, base.weights), worstRel(run.after, base.after));
          t.ok(rel <= tol, `${label}: within ${tol} of shard 'none' (got ${rel.toExponential(2)})`);
        }
        t.equal(run.iterations, base.iterations, `${label}: the same iteration count`);
        if (name === 'adam fit') {
          t.equal(base.fitReads, 1, "shard 'none': fit's epoch end copies the optimizer state from the last rank to join");
          t.equal(run.fitReads, 0, `${label}: fit's epoch end does not gather the whole state (every rank's part is current)`);
        }
        t.ok(run.leaked <= base.leaked, `${label}: leaves no more tensors than shard 'none' (${run.leaked} against ${base.leaked})`);
        if (!base.state) continue; // Adamax: tfjs has no getWeights for it
        t.same(run.state.names, base.state.names, `${label}: getWeights names the full state as shard 'none' does`);
        const stateTol = shard === 'optimizer' ? 0 : /fp16|bf16/.test(name) ? 5e-2 : DEFAULT_TOLERANCE;
        const srel = worstRel(run.state.values, base.state.values);
        t.ok(srel <= stateTol, `${label}: getWeights gives the full state (within ${stateTol}; got ${srel.toExponential(2)})`);
        const held = results.map((r) => r.runs[`${name} ${shard}`].held);
        t.equal(held.reduce((a, b) => a + b, 0), base.held, `${label}: the ranks hold the ${base.held} state values between them (${held.join(', ')})`);
        // Every variable split evenly: rank r holds at most one value more per slot than 1/N.
        const slots = base.state.names.length - 1;
        t.ok(held.every((h) => h <= Math.ceil(base.held / np) + slots), `${label}: each rank about 1/${np} of them`);
        if (base.saved) {
          t.same(run.saved.names, base.saved.names, `${label}: model.save with includeOptimizer saves the weights and state of shard 'none'`);
          t.ok(worstRel(run.saved.values, base.saved.values) <= stateTol, `${label}: ... with their values`);
        }
      }
    }
  });
}

t.test("a checkpoint saved at 4 ranks with shard 'optimizer' loads at 2 and 3 ranks and ends where unsharded training ends", async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero-ckpt-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const save = await runJob(4, WORKER, { args: ['save'], env: { ZERO_DIR: dir }, timeoutMs: 120000 });
  t.equal(save.code, 0, 'saved at 4 ranks', { output: tail(save) });
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'step-3', 'manifest.json'), 'utf8'));
  const slots = Object.keys(manifest.entries).filter((k) => k.startsWith('optimizer/zero/slot/'));
  t.equal(slots.length, 8, "Adam's 8 slots (m and v of 4 weights) saved");
  t.ok(slots.every((k) => manifest.entries[k].sharded && manifest.entries[k].parts.length >= 3), 'each as a sharded entry, in parts from the ranks');
  for (const [np, shard] of [[2, 'optimizer'], [3, 'optimizer'], [3, 'gradients']]) {
    const job = await runJob(np, WORKER, { args: ['load'], env: { ZERO_DIR: dir, ZERO_SHARD: shard }, timeoutMs: 120000 });
    t.equal(job.code, 0, `${np} ranks, shard '${shard}': loaded and trained`, { output: tail(job) });
    const results = job.reports.map((r) => r && r.result);
    if (!results.every((r) => r && r.ok)) { t.fail('every rank reported', { results }); continue; }
    const [a] = results;
    t.equal(a.step, 3, 'step 3 loaded');
    t.equal(a.iterations, 5, 'the iteration count goes on from the checkpoint');
    t.ok(results.every((r) => r.base64 === a.base64), 'weights bit-identical on every rank');
    const rel = worstRel(a.weights, a.ref);
    t.ok(rel <= DEFAULT_TOLERANCE, `within ${DEFAULT_TOLERANCE} of 5 unsharded steps without a checkpoint (got ${rel.toExponential(2)})`);
  }
  const plain = await runJob(2, WORKER, { args: ['load'], env: { ZERO_DIR: dir, ZERO_SHARD: 'none' }, timeoutMs: 120000 });
  plain.reports.forEach((r, rank) => {
    const threw = r && r.result && r.result.threw;
    t.equal(threw && threw.code, 'ERR_MISMATCH', `rank ${rank}: an unsharded optimizer cannot load the sharded state: ERR_MISMATCH`);
    t.match(threw && threw.message, /manifest\.json.*sharded/, '... naming the manifest and why');
  });
});

t.test('a rank that joined fails the sharded step on every rank that took part, naming the reason, without a hang', async (t) => {
  for (const shard of ['optimizer', 'gradients']) {
    const job = await runJob(2, WORKER, { args: ['joined'], env: { ZERO_SHARD: shard, HORA_TIMEOUT_S: '20' }, timeoutMs: 60000 });
    t.not(job.signal, 'SIGKILL', `shard '${shard}': no hang`, { output: tail(job) });
    const [a, b] = job.reports.map((r) => r && r.result);
    t.equal(a && a.code, 'ERR_MISMATCH', `shard '${shard}': rank 0's step fails with ERR_MISMATCH`);
    t.match(a && a.message, /a rank took no part \(it joined/, '... saying a rank joined');
    t.equal(b && b.ok, false, 'the joined rank fails too', { b });
  }
});

t.test('ElasticState takes a sharded optimizer only with the checkpoint option; shard weights is refused', async (t) => {
  const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [2], units: 1 })] });
  const sharded = new tfjs.DistributedOptimizer(tf.train.adam(0.01), { shard: 'optimizer' });
  t.throws(() => new tfjs.ElasticState(model, sharded), { code: 'ERR_INVALID_ARGUMENT', message: /argument 'options.checkpoint' must be an object \{dir, everySteps\} with a DistributedOptimizer of shard 'optimizer'.*received undefined/ });
  t.doesNotThrow(() => new tfjs.ElasticState(model, sharded, {}, { checkpoint: { dir: '/tmp/hora-unused', everySteps: 1 } }), 'accepted with {checkpoint}');
  const later = new tfjs.ElasticState(model);
  model.compile({ optimizer: new tfjs.DistributedOptimizer(tf.train.sgd(0.1), { shard: 'gradients' }), loss: 'meanSquaredError' });
  await t.rejects(later.commit(), { code: 'ERR_INVALID_ARGUMENT', message: /shard 'gradients'/ }, 'a model compiled with one after the state was made: at its commit');
});
