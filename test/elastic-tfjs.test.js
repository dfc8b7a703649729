'use strict';
// hora/tfjs ElasticState and ElasticCallback under hora run (2 and 3 ranks, without failures): commit and
// restore, sync from a root that has stepped to ranks that never did, the callback's commit points, a fit
// interrupted and resumed from the committed epoch and batch, bad options, tensor leaks.
const t = require('tap');
const path = require('node:path');
const { runScenario, shmLeft, processesAlive, spawnAndCollect } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'elastic-tfjs-worker.js');

t.test('commit, step on, restore: weights, slots, iterations and beta powers back bit for bit, no leak', async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'commitRestore');
  for (const [r, res] of results.entries()) {
    t.not(res.firstTime.weights[0], res.committed.weights[0], `rank ${r}: the steps after the commit changed the weights`);
    t.same(res.restored, res.committed, `rank ${r}: restore gives back the committed weights, slots, iterations and hidden variables`);
    t.equal(res.committed.iterations, 3);
    t.equal(res.committed.slots.length, 8, 'Adam has two moments per weight');
    t.equal(res.stepRestored, 3, 'the user field is restored too');
    t.same(res.secondTime, res.firstTime, `rank ${r}: the steps redone from the restored point end bit-identical`);
    t.same(res.back0, res.fresh0, `rank ${r}: restoring a commit taken before the first step removes the slots and zeroes the iterations`);
    const n = res.tensors;
    t.equal(n.tensorsAfterCommit, n.tensorsBeforeCommit, 'commit makes no tensor');
    t.equal(n.tensorsAfterRestore, n.tensorsBeforeCommit, 'restore leaves as many tensors as at the commit');
    t.equal(n.tensorsBack0, n.tensors0, 'restoring to no slots frees the slots');
  }
});

t.test('sync gives every rank root\'s model and optimizer, including ranks that never stepped', async (t) => {
  const { results } = await runScenario(t, 3, WORKER, 'sync');
  t.equal(results[1].before.slots.length, 8, 'root has stepped');
  t.equal(results[0].before.slots.length, 0, 'rank 0 never stepped');
  t.not(results[0].before.weights[0], results[1].before.weights[0], 'the ranks started apart');
  for (const [r, res] of results.entries()) {
    t.same(res.after, results[1].before, `rank ${r} holds root's weights, slots, iterations and beta powers`);
    t.same(res.fields, { epoch: 1, batch: 0, note: 'rank 1' }, `rank ${r} has root's fields`);
    t.same(res.restored, res.after, `rank ${r}: the synced values are the rollback point`);
    t.same(res.trained, results[0].trained, `rank ${r} trains on bit-identical with rank 0`);
    t.equal(res.tensorsAfterSecondSync, res.tensorsBeforeSecondSync, `rank ${r}: a sync whose layout matches makes no tensor`);
  }
  t.equal(results[0].tensorsAfterSync, results[2].tensorsAfterSync, 'the ranks that got slots hold as many tensors');
});

t.test('ElasticCallback commits after every commitEvery-th batch of an epoch and at each epoch end', async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'callback');
  for (const [r, res] of results.entries()) {
    t.same(res.points, [[0, 3], [0, 6], [0, 9], [1, 0], [1, 3], [1, 6], [1, 9], [2, 0]], `rank ${r}: (epoch, batch) of each commit`);
    t.equal(res.commits, 8);
    t.same([res.epoch, res.batch], [2, 0], 'the state ends at the start of the epoch after the last');
    t.equal(res.defaultEvery, 10, 'commitEvery defaults to 10');
  }
});

t.test('a fit interrupted mid-epoch, restored and resumed with ElasticState.fit ends bit-identical', async (t) => {
  const { results } = await runScenario(t, 3, WORKER, 'resume');
  for (const [r, res] of results.entries()) {
    t.equal(res.caught, 'ERR_PEER_LOST', `rank ${r}: the interruption reached the script`);
    t.same(res.at, { epoch: 1, batch: 5 }, 'interrupted after batch 5 of epoch 1');
    t.same(res.resumedFrom, { epoch: 1, batch: 3 }, 'restore goes back to the commit after batch 3');
    t.equal(res.stepsA, 30, '3 epochs of 10 batches uninterrupted');
    t.equal(res.stepsB, 32, 'the 2 batches after the commit were redone, no other');
    t.same(res.final, { epoch: 3, batch: 0 });
    t.equal(res.resumed.iterations, 30, 'the optimizer counted each batch once');
    t.same(res.resumed, res.uninterrupted, `rank ${r}: weights, slots and iterations equal the uninterrupted fit's`);
  }
});

t.test('with backwardPassesPerStep 2, restore forgets the passes summed after the commit', async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'accumulation');
  for (const [r, res] of results.entries()) {
    t.equal(res.straight.iterations, 2, 'four passes are two updates');
    t.same(res.restored, res.straight, `rank ${r}: a lost pass restored away changes nothing`);
    t.equal(res.refused.code, 'ERR_INVALID_ARGUMENT', 'commitEvery not a multiple of backwardPassesPerStep is refused');
    t.match(res.refused.message, /option 'commitEvery' must be a multiple of the DistributedOptimizer's backwardPassesPerStep \(2\); received number 3/);
  }
});

t.test('bad arguments: ERR_INVALID_ARGUMENT naming the argument', async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'badOptions');
  const res = results[0];
  const expect = {
    commitEvery0: /'options.commitEvery' must be a positive integer; received number 0/,
    'commitEvery1.5': /'options.commitEvery' must be a positive integer; received number 1.5/,
    commitEveryString: /'options.commitEvery' must be a positive integer; received the string "3"/,
    callbackState: /ElasticCallback: argument 'state' must be an ElasticState/,
    stateModel: /ElasticState: argument 'model' must be a tf.LayersModel/,
    stateOptimizer: /argument 'optimizer' must be a tf.train optimizer/,
    stateEpoch: /'fields.epoch' must be an integer >= 0; received number -1/,
    stateReserved: /field 'model' has the name of an ElasticState property/,
    stateField: /field 'f' must be a JSON value/,
    fitNoCallback: /'args.callbacks' must be a list holding an ElasticCallback of this state/,
    fitSplit: /'args.validationSplit' must be 0 or absent/,
    fitInitialEpoch: /'args.initialEpoch' must be absent/,
  };
  for (const [name, re] of Object.entries(expect)) {
    t.equal(res[name].code, 'ERR_INVALID_ARGUMENT', name);
    t.match(res[name].message, re, name);
  }
});

// --- An elastic job (hora run --min-np) that loses a worker in the middle of model.fit. ---

const FIT_WORKER = path.join(__dirname, 'workers', 'elastic-tfjs-fit-worker.js');
const HORA = path.join(__dirname, '..', 'dist', 'ts', 'cli', 'main.js');

const workersAlive = (tag) => processesAlive(FIT_WORKER, `ELASTIC_TFJS_TAG=${tag}`);

async function elasticJob(args, env, timeoutMs = 240000) {
  const tag = `${process.pid}-${Date.now()}`;
  const shmBefore = new Set(shmLeft());
  const { code, stdout, stderr, timedOut } = await spawnAndCollect(process.execPath, [HORA, 'run', ...args, process.execPath, FIT_WORKER], {
    env: { ...process.env, HORA_ELASTIC_SETTLE_S: '2', ELASTIC_TFJS_TAG: tag, ...env }, timeoutMs,
  });
  await new Promise((r) => setTimeout(r, 300));
  const results = stdout.split('\n').map((l) => /^\[(\d+)\] result (.*)$/.exec(l)).filter(Boolean).map((m) => JSON.parse(m[2]));
  return { code, stdout, stderr, timedOut, results, orphans: workersAlive(tag), leaked: shmLeft().filter((n) => !shmBefore.has(n)) };
}

const floats = (b64) => new Float32Array(Uint8Array.from(Buffer.from(b64, 'base64')).buffer);

// The same fit without a failure, for comparison; run once.
let straight;
async function straightJob(t) {
  if (!straight) {
    straight = await elasticJob(['-np', '3'], {});
    t.equal(straight.code, 0, `the job without a failure succeeds\n${straight.stderr.slice(-2000)}`);
    t.equal(straight.results.length, 3);
    t.same(straight.orphans, [], 'no worker process is left');
    t.same(straight.leaked, [], 'no /dev/shm/hora-* segment is left');
  }
  return straight;
}

// Worker 1 lost after batch 5 of epoch 1: workers 0 and 2 finish the fit from the commit after batch 3.
function checkSurvivors(t, r, base) {
  t.equal(r.code, 0, `the job succeeds\n${r.stderr.slice(-3000)}`);
  t.same(r.results.map((x) => x.workerId).sort(), [0, 2], 'workers 0 and 2 finish');
  for (const x of r.results) {
    t.equal(x.size, 2, `worker ${x.workerId}: the world re-formed with 2 ranks`);
    t.equal(x.resets, 1, 'one reset');
    t.equal(x.epoch, 3, 'all 3 epochs done');
    // Committed after batch 3 of epoch 1, lost after batch 5: batches 4 and 5 ran twice.
    t.equal(x.executed, 32, `worker ${x.workerId} ran 30 batches and redid the 2 rolled back`);
    t.equal(x.iterations, 30, 'the optimizer counted each of the 30 batches once');
  }
  if (r.results.length === 2) t.equal(r.results[0].weights, r.results[1].weights, 'the survivors end bit-identical');
  if (r.results.length && base.results.length) {
    // The same global batches, summed over 2 ranks instead of 3 after the failure: float rounding only.
    const a = floats(r.results[0].weights);
    const b = floats(base.results[0].weights);
    const worst = Math.max(...Array.from(a, (v, i) => Math.abs(v - b[i]) / Math.max(1e-3, Math.abs(b[i]))));
    t.ok(worst < 1e-4, `within float rounding of the run without a failure (worst relative difference ${worst})`);
  }
  t.same(r.orphans, [], 'no worker process is left');
  t.same(r.leaked, [], 'no /dev/shm/hora-* segment is left');
}

t.test('3 ranks, --min-np 2, one SIGKILLed mid-epoch: the two finish the fit bit-identical, redoing the rolled-back batches', async (t) => {
  const base = await straightJob(t);
  const r = await elasticJob(['-np', '3', '--min-np', '2'], { ELASTIC_KILL_AT: '1:1:5', ELASTIC_NO_REFILL: '3' });
  t.match(r.stderr, /worker 1 was killed by SIGKILL; the job goes on without it/);
  checkSurvivors(t, r, base);
});

t.test('3 ranks, --min-np 2, one SIGSTOPped mid-epoch: the others time out, it is killed and left out, the two finish bit-identical', async (t) => {
  const base = await straightJob(t);
  const r = await elasticJob(['-np', '3', '--min-np', '2'],
    { ELASTIC_KILL_AT: '1:1:5', ELASTIC_KILL_SIGNAL: 'SIGSTOP', ELASTIC_NO_REFILL: '3', HORA_TIMEOUT_S: '3' });
  t.match(r.stdout, /\[1\] signal SIGSTOP/);
  t.match(r.stderr, /worker 1 .*did not re-register within 2 s \(HORA_ELASTIC_SETTLE_S\); leaving it out: killing it/);
  checkSurvivors(t, r, base);
});
