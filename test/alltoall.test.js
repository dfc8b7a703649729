'use strict';
// hora.alltoall and hora.scatter under `hora run`, 2, 3 and 4 ranks, over shared memory and TCP
// (HORA_TRANSPORT=tcp): every dtype with equal, uneven, one-sided and empty splits (recvSplits given or not),
// blocks past the shared-memory slots, in the world and in a group; scatter from every root. A bad argument
// on one rank fails the call on every rank with ERR_INVALID_ARGUMENT naming it, and the next call works;
// recvSplits that differ from what a rank sends, recvSplits on one rank only and different scatter roots are
// ERR_MISMATCH on every rank; a world of one gives copies; a killed rank is ERR_PEER_LOST (also while its
// blocks are read from its memory); blocks past the single-copy bound with the single copy on, off, and off
// on one rank only; an elastic job runs
// them inside hora.elastic.run only. test/workers/alltoall-worker.js runs each scenario inside the ranks.
const t = require('tap');
const path = require('node:path');
const { runJob, runScenario, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'alltoall-worker.js');
const TRANSPORTS = [['shm', {}], ['tcp', { HORA_TRANSPORT: 'tcp' }]];
const DTYPES = ['float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'int8', 'int16', 'uint16'];

function everyRankReported(t, results, job) {
  return results.every((r, rank) => t.ok(r, `rank ${rank} reported`, { output: tail(job) }));
}

for (const np of [2, 3, 4]) {
  for (const [transport, env] of TRANSPORTS) {
    t.test(`p=${np} ${transport}: every dtype and splits pattern, recvSplits, groups, scatter from every root`, async (t) => {
      const { results, job } = await runScenario(t, np, WORKER, 'values', env);
      if (!everyRankReported(t, results, job)) return;
      for (const [rank, r] of results.entries()) {
        const names = Object.keys(r.checks);
        for (const d of DTYPES) {
          for (const want of [`${d} uneven`, `${d} one-sided recvSplits`, `${d} empty`, `${d} splits omitted`, `${d} splits []`, `${d} zero-length x`,
            `${d} scatter root ${np - 1}`]) {
            t.ok(names.includes(want), `rank ${rank} ran ${want}`);
          }
        }
        if (rank === 0 || rank === np - 1) t.ok(names.includes('group.alltoall') && names.includes('group.scatter'), `rank ${rank} ran the group's`);
        for (const [name, got] of Object.entries(r.checks)) t.same(got, { ok: true }, `rank ${rank}: ${name}`);
      }
    });
  }
}

const BAD = {
  negative: /hora\.alltoall: argument 'options\.splits\[0\]' must be a non-negative integer count of elements; received number -1/,
  length: /hora\.alltoall: argument 'options\.splits' must be an array of 3 counts of elements, one for each rank \(or empty\); received an Array of length 2/,
  sum: /hora\.alltoall: argument 'options\.splits' must sum to x\.length \(6\); received an Array of length 3 that sums to 7/,
  fraction: /hora\.alltoall: argument 'options\.splits\[0\]' must be a non-negative integer count of elements; received number 1\.5/,
  divide: /hora\.alltoall: argument 'options\.splits' must be given when x\.length \(7\) does not divide by the 3 ranks/,
  recvNegative: /hora\.alltoall: argument 'options\.recvSplits\[0\]' must be a non-negative integer count of elements; received number -2/,
  unknown: /hora\.alltoall: argument 'options\.split' is not an option .*did you mean 'splits'\?/,
  torch: /hora\.alltoall: argument 'options\.output_split_sizes' is not an option .*did you mean 'recvSplits'\?/,
  scatterRoot: /hora\.scatter: argument 'options\.root' must be an integer rank from 0 to 2; received number 3/,
  scatterSum: /hora\.scatter: argument 'options\.splits' must sum to x\.length \(6\); received an Array of length 3 that sums to 5/,
  outType: /hora\.alltoall: argument 'options\.out' must be a Float32Array \(x's type\) to receive into; received Int32Array\(6\)/,
  outLength: /hora\.alltoall: argument 'options\.recvSplits' must sum to options\.out\.length \(7\)/,
  outOverlap: /hora\.alltoall: argument 'options\.out' must be an array apart from x/,
};

for (const [transport, env] of TRANSPORTS) {
  t.test(`p=3 ${transport}: a bad argument on rank 1 fails the call on every rank, naming it; the next call works`, async (t) => {
    const { results, job } = await runScenario(t, 3, WORKER, 'bad', env);
    if (!everyRankReported(t, results, job)) return;
    for (const [rank, r] of results.entries()) {
      for (const [name, message] of Object.entries(BAD)) {
        const got = r[name];
        t.equal(got.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: ${name}: ERR_INVALID_ARGUMENT`, { got });
        t.match(got.message, message, `rank ${rank}: ${name}: names the argument and what it was`);
        if (rank !== 1) t.match(got.message, /rank 1 made an invalid call/, `rank ${rank}: ${name}: names rank 1`);
        t.same(got.after, { ok: true }, `rank ${rank}: after ${name}: the next alltoall succeeds`);
      }
    }
  });

  t.test(`p=3 ${transport}: out receives (reused, with recvSplits and with equal parts of out), and the Work's data is out`, async (t) => {
    const { results, job } = await runScenario(t, 3, WORKER, 'out', env);
    if (!everyRankReported(t, results, job)) return;
    for (const [rank, r] of results.entries()) {
      for (const [name, got] of Object.entries(r.checks)) t.same(got, { ok: true }, `rank ${rank}: ${name}`);
      t.equal(Object.keys(r.checks).length, 5, `rank ${rank}: five calls checked`);
    }
  });

  t.test(`p=3 ${transport}: recvSplits that differ from what is sent, recvSplits on one rank, different roots: ERR_MISMATCH on every rank`, async (t) => {
    const { results, job } = await runScenario(t, 3, WORKER, 'recv', env);
    if (!everyRankReported(t, results, job)) return;
    for (const [rank, r] of results.entries()) {
      t.equal(r.mismatch.code, 'ERR_MISMATCH', `rank ${rank}: a wrong recvSplits: ERR_MISMATCH`, { got: r.mismatch });
      t.match(r.mismatch.message, /rank 0 sends 0 elements to rank 1 \(its options\.splits\), but rank 1 expects 1 from it \(its options\.recvSplits\), in alltoall/,
        `rank ${rank}: names the sender, the receiver and both counts`);
      t.equal(r.mixed.code, 'ERR_MISMATCH', `rank ${rank}: recvSplits on rank 0 only: ERR_MISMATCH`, { got: r.mixed });
      t.match(r.mixed.message, /rank 0 submitted alltoall \(int32 x 4, recvSplits given\).* but rank 1 submitted alltoall \(int32 x 6\)/, `rank ${rank}: says which rank gave them`);
      t.equal(r.roots.code, 'ERR_MISMATCH', `rank ${rank}: different scatter roots: ERR_MISMATCH`, { got: r.roots });
      t.match(r.roots.message, /rank 0 submitted scatter \(int32 x 3, root 0\).* but rank 1 submitted scatter \(int32 x 3, root 1\)/, `rank ${rank}: names both roots`);
      t.same(r.after, { ok: true }, `rank ${rank}: the next alltoall succeeds`);
    }
  });
}

t.test('a world of one: copies of x, and the checks of splits and recvSplits', async (t) => {
  const { results } = await runScenario(t, 1, WORKER, 'one');
  const r = results[0];
  if (!t.ok(r, 'rank 0 reported')) return;
  t.same({ a: r.a, splits: r.splits, copy: r.copy, b: r.b, bCopy: r.bCopy }, { a: [1, 2, 3], splits: [3], copy: true, b: [1, 2, 3], bCopy: true }, 'alltoall and scatter give copies');
  t.equal(r.wrongRecv.code, 'ERR_MISMATCH', 'recvSplits other than x.length: ERR_MISMATCH');
  t.notOk(r.wrongRecv.sync, 'as a rejected Work, not a throw');
  t.equal(r.badSplits.code, 'ERR_INVALID_ARGUMENT', 'splits that do not sum to x.length: ERR_INVALID_ARGUMENT');
});

t.test('p=3: a rank killed before alltoall: ERR_PEER_LOST on the others, no hang', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'kill', {}, { exitZero: false });
  t.not(job.code, 0, 'hora run exits non-zero');
  for (const rank of [0, 1]) {
    const r = results[rank];
    if (!t.ok(r, `rank ${rank} reported`, { output: tail(job) })) continue;
    t.equal(r.got.code, 'ERR_PEER_LOST', `rank ${rank}: ERR_PEER_LOST`, { got: r.got });
    t.ok(r.ms < 60000, `rank ${rank}: within a minute (${Math.round(r.ms)} ms)`);
  }
});

// Blocks of 16 KiB and more between ranks of one host are read from the sender's memory (one copy);
// HORA_SHM_SINGLE_COPY=0 (every rank, or rank 1 alone) moves them through the rings; TCP never offers.
const SINGLE = [
  ['shm', 'single', {}], ['shm, HORA_SHM_SINGLE_COPY=0', 'single', { HORA_SHM_SINGLE_COPY: '0' }],
  ['shm, rank 1 with HORA_SHM_SINGLE_COPY=0', 'single-rank1-off', {}], ['tcp', 'single', { HORA_TRANSPORT: 'tcp' }],
];
for (const np of [2, 3]) {
  for (const [what, scenario, env] of SINGLE) {
    t.test(`p=${np} ${what}: blocks past the single-copy bound, uneven with zero blocks, equal 1 MiB into out, scatter`, async (t) => {
      const { results, job } = await runScenario(t, np, WORKER, scenario, env);
      if (!everyRankReported(t, results, job)) return;
      for (const [rank, r] of results.entries()) {
        t.same(Object.keys(r.checks).sort(), ['after', 'equal 1', 'equal 1 out', 'equal 2', 'equal 2 out', 'scatter', 'uneven 1', 'uneven 1 out',
          'uneven 2', 'uneven 2 out'], `rank ${rank} ran every case`);
        for (const [name, got] of Object.entries(r.checks)) t.same(got, { ok: true }, `rank ${rank}: ${name}`);
      }
    });
  }
}

// Two ranks with recvSplits make the first round in the agreement's messages: a block below 16 KiB itself, a
// larger one on one host as its offer, none over TCP past that (both directions then take the usual rounds).
for (const [what, scenario, env] of SINGLE) {
  t.test(`p=2 ${what}: the first round in the agreement: every pair of block kinds; a wrong recvSplits leaves out untouched`, async (t) => {
    const { results, job } = await runScenario(t, 2, WORKER, scenario === 'single' ? 'ride' : 'ride-rank1-off', env);
    if (!everyRankReported(t, results, job)) return;
    for (const [rank, r] of results.entries()) {
      t.equal(Object.keys(r.checks).length, 5 * 5 * 4 + 1, `rank ${rank} ran every case`);
      for (const [name, got] of Object.entries(r.checks)) t.same(got, { ok: true }, `rank ${rank}: ${name}`);
      for (const [n, m] of Object.entries(r.mismatched)) {
        t.equal(m.code, 'ERR_MISMATCH', `rank ${rank}, blocks of ${n}: ERR_MISMATCH`, { got: m });
        t.match(m.message, /rank 0 sends \d+ elements to rank 1 \(its options\.splits\), but rank 1 expects \d+ from it/, `rank ${rank}, blocks of ${n}: names both counts`);
        t.ok(m.untouched, `rank ${rank}, blocks of ${n}: out untouched`);
      }
    }
  });
}

t.test('p=3: a rank killed while 8 MiB blocks are read from its memory: ERR_PEER_LOST on the others, no hang', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'killcopy', {}, { exitZero: false });
  t.not(job.code, 0, 'hora run exits non-zero');
  for (const rank of [0, 1]) {
    const r = results[rank];
    if (!t.ok(r, `rank ${rank} reported`, { output: tail(job) })) continue;
    t.equal(r.got.code, 'ERR_PEER_LOST', `rank ${rank}: ERR_PEER_LOST`, { got: r.got });
    t.ok(r.calls > 0, `rank ${rank}: alltoalls completed before the loss (${r.calls})`);
    t.ok(r.ms < 60000, `rank ${rank}: the failing call ended within a minute (${Math.round(r.ms)} ms)`);
  }
});

t.test('an elastic job: refused outside hora.elastic.run, working inside it', async (t) => {
  const job = await runJob(2, WORKER, { args: ['elastic'], launcherArgs: ['--min-np', '2'], env: { HORA_ELASTIC_SETTLE_S: '2' }, timeoutMs: 120000 });
  t.equal(job.code, 0, 'the job succeeds', { output: tail(job) });
  for (const rank of [0, 1]) {
    const r = job.reports[rank] && job.reports[rank].result;
    if (!t.ok(r, `worker ${rank} reported`, { output: tail(job) })) continue;
    t.equal(r.outside.code, 'ERR_INVALID_ARGUMENT', `worker ${rank}: outside hora.elastic.run: ERR_INVALID_ARGUMENT`);
    t.match(r.outside.message, /hora\.alltoall: this is an elastic job/, `worker ${rank}: says where to call it`);
    t.same(r.inside, { ok: true, scatter: { ok: true } }, `worker ${rank}: alltoall and scatter inside`);
  }
});
