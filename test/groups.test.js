'use strict';
// Process groups (hora.newGroup) in 4-rank jobs under `hora run`, over shared memory and over TCP
// (HORA_TRANSPORT=tcp): every collective against computed values in groups of 2 and 3, disjoint groups
// at the same time (and one not waiting for another that is late), group and world collectives
// interleaved, messages by group rank and kept apart from the world's, the pipeline's use (replica
// allreduces beside stage-to-stage messages), bad lists, different lists, a mismatch inside a group, a
// killed member and a member that never calls. test/workers/groups-worker.js runs each scenario inside
// the ranks.
const t = require('tap');
const path = require('node:path');
const { runScenario, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'groups-worker.js');
const TRANSPORTS = [['shm', {}], ['tcp', { HORA_TRANSPORT: 'tcp' }]];

/** Runs a scenario on 4 ranks and returns each rank's result, after asserting that every rank reported. */
function scenario(t, name, env = {}, options = {}) {
  return runScenario(t, 4, WORKER, name, env, options);
}

for (const [transport, env] of TRANSPORTS) {
  t.test(`${transport}: every collective in groups of 2 and 3, disjoint groups at once, world calls between`, async (t) => {
    const { results, job } = await scenario(t, 'results', env);
    const member = { a: [0, 2], b: [1, 3], c: [3, 1, 0] };
    for (const [rank, r] of results.entries()) {
      t.ok(r, `rank ${rank} reported`, { output: tail(job) });
      if (!r) continue;
      t.same(r.bad, [], `rank ${rank}: every result right`);
      for (const [k, ranks] of Object.entries(member)) {
        t.same(r.seen[k], ranks.includes(rank) ? ranks : null, `rank ${rank}: newGroup(${JSON.stringify(ranks)}) gives ${ranks.includes(rank) ? 'the group' : 'null'}`);
      }
    }
  });

  t.test(`${transport}: a group does not wait for a disjoint group that is late`, async (t) => {
    const { results } = await scenario(t, 'independent', env);
    for (const rank of [0, 1]) {
      const ms = results[rank] && results[rank].ms;
      t.ok(ms < 2500, `rank ${rank}: group [0, 1]'s five allreduces took ${Math.round(ms)} ms, while group [2, 3] started 3 s late`);
    }
  });

  t.test(`${transport}: send and recv inside a group name group ranks`, async (t) => {
    const { results } = await scenario(t, 'messages', env);
    t.same(results[0], { bad: [], member: false }, 'rank 0 is not a member');
    for (const rank of [1, 2, 3]) {
      const r = results[rank];
      t.same(r && r.bad, [], `rank ${rank}: messages around the group's ring arrived intact`);
      t.equal(r && r.self.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: a send to its own group rank is refused`);
      t.match(r && r.self.message, /hora\.group\.send: argument 'options\.to' must be an integer rank from 0 to 2 other than this rank/, 'the message names the argument and the group ranks');
      t.equal(r && r.outside.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: a group rank past the group's size is refused`);
      t.match(r && r.outside.message, /received number 3/, 'the message says what was received');
    }
  });

  t.test(`${transport}: replica allreduces in groups [0, 2] and [1, 3] while 0 <-> 1 and 2 <-> 3 exchange messages`, async (t) => {
    const { results } = await scenario(t, 'pipeline', env);
    for (const [rank, r] of results.entries()) t.same(r && r.bad, [], `rank ${rank}: every average and message right`);
  });
}

t.test('bad lists and bad group calls fail with ERR_INVALID_ARGUMENT naming the argument', async (t) => {
  const { results } = await scenario(t, 'invalid');
  for (const [rank, r] of results.entries()) {
    t.ok(r, `rank ${rank} reported`);
    if (!r) continue;
    for (const [name, received] of [['empty', '\\[\\]'], ['not an array', 'number 5'], ['out of range', '\\[0, 4\\]'],
      ['negative', '\\[-1, 1\\]'], ['fraction', '\\[0, 1\\.5\\]'], ['duplicate', '\\[1, 1\\]'], ['string', "\\[the string \"0\", 1\\]"]]) {
      t.equal(r[name].code, 'ERR_INVALID_ARGUMENT', `rank ${rank}, ${name}: ERR_INVALID_ARGUMENT`);
      t.match(r[name].message, new RegExp(`hora\\.newGroup: argument 'ranks' must be a non-empty array of distinct integer ranks from 0 to 3.*received ${received}$`),
        `rank ${rank}, ${name}: names 'ranks' and what was received`);
    }
    t.equal(r.oneRank.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: a bad list on rank 1 only fails newGroup here too`);
    if (rank !== 1) t.match(r.oneRank.message, /rank 1 made an invalid call: hora\.newGroup: argument 'ranks'/, `rank ${rank}: the error names rank 1`);
    t.equal(r.world, 4, `rank ${rank}: the world works afterwards`);
    if (rank === 1 || rank === 2) {
      t.equal(r.root.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: root 2 in a group of 2 is refused`);
      t.match(r.root.message, /hora\.group\.broadcast: argument 'options\.root' must be an integer rank from 0 to 1; received number 2/);
      t.equal(r.op.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: an unknown op is refused`);
      t.match(r.op.message, /hora\.group\.allreduce: argument 'options\.op'/);
      t.equal(r.to.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: a send to group rank 2 of 2 is refused`);
      t.equal(r.x.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}: a plain Array is refused`);
      t.match(r.x.message, /hora\.group\.allreduce: argument 'x' must be a Float32Array/);
      t.equal(r.after, 3, `rank ${rank}: the group works after the refused calls`);
    } else {
      t.notOk('after' in r, `rank ${rank} is not in group [1, 2]`);
    }
  }
});

t.test('different lists on different ranks: ERR_MISMATCH on every rank, naming the lists', async (t) => {
  const { results } = await scenario(t, 'lists');
  for (const [rank, r] of results.entries()) {
    t.ok(r, `rank ${rank} reported`);
    if (!r) continue;
    t.equal(r.made.code, 'ERR_MISMATCH', `rank ${rank}: ERR_MISMATCH`);
    t.match(r.made.message, /rank 0 and rank 2 differ \(.*rank 1: group 1 of \[0, 1\]; rank 2: group 1 of \[0, 1, 2\]/, `rank ${rank}: names the ranks and their lists`);
    t.equal(r.made.peer, 2, `rank ${rank}: the error's peer is rank 2`);
    t.equal(r.world, 6, `rank ${rank}: the world works afterwards`);
    t.equal(r.sum, rank <= 1 ? 1 : null, `rank ${rank}: a group made afterwards works`);
  }
});

t.test('a mismatch inside a group fails its members only, naming the group', async (t) => {
  const { results } = await scenario(t, 'inside');
  for (const rank of [0, 2]) {
    const r = results[rank];
    t.equal(r && r.mismatch.code, 'ERR_MISMATCH', `rank ${rank}: ERR_MISMATCH`);
    t.match(r && r.mismatch.message, /allreduce 'grads' in group 1 \(ranks 0, 2\): rank 0 submitted allreduce 'grads' \(float32 x 4, op avg\) as collective #0 of group 1 but rank 2 submitted allreduce 'grads' \(float32 x 5/,
      `rank ${rank}: names the group and both sides`);
    t.equal(r && r.after, 2, `rank ${rank}: the group's next allreduce works`);
  }
  for (const rank of [1, 3]) t.equal(results[rank] && results[rank].other, 4, `rank ${rank}: group [1, 3] unaffected`);
  for (const [rank, r] of results.entries()) t.equal(r && r.world, 6, `rank ${rank}: the world works afterwards`);
});

for (const [transport, env] of TRANSPORTS) {
  t.test(`${transport}: a member killed mid-run: ERR_PEER_LOST on the other members, no hang`, async (t) => {
    const { results, job } = await scenario(t, 'kill', env, { exitZero: false });
    t.not(job.code, 0, 'hora run exits non-zero');
    for (const rank of [0, 1]) {
      const r = results[rank];
      t.ok(r, `rank ${rank} reported`, { output: tail(job) });
      if (!r) continue;
      t.equal(r.got && r.got.code, 'ERR_PEER_LOST', `rank ${rank}: ERR_PEER_LOST`, { got: r.got });
      t.match(r.got && r.got.message, /in group 1 \(ranks 0, 1, 2\)/, `rank ${rank}: the error names the group`);
      t.ok(r.ms < 60000, `rank ${rank}: within a minute (${Math.round(r.ms)} ms)`);
    }
  });
}

t.test('a member that never calls: ERR_TIMEOUT after HORA_TIMEOUT_S, naming it and the group', async (t) => {
  const { results } = await scenario(t, 'timeout', { HORA_TIMEOUT_S: '1.5' }, { exitZero: false });
  const r = results[0];
  t.equal(r && r.got.code, 'ERR_TIMEOUT', 'rank 0: ERR_TIMEOUT', { got: r && r.got });
  t.equal(r && r.got.peer, 1, 'the error names rank 1');
  t.match(r && r.got.message, /allreduce 'late' in group 1 \(ranks 0, 1\): timed out after 1\.5/, 'the message names the group and the deadline');
  t.ok(r && r.ms >= 1400 && r.ms < 30000, `after the deadline, not much later (${r && Math.round(r.ms)} ms)`);
});
