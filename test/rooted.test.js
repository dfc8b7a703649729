'use strict';
// hora.reduce and hora.gather under `hora run`, 2, 3 and 4 ranks, over shared memory and TCP: every root,
// dtype and op, lengths 0, 1, odd and past the shared-memory slots and the fusion buffer (HORA_FUSION_MB=1),
// checked against a JS reference and against hora.allreduce bit for bit; gathers whose lengths differ by
// rank (a rank with nothing, all empty); a process group; a bad argument on one rank fails the call on every
// rank with ERR_INVALID_ARGUMENT naming it, different roots, ops, dtypes or reduce lengths with
// ERR_MISMATCH, and the next call works; a world of one gives copies; a killed rank is ERR_PEER_LOST; an
// elastic job runs them inside hora.elastic.run, also after it re-forms. test/workers/rooted-worker.js runs
// each scenario inside the ranks.
const t = require('tap');
const path = require('node:path');
const { runJob, runScenario, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'rooted-worker.js');
const TRANSPORTS = [['shm', {}], ['tcp', { HORA_TRANSPORT: 'tcp' }]];
// The bound errors.test.js holds a killed peer's detection to (typically well under a second).
const DETECT_MS = 5000;

function everyRankReported(t, results, job) {
  return results.every((r, rank) => t.ok(r, `rank ${rank} reported`, { output: tail(job) }));
}

for (const np of [2, 3, 4]) {
  for (const [transport, env] of TRANSPORTS) {
    t.test(`p=${np} ${transport}: every root, dtype, op and length; gathers of lengths that differ by rank`, async (t) => {
      const { results, job } = await runScenario(t, np, WORKER, 'sweep', { HORA_FUSION_MB: '1', ...env });
      if (!everyRankReported(t, results, job)) return;
      for (const [rank, r] of results.entries()) {
        t.ok(r.checked > 400 * np, `rank ${rank} ran its checks (${r.checked})`);
        t.same(r.failures, [], `rank ${rank}: every result as expected, null off the root`);
      }
    });
  }
}

t.test('p=3: reduce and gather in a group of the last and first ranks, by group rank', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'groups');
  if (!everyRankReported(t, results, job)) return;
  t.same(results.map((r) => r.member), [true, false, true], 'ranks 2 and 0 are members');
  for (const rank of [0, 2]) {
    t.ok(results[rank].checked >= 5, `rank ${rank} ran the group's checks`);
    t.same(results[rank].failures, [], `rank ${rank}: the group's results`);
  }
});

const ARGUMENT_ERRORS = {
  root: /hora\.reduce: argument 'options\.root' must be an integer rank from 0 to 2; received number 3/,
  gatherRoot: /hora\.gather: argument 'options\.root' must be an integer rank from 0 to 2; received number -1/,
  op: /hora\.reduce: argument 'options\.op' must be one of 'sum', 'avg', 'min', 'max', 'prod'; received the string "mean"/,
  key: /hora\.gather: argument 'options\.dst' is not an option \(received number 1\): did you mean 'root'\? hora\.gather takes root, name, dtype/,
  notArray: /hora\.reduce: argument 'x' must be a Float32Array.*; received an Array of length 3/,
  device: /hora\.reduce: argument 'x' must be a typed array \(this call takes host memory; copy a hora\.cuda\.DeviceBuffer to the host first\)/,
  gatherDevice: /hora\.gather: argument 'x' must be a typed array \(this call takes host memory/,
  intScale: /hora\.reduce: argument 'options\.prescaleFactor' must be 1 or absent for an integer dtype/,
};
const MISMATCHES = {
  roots: /reduce \(float32 x 3, op sum, root 0\) as collective #\d+ but rank 1 submitted reduce \(float32 x 3, op sum, root 1\)/,
  gatherRoots: /gather \(float32 x 3, root 0\) as collective #\d+ but rank 1 submitted gather \(float32 x 3, root 1\)/,
  ops: /reduce \(float32 x 3, op max, root 0\) as collective #\d+ but rank 1 submitted reduce \(float32 x 3, op sum, root 0\)/,
  counts: /reduce \(float32 x 3, op sum, root 0\) as collective #\d+ but rank 2 submitted reduce \(float32 x 4, op sum, root 0\)/,
  dtypes: /gather \(int32 x 3, root 0\) as collective #\d+ but rank 1 submitted gather \(float32 x 3, root 0\)/,
  kinds: /gather \(float32 x 3, root 0\) as collective #\d+ but rank 1 submitted reduce \(float32 x 3, op sum, root 0\)/,
};

t.test('p=3: a bad argument on one rank fails the call on every rank, naming it; differences fail with ERR_MISMATCH', async (t) => {
  const { results, job } = await runScenario(t, 3, WORKER, 'invalid');
  if (!everyRankReported(t, results, job)) return;
  for (const [rank, r] of results.entries()) {
    for (const [name, message] of Object.entries(ARGUMENT_ERRORS)) {
      const bad = name === 'key' ? 0 : 1;
      t.equal(r[name].code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: ${name}: ERR_INVALID_ARGUMENT`, { got: r[name] });
      t.match(r[name].message, message, `rank ${rank}: ${name}: names the argument and what it got`);
      if (rank !== bad) t.match(r[name].message, new RegExp(`rank ${bad} made an invalid call`), `rank ${rank}: ${name}: names rank ${bad}`);
      t.equal(r[`${name}After`], true, `rank ${rank}: ${name}: the next reduce succeeds`);
    }
    for (const [name, message] of Object.entries(MISMATCHES)) {
      t.equal(r[name].code, 'ERR_MISMATCH', `rank ${rank}: ${name}: ERR_MISMATCH`, { got: r[name] });
      t.match(r[name].message, message, `rank ${rank}: ${name}: names both sides`);
      t.equal(r[`${name}After`], true, `rank ${rank}: ${name}: the next reduce succeeds`);
    }
  }
});

t.test('a world of one: copies (avg and the factors applied), and a root out of range refused', async (t) => {
  const { results } = await runScenario(t, 1, WORKER, 'one');
  const r = results[0];
  t.same(r && { ...r, bad: undefined }, { reduce: [3, -4], reduceCopy: true, gather: [1.5, -2], gatherCopy: true, bad: undefined }, 'new arrays');
  t.equal(r && r.bad.code, 'ERR_INVALID_ARGUMENT', 'root 1: ERR_INVALID_ARGUMENT');
  t.match(r && r.bad.message, /hora\.reduce: argument 'options\.root' must be an integer rank from 0 to 0; received number 1/, 'naming options.root');
});

for (const [transport, env] of TRANSPORTS) {
  t.test(`p=3 ${transport}: a rank killed before reduce and gather: ERR_PEER_LOST on the others, no hang`, async (t) => {
    const { results, job } = await runScenario(t, 3, WORKER, 'kill', env, { exitZero: false });
    t.not(job.code, 0, 'hora run exits non-zero');
    for (const rank of [0, 1]) {
      const r = results[rank];
      if (!t.ok(r, `rank ${rank} reported`, { output: tail(job) })) continue;
      t.equal(r.reduce.code, 'ERR_PEER_LOST', `rank ${rank}: reduce: ERR_PEER_LOST`, { got: r.reduce });
      t.ok(r.ms < DETECT_MS, `rank ${rank}: within ${DETECT_MS} ms (${Math.round(r.ms)} ms)`);
      t.equal(r.gather.code, 'ERR_PEER_LOST', `rank ${rank}: the gather after it: ERR_PEER_LOST`, { got: r.gather });
    }
  });
}

t.test('an elastic job (-np 3 --min-np 2): refused outside hora.elastic.run, working inside it, also after a worker is lost', async (t) => {
  const job = await runJob(3, WORKER, { args: ['elastic'], launcherArgs: ['--min-np', '2'], env: { HORA_ELASTIC_SETTLE_S: '2' }, timeoutMs: 120000 });
  t.equal(job.code, 0, 'the job succeeds', { output: tail(job) });
  for (const worker of [0, 1]) {
    const r = job.reports[worker] && job.reports[worker].result;
    if (!t.ok(r, `worker ${worker} reported`, { output: tail(job) })) continue;
    t.equal(r.outside.code, 'ERR_INVALID_ARGUMENT', `worker ${worker}: outside hora.elastic.run: ERR_INVALID_ARGUMENT`);
    t.match(r.outside.message, /hora\.reduce: this is an elastic job \(hora run --min-np\): collectives run inside hora\.elastic\.run/, `worker ${worker}: says where to call it`);
    t.same(r.seen[0], { size: 3, step: 0, sum: worker === 2 ? [3, 0] : null, all: worker === 0 ? [0, 0, 1, 0, 2, 0] : null },
      `worker ${worker}: step 0 in the world of three`);
    const last = r.seen.slice(-2);
    t.same(last, [1, 2].map((step) => ({ size: 2, step, sum: r.rank === 1 ? [2, 2 * step] : null, all: r.rank === 0 ? [0, step, 1, step] : null })),
      `worker ${worker}: steps 1 and 2 in the re-formed world of two`, { seen: r.seen });
  }
  t.notOk(job.reports[2], 'worker 2 (killed) did not report');
});
