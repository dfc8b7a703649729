'use strict';
// hora.grouped.allreduce, allgather and reduceScatter under `hora run`, 2 and 3 ranks, over shared memory and
// TCP: mixed sizes and dtypes in one group and several groups in one batch; a group several times the fusion
// buffer reaches the engine in one batch; a bad element on one rank fails the group on every rank naming
// tensors[i]; a tensor whose count differs, or groups of different lengths, are ERR_MISMATCH on every rank;
// process groups; a world of one. test/workers/grouped-worker.js runs each scenario inside the ranks.
const t = require('tap');
const path = require('node:path');
const { runScenario, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'grouped-worker.js');
const TRANSPORTS = [['shm', {}], ['tcp', { HORA_TRANSPORT: 'tcp' }]];

function everyRankReported(t, results, job) {
  return results.every((r, rank) => t.ok(r, `rank ${rank} reported`, { output: tail(job) }));
}

function recovered(t, after, rank) {
  t.ok(after && after.ok && after.right, `rank ${rank}: the next allreduce succeeds (nothing lost, ranks in step)`, { after });
}

for (const np of [2, 3]) {
  for (const [transport, env] of TRANSPORTS) {
    t.test(`p=${np} ${transport}: mixed sizes and dtypes, several groups and single calls in one batch`, async (t) => {
      const { results, job } = await runScenario(t, np, WORKER, 'values', env);
      if (!everyRankReported(t, results, job)) return;
      for (const [rank, r] of results.entries()) {
        t.ok(r.checks && Object.keys(r.checks).length >= 10, `rank ${rank} ran every check`, { r });
        for (const [name, got] of Object.entries(r.checks || {})) t.equal(got, true, `rank ${rank}: ${name}`);
      }
    });
  }
}

for (const [transport, env] of TRANSPORTS) {
  t.test(`p=2 ${transport}: a group five times HORA_FUSION_MB, after a single call, reaches the engine in one batch`, async (t) => {
    const { results, job } = await runScenario(t, 2, WORKER, 'whole', { HORA_FUSION_MB: '0.0625', ...env });
    if (!everyRankReported(t, results, job)) return;
    for (const [rank, r] of results.entries()) {
      t.ok(r.right, `rank ${rank}: every result right`);
      t.ok(r.whole, `rank ${rank}: the group's 40 tensors in one submitted batch (batches: ${r.batches})`, { r });
    }
  });
}

t.test('p=3: a bad element on one rank fails the group on every rank, naming tensors[2]', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'bad');
  if (!everyRankReported(t, results, job)) return;
  for (const [rank, r] of results.entries()) {
    t.equal(r.got.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: ERR_INVALID_ARGUMENT`, { got: r.got });
    t.match(r.got.message, /hora\.grouped\.allreduce: argument 'tensors\[2\]' must be a Float32Array.*; received an Array of length 2/, `rank ${rank}: names tensors[2] and what it was`);
    if (rank !== 2) t.match(r.got.message, /rank 2 made an invalid call/, `rank ${rank}: names the rank`);
    recovered(t, r.afterBad, rank);
    t.equal(r.option.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: an unknown option: ERR_INVALID_ARGUMENT`, { got: r.option });
    t.match(r.option.message, /hora\.grouped\.allgather: argument 'options\.nam' is not an option.*did you mean 'name'\?/, `rank ${rank}: names the option`);
    recovered(t, r.after, rank);
  }
});

for (const [transport, env] of TRANSPORTS) {
  t.test(`p=2 ${transport}: a tensor whose count differs on one rank is ERR_MISMATCH on every rank, naming it`, async (t) => {
    const { results, job } = await runScenario(t, 2, WORKER, 'counts', env);
    if (!everyRankReported(t, results, job)) return;
    for (const [rank, r] of results.entries()) {
      t.equal(r.fused.code, 'ERR_MISMATCH', `rank ${rank}: fused run: ERR_MISMATCH`, { got: r.fused });
      t.match(r.fused.message, /small_2of3/, `rank ${rank}: fused run: names the second tensor`);
      recovered(t, r.afterFused, rank);
      t.equal(r.large.code, 'ERR_MISMATCH', `rank ${rank}: large tensors: ERR_MISMATCH`, { got: r.large });
      t.match(r.large.message, /large_2of2/, `rank ${rank}: large tensors: names the second tensor`);
      recovered(t, r.after, rank);
    }
  });
}

t.test('p=2: groups of different lengths are ERR_MISMATCH on every rank', async (t) => {
  const { results, job } = await runScenario(t, 2, WORKER, 'length');
  if (!everyRankReported(t, results, job)) return;
  for (const [rank, r] of results.entries()) {
    t.equal(r.got.code, 'ERR_MISMATCH', `rank ${rank}: ERR_MISMATCH`, { got: r.got });
    t.match(r.got.message, /_1of3/, `rank ${rank}: shows rank 0's group of 3`);
    t.match(r.got.message, /_1of2/, `rank ${rank}: and rank 1's group of 2`);
    recovered(t, r.after, rank);
  }
  t.equal(results[1] && results[1].taken.code, 'ERR_MISMATCH', "rank 1: its next call stood against rank 0's third tensor: ERR_MISMATCH");
});

for (const [transport, env] of TRANSPORTS) {
  t.test(`p=3 ${transport}: a process group's grouped calls, and a bad element in one`, async (t) => {
    const { results, job } = await runScenario(t, 3, WORKER, 'groups', env);
    if (!everyRankReported(t, results, job)) return;
    for (const [rank, r] of results.entries()) {
      recovered(t, r.after, rank);
      if (rank === 1) {
        t.equal(r.member, false, 'rank 1 is not a member');
        continue;
      }
      t.equal(r.allreduce, true, `rank ${rank}: group.grouped.allreduce`);
      t.equal(r.allgather, true, `rank ${rank}: group.grouped.allgather`);
      t.equal(r.reduceScatter, true, `rank ${rank}: group.grouped.reduceScatter`);
      t.equal(r.bad.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: a bad element: ERR_INVALID_ARGUMENT`, { got: r.bad });
      t.match(r.bad.message, /hora\.group\.grouped\.allreduce: argument 'tensors\[1\]' must be/, `rank ${rank}: names tensors[1]`);
      t.ok(r.groupAfter.ok, `rank ${rank}: the group's next call succeeds`, { got: r.groupAfter });
    }
  });
}

t.test('a world of one: the same results, copies, and the same errors', async (t) => {
  const { results } = await runScenario(t, 1, WORKER, 'one');
  const r = results[0];
  if (!t.ok(r, 'rank 0 reported')) return;
  for (const [name, got] of Object.entries(r.checks)) t.equal(got, true, name);
  t.ok(r.copy, 'a new array, not x');
  t.equal(r.bad.code, 'ERR_INVALID_ARGUMENT', 'a null element: ERR_INVALID_ARGUMENT');
  t.match(r.bad.message, /hora\.grouped\.reduceScatter: argument 'tensors\[1\]' must be a Float32Array.*; received null/, 'naming tensors[1]');
});
