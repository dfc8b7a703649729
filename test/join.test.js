'use strict';
// hora.join() for uneven data under `hora run`, 2, 3 and 4 ranks, over shared memory and TCP
// (HORA_TRANSPORT=tcp): ranks that run out of steps join and take part in the others' allreduce (sum, avg
// divided by the ranks that contributed, min, max, prod; small ones on the agreement's payload path, a large
// one on the ring, a fused batch), allgather, reduceScatter, broadcast and barrier with a neutral
// contribution; join resolves on every rank to the rank that joined last (the highest of a tie). A broadcast
// whose root has joined and a prescaleFactor with op min are ERR_INVALID_ARGUMENT on every live rank; the
// joined rank's own collectives are refused while its join is pending; live ranks that disagree get
// ERR_MISMATCH and stay in step; a group joins among its members; a killed rank fails a pending join with ERR_PEER_LOST. test/workers/join-worker.js runs each scenario.
const t = require('tap');
const path = require('node:path');
const { runJob, runScenario, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'join-worker.js');
const TRANSPORTS = [['shm', {}], ['tcp', { HORA_TRANSPORT: 'tcp' }]];

function everyRankReported(t, results, job) {
  return results.every((r, rank) => t.ok(r, `rank ${rank} reported`, { output: tail(job) }));
}

/** Every check a rank made passed, and it made `steps` steps' worth; join resolved to `last`. */
function checksPassed(t, results, steps, last) {
  for (const [rank, r] of results.entries()) {
    const failed = Object.entries(r.checks).filter(([, v]) => v !== true);
    t.same(failed, [], `rank ${rank}: every collective gave what the live ranks make`);
    t.equal(Object.keys(r.checks).length, steps[rank] * 13, `rank ${rank} ran its ${steps[rank]} steps of 13 collectives`);
    t.equal(r.last, last, `rank ${rank}: join resolved to rank ${last}, the last to join`);
  }
}

for (const np of [2, 3, 4]) {
  for (const [transport, env] of TRANSPORTS) {
    if (np === 4 && transport === 'shm') continue;  // 4 ranks once: over TCP, the slower path
    t.test(`p=${np} ${transport}: rank r runs r + 1 steps; every collective runs among the live ranks`, async (t) => {
      const { results, job } = await runScenario(t, np, WORKER, 'uneven', env);
      if (!everyRankReported(t, results, job)) return;
      checksPassed(t, results, Array.from({ length: np }, (_, q) => q + 1), np - 1);
    });
  }
}

t.test('p=1: a world of one joins at once, to rank 0', async (t) => {
  const { results, job } = await runScenario(t, 1, WORKER, 'uneven');
  if (!everyRankReported(t, results, job)) return;
  checksPassed(t, results, [1], 0);
});

t.test('p=3: ranks that join at the same place: the highest is the last', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'tie');
  if (!everyRankReported(t, results, job)) return;
  checksPassed(t, results, [2, 2, 2], 2);
});

for (const [transport, env] of TRANSPORTS) {
  t.test(`p=3 ${transport}: ranks 1 and 2 join together, rank 0 runs on alone and is the last`, async (t) => {
    const { results, job } = await runScenario(t, 3, WORKER, 'lastIsZero', env);
    if (!everyRankReported(t, results, job)) return;
    checksPassed(t, results, [3, 1, 1], 0);
  });
}

t.test('p=3: a broadcast whose root has joined is ERR_INVALID_ARGUMENT on every live rank; the next call works', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'rootJoined');
  if (!everyRankReported(t, results, job)) return;
  for (const [rank, r] of results.entries()) {
    t.equal(r.last, 2, `rank ${rank}: join resolved to rank 2`);
    if (rank === 0) continue;
    t.equal(r.bcast.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: broadcast: ERR_INVALID_ARGUMENT`, { got: r.bcast });
    t.match(r.bcast.message, /root, rank 0, has joined/, `rank ${rank}: the message names the root and says it joined`);
    t.equal(r.bcast.peer, 0, `rank ${rank}: the error's peer is the root`);
    t.same(r.after, { ok: true, value: [1.5, 1] }, `rank ${rank}: the next allreduce averages over the 2 live ranks`);
  }
});

for (const np of [3, 4]) {
  t.test(`p=${np}: reduce, gather, scatter and alltoall run among the live ranks while rank 0 has joined; a joined root and recvSplits are refused`, async (t) => {
    const { results, job } = await runScenario(t, np, WORKER, 'rooted');
    if (!everyRankReported(t, results, job)) return;
    const live = Array.from({ length: np - 1 }, (_, q) => q + 1);
    const sum = live.reduce((a, b) => a + b, 0);
    for (const [rank, r] of results.entries()) {
      t.equal(r.last, np - 1, `rank ${rank}: join resolved to rank ${np - 1}`);
      if (rank === 0) continue;
      const g = r.got;
      t.same(g.sum, { ok: true, value: rank === 1 ? [sum, 2 * sum, 10 * (np - 1)] : [] }, `rank ${rank}: reduce sum over the live ranks at root 1`);
      t.same(g.avg, { ok: true, value: rank === 1 ? [sum / (np - 1), 2 * sum / (np - 1), 10] : [] }, `rank ${rank}: reduce avg divides by the ${np - 1} contributors`);
      t.same(g.max, { ok: true, value: rank === np - 1 ? [np - 1, 2 * (np - 1), 10] : [] }, `rank ${rank}: reduce max`);
      t.same(g.gather, { ok: true, value: rank === 1 ? live.flatMap((q) => new Array(q).fill(q)) : [] }, `rank ${rank}: gather of the live ranks' parts (rank 0 gives nothing)`);
      t.same(g.scatter, { ok: true, value: [2 * rank, 2 * rank + 1] }, `rank ${rank}: its part of the scatter`);
      t.same(g.alltoall, { ok: true, value: live.map((q) => 100 * q + rank) }, `rank ${rank}: alltoall: a block from each live rank, none from rank 0`);
      t.equal(g.reduceRoot0.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: reduce to the joined root 0: ERR_INVALID_ARGUMENT`, { got: g.reduceRoot0 });
      t.match(g.reduceRoot0.message, /its root, rank 0, has joined and takes no result/, `rank ${rank}: names the root`);
      t.equal(g.alltoallRecv.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: alltoall with recvSplits: ERR_INVALID_ARGUMENT`, { got: g.alltoallRecv });
      t.match(g.alltoallRecv.message, /an alltoall with recvSplits does not run while a rank has joined/, `rank ${rank}: says why`);
      t.same(g.after, { ok: true, value: [sum] }, `rank ${rank}: the next allreduce works`);
    }
  });
}

t.test('p=2: a joined rank\'s own collective is refused while its join is pending; the join still resolves', async (t) => {
  const { results, job } = await runScenario(t, 2, WORKER, 'refused');
  if (!everyRankReported(t, results, job)) return;
  t.equal(results[0].during.code, 'ERR_INVALID_ARGUMENT', 'rank 0: allreduce after join(): ERR_INVALID_ARGUMENT', { got: results[0].during });
  t.match(results[0].during.message, /hora\.allreduce: this rank \(0\) called hora\.join\(\) and it has not resolved/, 'the message names join');
  t.equal(results[0].grouped.code, 'ERR_INVALID_ARGUMENT', 'rank 0: a grouped allreduce after join(): ERR_INVALID_ARGUMENT', { got: results[0].grouped });
  t.match(results[0].grouped.message, /hora\.grouped\.allreduce: this rank \(0\) called hora\.join\(\)/, 'the message names the grouped call and join');
  for (const [rank, r] of results.entries()) t.equal(r.last, 1, `rank ${rank}: join resolved to rank 1`);
});

t.test('p=3: prescaleFactor with op min is refused while a rank has joined; postscaleFactor with avg divides by the contributors', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'scaled');
  if (!everyRankReported(t, results, job)) return;
  for (const [rank, r] of results.entries()) {
    t.equal(r.last, 2, `rank ${rank}: join resolved to rank 2`);
    if (rank === 0) continue;
    t.equal(r.min.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: min with prescaleFactor: ERR_INVALID_ARGUMENT`, { got: r.min });
    t.match(r.min.message, /prescaleFactor with op min does not run while a rank has joined/, `rank ${rank}: the message says why`);
    t.same(r.avg, { ok: true, value: r.want }, `rank ${rank}: avg with postscaleFactor 3 over the 2 live ranks`);
  }
});

t.test('p=3: live ranks that disagree while one has joined get ERR_MISMATCH, naming their calls; they stay in step', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'mismatch');
  if (!everyRankReported(t, results, job)) return;
  for (const [rank, r] of results.entries()) {
    t.equal(r.last, 2, `rank ${rank}: join resolved to rank 2`);
    if (rank === 0) continue;
    t.equal(r.lone.code, 'ERR_MISMATCH', `rank ${rank}: counts that differ: ERR_MISMATCH`, { got: r.lone });
    t.match(r.lone.message, /rank 1 submitted allreduce \(float32 x 3, op sum\) as collective #0 but rank 2 submitted allreduce \(float32 x 4/, `rank ${rank}: the message names the live ranks' calls`);
    t.same(r.fused.map((f) => f.code), ['ERR_MISMATCH', 'ERR_MISMATCH'], `rank ${rank}: the fused batch whose second tensor differs fails`, { got: r.fused });
    t.match(r.fused[0].message, /tensor 2 of 2 is 'b1' \(float32 x 1\) on rank 1 but 'b2' \(float32 x 1\) on rank 2/, `rank ${rank}: the layouts were exchanged (the joined rank took part) to name the tensor`);
    t.same(r.after, { ok: true, value: [3] }, `rank ${rank}: the next allreduce sums the live ranks`);
  }
});

for (const np of [3, 4]) {
  t.test(`p=${np}: a group of the first and last ranks joins among its members; the world stays in step`, async (t) => {
    const { results, job } = await runScenario(t, np, WORKER, 'group');
    if (!everyRankReported(t, results, job)) return;
    t.equal(results[0].last, 1, 'group rank 0 (world 0): join resolved to group rank 1');
    const last = results[np - 1];
    t.same(last.sums, [[np - 1, 0], [np - 1, 1]], 'group rank 1: its allreduces sum its values alone (the other joined)');
    t.same(last.avg, [4], 'group rank 1: avg divides by the one contributor');
    t.equal(last.last, 1, 'group rank 1: join resolved to itself');
    for (const [rank, r] of results.entries()) t.same(r.world, [np], `rank ${rank}: the next world allreduce sums every rank`);
  });
}

t.test('p=3: a killed rank fails a pending join with ERR_PEER_LOST, within seconds', async (t) => {
  const job = await runJob(3, WORKER, { args: ['kill'], timeoutMs: 60000 });
  const results = job.reports.map((r) => (r ? r.result : null));
  t.notOk(results[2], 'the killed rank reported nothing');
  for (const rank of [0, 1]) {
    const r = results[rank];
    if (!t.ok(r, `rank ${rank} reported`, { output: tail(job) })) continue;
    t.equal(r.got.code, 'ERR_PEER_LOST', `rank ${rank}: ${rank === 0 ? 'join' : 'allreduce'}: ERR_PEER_LOST`, { got: r.got });
    t.ok(r.ms < 10000, `rank ${rank}: it failed within 10 s (${Math.round(r.ms)} ms)`);
  }
});
