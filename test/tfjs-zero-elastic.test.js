'use strict';
// hora/tfjs ElasticState with a sharded DistributedOptimizer (shard 'optimizer', 'gradients' and 'weights')
// in an elastic job (hora run -np 3 --min-np 2) that loses a worker mid-epoch: each rank commits only its
// block of the optimizer state (and with 'weights' of the weights), so the lost rank's block exists nowhere
// else and every rank reloads the last checkpoint on disk (ElasticState's {checkpoint} option), redoing the
// batches since it; a worker that joins later gets the committed blocks resharded in memory. Both end within
// 1e-5 (Adam) or 1e-6 (SGD, momentum) of an uninterrupted unsharded run of the same global batches, with
// every batch counted once by the optimizer.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { shmLeft, processesAlive, spawnAndCollect, runScenario } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'tfjs-zero-elastic-worker.js');
const HORA = path.join(__dirname, '..', 'dist', 'ts', 'cli', 'main.js');

async function job(args, env, timeoutMs = 120000) {
  const tag = `${process.pid}-${Date.now()}`;
  const shmBefore = new Set(shmLeft());
  const { code, stdout, stderr } = await spawnAndCollect(process.execPath, [HORA, 'run', ...args, process.execPath, WORKER], {
    env: { ...process.env, HORA_ELASTIC_SETTLE_S: '2', ZE_TAG: tag, ...env }, timeoutMs,
  });
  await new Promise((r) => setTimeout(r, 300));
  const results = stdout.split('\n').map((l) => /^\[(\d+)\] result (.*)$/.exec(l)).filter(Boolean).map((m) => JSON.parse(m[2]));
  return { code, stdout, stderr, results, orphans: processesAlive(WORKER, `ZE_TAG=${tag}`), leaked: shmLeft().filter((n) => !shmBefore.has(n)) };
}

const floats = (b64) => new Float32Array(Uint8Array.from(Buffer.from(b64, 'base64')).buffer);

// Relative difference of the weight vectors: |a - b| / |b| (the order of float sums differs with the world size).
function worst(a, b) {
  let d = 0;
  let n = 0;
  for (let i = 0; i < b.length; i++) {
    d += (a[i] - b[i]) ** 2;
    n += b[i] ** 2;
  }
  return Math.sqrt(d / n);
}

for (const scenario of ['grow3to4', 'grow1to4', 'renumbered']) t.test(`the in-memory reshard's alltoall, ${scenario}: each rank gets exactly its new block of every entry, nothing read from disk`, async (t) => {
  const { results } = await runScenario(t, 4, path.join(__dirname, 'workers', 'elastic-shards-worker.js'), scenario);
  for (const [rank, r] of results.entries()) {
    t.ok(r && !r.threw, `rank ${rank} reports`, { got: r });
    if (!r || r.threw) continue;
    t.equal(r.reloaded, false, `rank ${rank}: no checkpoint reloaded`);
    t.equal(r.recut, 1, `rank ${rank}: the optimizer was cut anew once`);
    t.same(r.cut, { size: 4, rank }, `rank ${rank}: the blocks kept are cut for rank ${rank} of 4`);
    t.same(r.reshards, [{ how: 'memory', from: { grow3to4: 3, grow1to4: 1, renumbered: 4 }[scenario], to: 4 }], `rank ${rank}: one reshard in memory`);
    t.same(r.iterations, [17], `rank ${rank}: the replicated entries as root's`);
    t.same(r.got, r.want, `rank ${rank}: every entry's new block, values and offset, lengths 0 to 11`);
  }
});

const straight = {};
async function baseline(t, opt = 'adam') {
  if (!straight[opt]) {
    straight[opt] = await job(['-np', '3'], { ZERO_SHARD: 'none', ZE_OPT: opt });
    t.equal(straight[opt].code, 0, `the unsharded job without a failure succeeds\n${straight[opt].stderr.slice(-2000)}`);
    t.equal(straight[opt].results.length, 3);
  }
  return straight[opt];
}

function checkEnd(t, r, base, survivors, tolerance = 1e-5) {
  t.equal(r.code, 0, `the job succeeds\n${r.stderr.slice(-3000)}`);
  t.match(r.stderr, /worker 1 was killed by SIGKILL; the job goes on without it/);
  for (const x of r.results.filter((y) => survivors.includes(y.workerId))) {
    t.equal(x.epoch, 3, 'all 3 epochs done');
    t.equal(x.iterations, 30, `worker ${x.workerId}: the optimizer counted each of the 30 batches once (none applied twice)`);
    // The checkpoint is commit 4, after epoch 0 (commitEvery 3, everySteps 2); worker 1 died after batch 5 of
    // epoch 1, so the 4 or 5 batches of epoch 1 run before the loss (the 5th if it ended on every rank) ran again.
    t.same(x.reshards[0], { how: 'checkpoint', from: 3, to: 2, step: 4 }, `worker ${x.workerId}: the lost block was restored from checkpoint step 4, resharded for 2 ranks`);
    // Batch counts: every reset goes on from where it says, none skipped, only the checkpoint's redone.
    const [loss, ...later] = x.resetPoints;
    t.same([loss.epoch, loss.batch], [1, 0], 'the loss rolled back to the checkpoint after epoch 0');
    // Killed after batch 5 of epoch 1 (no commit there): the survivors ran its 4 or 5 batches (the 5th if its step
    // ended on every rank), and run them again from the checkpoint.
    t.ok(loss.executed === 14 || loss.executed === 15, `worker ${x.workerId}: 10 + 4 or 5 batches ran before the loss (${loss.executed})`);
    let prev = loss;
    for (const p of later) {
      t.equal(p.executed - prev.executed, (p.epoch * 10 + p.batch) - (prev.epoch * 10 + prev.batch), `worker ${x.workerId}: nothing redone or skipped at the reset at (${p.epoch}, ${p.batch})`);
      prev = p;
    }
    t.equal(x.executed - prev.executed, 30 - (prev.epoch * 10 + prev.batch), 'the batches after the last reset: the rest of the fit, once');
  }
  const ws = r.results.map((x) => x.weights);
  t.ok(ws.length > 0 && ws.every((w) => w === ws[0]), 'every rank ends bit-identical');
  if (r.results.length && base.results.length) {
    const d = worst(floats(r.results[0].weights), floats(base.results[0].weights));
    t.ok(d < tolerance, `within ${tolerance} of the uninterrupted unsharded run (relative difference ${d})`);
  }
  t.same(r.orphans, [], 'no worker process is left');
  t.same(r.leaked, [], 'no /dev/shm/hora-* segment is left');
}

// A lost worker's blocks exist on no other rank: the two survivors reload the last checkpoint and finish.
for (const [shard, lost] of [['optimizer', 'its block is lost'], ['weights', "its blocks of the weights and of Adam's moments are lost"]]) {
  t.test(`shard '${shard}', a worker SIGKILLed mid-epoch: ${lost}, the two reload the last checkpoint and finish`, async (t) => {
    const base = await baseline(t);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero-elastic-'));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const r = await job(['-np', '3', '--min-np', '2'], { ZERO_SHARD: shard, ZE_CKPT: dir, ZE_EVERY: '2', ELASTIC_KILL_AT: '1:1:5', ELASTIC_NO_REFILL: '3' });
    t.same(r.results.map((x) => x.workerId).sort(), [0, 2], 'workers 0 and 2 finish');
    for (const x of r.results) {
      t.equal(x.size, 2, 'in a world of 2');
      t.equal(x.resets, 1, 'one reset');
      t.equal(x.reshards.length, 1, 'one reshard, from the checkpoint');
    }
    checkEnd(t, r, base, [0, 2]);
  });
}

t.test("shard 'gradients', a worker lost then refilled: the checkpoint after the loss, then the blocks resharded 2 -> 3 in memory when the new worker joins", async (t) => {
  const base = await baseline(t);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero-elastic-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  // The refill waits 3.5 s before it starts, and the world of 2 waits 250 ms a batch: it joins at a later
  // commit of the world of 2, not in the world re-formed after the loss.
  const r = await job(['-np', '3', '--min-np', '2'], {
    ZERO_SHARD: 'gradients', ZE_CKPT: dir, ZE_EVERY: '2', ELASTIC_KILL_AT: '1:1:5', ZE_JOIN_DELAY_MS: '3500', ZE_BATCH_DELAY_MS: '250',
  });
  t.same(r.results.map((x) => x.workerId).sort(), [0, 2, 3], 'workers 0, 2 and the refill 3 finish');
  for (const x of r.results) {
    t.equal(x.size, 3, 'in a world of 3 again');
    t.same(x.reshards[x.reshards.length - 1], { how: 'memory', from: 2, to: 3 }, `worker ${x.workerId}: the blocks were resharded 2 -> 3 in memory`);
  }
  for (const x of r.results.filter((y) => y.workerId !== 3)) t.equal(x.resets, 2, 'two resets: the loss and the join');
  checkEnd(t, r, base, [0, 2]);
});

t.test("shard 'optimizer' with momentum, a worker SIGKILLed mid-epoch: the checkpoint's blocks, within 1e-6", async (t) => {
  const base = await baseline(t, 'momentum');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero-elastic-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const r = await job(['-np', '3', '--min-np', '2'], { ZERO_SHARD: 'optimizer', ZE_OPT: 'momentum', ZE_CKPT: dir, ZE_EVERY: '2', ELASTIC_KILL_AT: '1:1:5', ELASTIC_NO_REFILL: '3' });
  t.same(r.results.map((x) => x.workerId).sort(), [0, 2], 'workers 0 and 2 finish');
  checkEnd(t, r, base, [0, 2], 1e-6);
});

for (const shardMode of ['optimizer', 'weights', 'none']) t.test(`shard '${shardMode}': every worker SIGKILLed at 3 ranks, the job started again at 2 resumes from ElasticState's checkpoint`, async (t) => {
  const base = await baseline(t);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero-elastic-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const env = { ZERO_SHARD: shardMode, ZE_CKPT: dir, ZE_EVERY: '2' };
  const killed = await job(['-np', '3'], { ...env, ZE_EXIT_AT: '1:5' });
  t.not(killed.code, 0, 'the first job dies');
  t.same(killed.results, [], 'no worker finished');
  const r = await job(['-np', '2'], env);
  t.equal(r.code, 0, `the job started again succeeds\n${r.stderr.slice(-3000)}`);
  t.equal(r.results.length, 2);
  for (const x of r.results) {
    t.equal(x.executed, 20, 'it resumed at checkpoint step 4 (epoch 1, batch 0) and ran epochs 1 and 2');
    t.equal(x.iterations, 30, 'the optimizer counted each of the 30 batches once');
    t.same(x.reshards, [], 'the blocks were cut for 2 ranks at load');
  }
  t.ok(r.results.length === 2 && r.results[0].weights === r.results[1].weights, 'both ranks end bit-identical');
  const d = worst(floats(r.results[0].weights), floats(base.results[0].weights));
  t.ok(d < 1e-5, `within 1e-5 of the uninterrupted unsharded run (relative difference ${d})`);
  t.same(r.orphans, [], 'no worker process is left');
});

t.test("shard 'weights' with SGD, a worker lost then refilled: the checkpoint after the loss, then the weights' and optimizer's blocks resharded 2 -> 3 in memory at the join, within 1e-6", async (t) => {
  const base = await baseline(t, 'sgd');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero-elastic-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const r = await job(['-np', '3', '--min-np', '2'], {
    ZERO_SHARD: 'weights', ZE_OPT: 'sgd', ZE_CKPT: dir, ZE_EVERY: '2', ELASTIC_KILL_AT: '1:1:5', ZE_JOIN_DELAY_MS: '3500', ZE_BATCH_DELAY_MS: '250',
  });
  t.same(r.results.map((x) => x.workerId).sort(), [0, 2, 3], 'workers 0, 2 and the refill 3 finish');
  for (const x of r.results) {
    t.equal(x.size, 3, 'in a world of 3 again');
    t.same(x.reshards[x.reshards.length - 1], { how: 'memory', from: 2, to: 3 }, `worker ${x.workerId}: the blocks were resharded 2 -> 3 in memory`);
    t.equal(x.reshards.filter((y) => y.how === 'checkpoint').length, x.workerId === 3 ? 0 : 1, `worker ${x.workerId}: the checkpoint was read at the loss only, not at the join`);
  }
  for (const x of r.results.filter((y) => y.workerId !== 3)) t.equal(x.resets, 2, 'two resets: the loss and the join');
  checkEnd(t, r, base, [0, 2], 1e-6);
});

t.test("shard 'weights' with momentum, a worker SIGKILLed mid-epoch: the checkpoint's blocks, within 1e-6", async (t) => {
  const base = await baseline(t, 'momentum');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero-elastic-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const r = await job(['-np', '3', '--min-np', '2'], { ZERO_SHARD: 'weights', ZE_OPT: 'momentum', ZE_CKPT: dir, ZE_EVERY: '2', ELASTIC_KILL_AT: '1:1:5', ELASTIC_NO_REFILL: '3' });
  t.same(r.results.map((x) => x.workerId).sort(), [0, 2], 'workers 0 and 2 finish');
  checkEnd(t, r, base, [0, 2], 1e-6);
});

t.test("shard 'optimizer', a block lost before the first checkpoint was written: ERR_MISMATCH naming the lost block, on the survivors", async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-zero-elastic-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const r = await job(['-np', '3', '--min-np', '2'], { ZERO_SHARD: 'optimizer', ZE_CKPT: dir, ZE_EVERY: '100', ELASTIC_KILL_AT: '1:1:5', ELASTIC_NO_REFILL: '3' });
  t.not(r.code, 0, 'the job fails');
  t.same(r.results, [], 'no worker finished');
  for (const w of [0, 2]) {
    t.match(r.stdout + r.stderr, new RegExp(`worker ${w} failed: ERR_MISMATCH .*ElasticState.sync: the optimizer state's block 1 of commit \\d+ \\(cut for 3 ranks\\) was held only by lost ranks, and no checkpoint was written yet`),
      `worker ${w} says which block is lost and why it cannot be restored`);
  }
  t.same(r.orphans, [], 'no worker process is left');
});
