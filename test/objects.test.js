'use strict';
// hora.broadcastObject and hora.allgatherObject under `hora run`, 2 and 3 ranks, over shared memory and TCP
// (HORA_TRANSPORT=tcp): nested structures from every root and from every rank, in the world and in a group;
// a value that cannot be cloned, a value past maxBytes and an unknown option on one rank fail the call on
// every rank with ERR_INVALID_ARGUMENT (and the next call works); different roots fail it with ERR_MISMATCH on
// every rank, and so does an object call where another rank makes a plain allgather; a world of one gives copies; a killed rank is ERR_PEER_LOST; an elastic job runs them inside
// hora.elastic.run, also after it re-forms. test/workers/objects-worker.js
// runs each scenario inside the ranks.
const t = require('tap');
const path = require('node:path');
const { runJob, runScenario, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'objects-worker.js');
const TRANSPORTS = [['shm', {}], ['tcp', { HORA_TRANSPORT: 'tcp' }]];

function everyRankReported(t, results, job) {
  return results.every((r, rank) => t.ok(r, `rank ${rank} reported`, { output: tail(job) }));
}

function recovered(t, r, rank) {
  t.same(r.after, { ok: true, equal: true }, `rank ${rank}: the next allgatherObject succeeds (nothing lost, ranks in step)`);
}

for (const np of [2, 3]) {
  for (const [transport, env] of TRANSPORTS) {
    t.test(`p=${np} ${transport}: nested structures from every root and every rank, in the world and a group`, async (t) => {
      const { results, job } = await runScenario(t, np, WORKER, 'values', env);
      if (!everyRankReported(t, results, job)) return;
      for (const [rank, r] of results.entries()) {
        const names = Object.keys(r.checks);
        t.ok(names.includes(`broadcastObject root ${np - 1}`) && names.includes('allgatherObject'), `rank ${rank} ran every check`);
        if (rank === 0 || rank === np - 1) t.ok(names.includes('group.broadcastObject') && names.includes('group.allgatherObject'), `rank ${rank} ran the group's`);
        for (const [name, got] of Object.entries(r.checks)) t.same(got, { ok: true, equal: true }, `rank ${rank}: ${name}`);
      }
    });
  }
}

for (const [transport, env] of TRANSPORTS) {
  t.test(`p=3 ${transport}: a function or a symbol on one rank fails the call on every rank`, async (t) => {
    const { results, job } = await runScenario(t, 3, WORKER, 'uncloneable', env);
    if (!everyRankReported(t, results, job)) return;
    for (const [rank, r] of results.entries()) {
      for (const [call, got] of [['allgatherObject', r.gather], ['broadcastObject', r.bcast]]) {
        t.equal(got.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: ${call}: ERR_INVALID_ARGUMENT`, { got });
        t.match(got.message, new RegExp(`hora\\.${call}: argument 'value' must be a value the structured clone algorithm can copy`), `rank ${rank}: ${call}: the message names the argument`);
        t.match(got.message, call === 'allgatherObject' ? /could not be cloned/ : /Symbol\(s\) could not be cloned/, `rank ${rank}: ${call}: and says what refused it`);
        if (rank !== 2) t.match(got.message, /rank 2 made an invalid call/, `rank ${rank}: ${call}: the message names the rank whose value it was`);
      }
      recovered(t, r, rank);
    }
  });
}

t.test('p=3: a value past maxBytes on one rank fails the call on every rank, naming maxBytes and the size', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'maxBytes');
  if (!everyRankReported(t, results, job)) return;
  for (const [rank, r] of results.entries()) {
    t.equal(r.got.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: allgatherObject: ERR_INVALID_ARGUMENT`, { got: r.got });
    t.match(r.got.message, /hora\.allgatherObject: argument 'value' must serialize to at most options\.maxBytes = 1000 bytes.*serializes to 500\d bytes/, `rank ${rank}: allgatherObject: names maxBytes and the size`);
    t.equal(r.bcast.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: broadcastObject: ERR_INVALID_ARGUMENT`, { got: r.bcast });
    t.match(r.bcast.message, /hora\.broadcastObject: argument 'value' must serialize to at most options\.maxBytes = 1000 bytes.*; received Float64Array\(200\), which serializes to 16\d\d bytes/, `rank ${rank}: broadcastObject: names maxBytes and the size`);
    recovered(t, r, rank);
  }
});

t.test('p=2: an unknown option, a root out of range or a bad maxBytes on one rank fails the call on every rank, naming it', async (t) => {
  const { results, job } = await runScenario(t, 2, WORKER, 'unknown');
  if (!everyRankReported(t, results, job)) return;
  for (const [rank, r] of results.entries()) {
    t.equal(r.got.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: ERR_INVALID_ARGUMENT`, { got: r.got });
    t.match(r.got.message, /hora\.broadcastObject: argument 'options\.rot' is not an option \(received number 1\): did you mean 'root'\? hora\.broadcastObject takes root, maxBytes, name/, `rank ${rank}: names the key and the likely one`);
    t.equal(r.root.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: a root out of range: ERR_INVALID_ARGUMENT`, { got: r.root });
    t.match(r.root.message, /hora\.broadcastObject: argument 'options\.root' must be an integer rank from 0 to 1; received number 7/, `rank ${rank}: names options.root`);
    t.equal(r.bound.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: maxBytes -1: ERR_INVALID_ARGUMENT`, { got: r.bound });
    t.match(r.bound.message, /hora\.allgatherObject: argument 'options\.maxBytes' must be a positive integer \(bytes\); received number -1/, `rank ${rank}: names options.maxBytes`);
    recovered(t, r, rank);
  }
});

for (const [transport, env] of TRANSPORTS) {
  t.test(`p=3 ${transport}: different roots fail broadcastObject with ERR_MISMATCH on every rank`, async (t) => {
    const { results, job } = await runScenario(t, 3, WORKER, 'roots', env);
    if (!everyRankReported(t, results, job)) return;
    for (const [rank, r] of results.entries()) {
      t.equal(r.got.code, 'ERR_MISMATCH', `rank ${rank}: ERR_MISMATCH`, { got: r.got });
      t.match(r.got.message, /hora\.broadcastObject: every rank must make the same call with the same root and maxBytes/, `rank ${rank}: says what must agree`);
      t.match(r.got.message, /rank 0: broadcastObject root 0 maxBytes 67108864; rank 1: broadcastObject root 1 maxBytes 67108864; rank 2: broadcastObject root 2/, `rank ${rank}: names every rank's root`);
      recovered(t, r, rank);
    }
  });
}

t.test('p=3: allgatherObject on one rank where the others make a plain allgather of bytes: ERR_MISMATCH on every rank', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'plain', {});
  if (!everyRankReported(t, results, job)) return;
  for (const [rank, r] of results.entries()) {
    t.equal(r.got.code, 'ERR_MISMATCH', `rank ${rank}: ERR_MISMATCH`, { got: r.got });
    t.match(r.got.message, /rank 0 submitted allgather 'allgatherObject' \(uint8 x \d+.* but rank 1 submitted allgather \(uint8 x 4/, `rank ${rank}: names both calls`);
    recovered(t, r, rank);
  }
});

t.test('a world of one: copies of the value, and a clear error for a function', async (t) => {
  const { results } = await runScenario(t, 1, WORKER, 'one');
  const r = results[0];
  t.same(r && { ...r, bad: undefined }, { broadcastEqual: true, broadcastCopy: true, allgatherEqual: true, allgatherCopy: true, bad: undefined }, 'deep-equal copies, not the value itself');
  t.equal(r && r.bad.code, 'ERR_INVALID_ARGUMENT', 'a function: ERR_INVALID_ARGUMENT');
  t.match(r && r.bad.message, /hora\.allgatherObject: argument 'value' must be a value the structured clone algorithm can copy/, 'naming the argument');
});

t.test('p=3: a rank killed before allgatherObject: ERR_PEER_LOST on the others, no hang', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'kill', {}, { exitZero: false });
  t.not(job.code, 0, 'hora run exits non-zero');
  for (const rank of [0, 1]) {
    const r = results[rank];
    if (!t.ok(r, `rank ${rank} reported`, { output: tail(job) })) continue;
    t.equal(r.got.code, 'ERR_PEER_LOST', `rank ${rank}: ERR_PEER_LOST`, { got: r.got });
    t.ok(r.ms < 60000, `rank ${rank}: within a minute (${Math.round(r.ms)} ms)`);
  }
});

t.test('an elastic job (-np 3 --min-np 2): refused outside hora.elastic.run, working inside it, also after a worker is lost', async (t) => {
  const job = await runJob(3, WORKER, { args: ['elastic'], launcherArgs: ['--min-np', '2'], env: { HORA_ELASTIC_SETTLE_S: '2' }, timeoutMs: 120000 });
  t.equal(job.code, 0, 'the job succeeds', { output: tail(job) });
  for (const rank of [0, 1]) {
    const r = job.reports[rank] && job.reports[rank].result;
    if (!t.ok(r, `worker ${rank} reported`, { output: tail(job) })) continue;
    t.equal(r.outside.code, 'ERR_INVALID_ARGUMENT', `worker ${rank}: outside hora.elastic.run: ERR_INVALID_ARGUMENT`);
    t.match(r.outside.message, /hora\.allgatherObject: this is an elastic job \(hora run --min-np\): collectives run inside hora\.elastic\.run/, `worker ${rank}: says where to call it`);
    const first = r.seen[0];
    t.same(first, { size: 3, step: 0, workers: [0, 1, 2], steps: [0, 0, 0], root: 2, date: 0 }, `worker ${rank}: step 0 in the world of three`);
    const after = r.seen.slice(-2);
    t.same(after, [1, 2].map((step) => ({ size: 2, step, workers: [0, 1], steps: [step, step], root: 1, date: step })),
      `worker ${rank}: steps 1 and 2 in the re-formed world of two`, { seen: r.seen });
  }
  t.notOk(job.reports[2], 'worker 2 (killed) did not report');
});
