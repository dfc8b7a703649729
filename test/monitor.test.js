'use strict';
// JobMonitor: rates, bus bandwidth and the stall inspector's reasoning, from hand-made Stats reports.
const t = require('tap');
const { JobMonitor, busBandwidthFactor, describeStall, formatRanks } = require('../dist/ts/control/monitor.js');

function report(o) {
  return { timeMs: 0, submitted: 0, completed: 0, kinds: [], pending: [], steps: 0, stepUs: 0, commWaitUs: 0, ...o };
}

t.test('bus bandwidth factors are the nccl-tests ones', async (t) => {
  t.equal(busBandwidthFactor('allreduce', 4), 1.5);
  t.equal(busBandwidthFactor('allgather', 4), 0.75);
  t.equal(busBandwidthFactor('reduceScatter', 4), 0.75);
  t.equal(busBandwidthFactor('broadcast', 4), 1);
  t.equal(busBandwidthFactor('barrier', 4), 0);
});

t.test('rates come from the last two reports; busbw from bytes over busy time', async (t) => {
  const m = new JobMonitor(2);
  const now = 1_000_000;
  for (const rank of [0, 1]) {
    m.record(rank, report({ timeMs: 1000, submitted: 10, completed: 10, kinds: [{ kind: 'allreduce', count: 10, bytes: 1e6, busyUs: 1e6 }] }), now - 1000);
    m.record(rank, report({ timeMs: 2000, submitted: 60, completed: 60, kinds: [{ kind: 'allreduce', count: 60, bytes: 6e6, busyUs: 1.5e6 }], steps: 4, stepUs: 4e6, commWaitUs: 1e6 }), now);
  }
  const s = m.snapshot(2, 60000, now);
  t.equal(s.ranks[0].collectivesPerS, 50);
  t.equal(s.ranks[1].bytesPerS, 5e6);
  t.equal(s.collectivesPerS, 100);
  const ar = s.kinds.find((k) => k.kind === 'allreduce');
  t.equal(ar.algbw, 12e6 / 3, 'since the start: 12 MB over 3 s of busy time');
  t.equal(ar.busbw, ar.algbw * 1, '2 ranks: 2(p-1)/p = 1');
  t.equal(ar.recentAlgbw, 10e6 / 1, 'last reports: 10 MB over 1 s');
  t.same(s.steps, { count: 8, stepS: 8, commWaitS: 2, computeS: 6, commShare: 0.25 });
  t.same(s.stalls, []);
  const later = m.snapshot(2, 60000, now + 10000);
  t.equal(later.collectivesPerS, 0, 'a rank that stopped reporting shows no rate');
});

t.test('a stall names the ranks that have not submitted the oldest waiting collective', async (t) => {
  const m = new JobMonitor(4);
  const now = 5_000_000;
  const waiting = (rank) => m.record(rank, report({ timeMs: now, submitted: 42, completed: 40, pending: [
    { seq: 41, kind: 'allreduce', name: 'grad/dense/kernel', ageMs: 61000 }, { seq: 42, kind: 'allreduce', name: 'grad/dense/bias', ageMs: 60900 },
  ] }), now);
  waiting(0);
  waiting(1);
  m.record(2, report({ timeMs: now, submitted: 40, completed: 40 }), now);
  m.record(3, report({ timeMs: now - 30000, submitted: 40, completed: 40 }), now - 30000);
  t.same(m.stalls(120000, now), [], 'not before the warning time');
  const [stall, more] = m.stalls(60000, now);
  t.equal(more, undefined, 'one stall: the lowest sequence number');
  t.same({ seq: stall.seq, missing: stall.missing, submittedBy: stall.submittedBy }, { seq: 41, missing: [2, 3], submittedBy: [0, 1] });
  t.equal(describeStall(stall),
    "stall: ranks 2, 3 have not submitted allreduce 'grad/dense/kernel' (#41) that ranks 0, 1 submitted 61 s ago; " +
    'no report from rank 3 for 30 s (blocked or busy: it may have submitted it since)');
  m.record(2, report({ timeMs: now + 1000, submitted: 42, completed: 40, pending: [{ seq: 41, kind: 'allreduce', name: 'grad/dense/kernel', ageMs: 10 }] }), now + 1000);
  m.record(3, report({ timeMs: now + 1000, submitted: 41, completed: 40, pending: [{ seq: 41, kind: 'allreduce', name: 'grad/dense/kernel', ageMs: 5 }] }), now + 1000);
  const [next] = m.stalls(60000, now + 1000);
  t.same({ seq: next.seq, missing: next.missing }, { seq: 42, missing: [3] }, 'then the next one, held up by rank 3 alone');
  m.record(3, report({ timeMs: now + 2000, submitted: 42, completed: 40 }), now + 2000);
  t.same(m.stalls(60000, now + 2000), [], 'everyone has submitted: waiting, but no stall');
});

t.test('rank lists', async (t) => {
  t.equal(formatRanks([2]), 'rank 2');
  t.equal(formatRanks([0, 1]), 'ranks 0, 1');
  t.equal(formatRanks([0, 1, 2, 3, 7, 9, 10, 11]), 'ranks 0-3, 7, 9-11');
});
