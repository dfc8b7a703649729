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
  t.equal(busBandwidthFactor('reduce', 4), 1, 'reduce: as nccl-tests counts it');
  t.equal(busBandwidthFactor('gather', 4), 0.75, 'gather: its output, as allgather');
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

t.test('reset: what the ranks of a world that re-formed had pending is no stall of the next one', async (t) => {
  const m = new JobMonitor(3);
  const now = 5_000_000;
  m.record(0, report({ timeMs: now, submitted: 300, completed: 299, pending: [{ seq: 300, kind: 'allreduce', name: 'step', ageMs: 61000 }] }), now);
  m.record(1, report({ timeMs: now, submitted: 299, completed: 299 }), now);
  m.record(2, report({ timeMs: now, submitted: 300, completed: 299 }), now);
  t.equal(m.stalls(60000, now).length, 1, 'before the reset: rank 1 holds collective 300 up');
  m.reset();
  m.record(0, report({ timeMs: now + 1000, submitted: 3, completed: 3 }), now + 1000);
  m.record(1, report({ timeMs: now + 1000, submitted: 3, completed: 3 }), now + 1000);
  t.same(m.stalls(60000, now + 1000), [], 'after it: no stall from the old reports');
  t.equal(m.snapshot(2, 60000, now + 1000).ranks[2].reportAgeMs, null, 'the rank the new world does not have is forgotten');
});

t.test('rank lists', async (t) => {
  t.equal(formatRanks([2]), 'rank 2');
  t.equal(formatRanks([0, 1]), 'ranks 0, 1');
  t.equal(formatRanks([0, 1, 2, 3, 7, 9, 10, 11]), 'ranks 0-3, 7, 9-11');
});

// 2 stages x 2 replicas, rank = replica x stages + stage; figures since the start, in microseconds.
function pipelineReport(rank, timeMs, batches, busyUs, wallUs, extra = {}) {
  return report({
    timeMs, pipeline: { stage: rank % 2, stages: 2, replica: Math.floor(rank / 2), replicas: 2, batches, busyUs, wallUs, weightBytes: 4096 * (1 + (rank % 2)), peakStashBytes: 1000 * (rank + 1), ...extra },
  });
}

t.test('pipeline stages: utilization over the last reports, averaged over replicas', async (t) => {
  const m = new JobMonitor(4);
  const now = 2_000_000;
  t.equal(m.snapshot(4, 0, now).pipeline, null, 'no rank reports a pipeline: no section');
  // Busy share of the last second per rank: stage 0 0.6 and 0.8, stage 1 0.5 and 0.3 (since the start: above 0.8).
  const recentBusy = [600e3, 500e3, 800e3, 300e3];
  for (let rank = 0; rank < 4; rank++) {
    m.record(rank, pipelineReport(rank, 1000, 10, 9e6, 10e6), now - 1000);
    m.record(rank, pipelineReport(rank, 2000, 11 + (rank >> 1), 9e6 + recentBusy[rank], 11e6), now);
  }
  const p = m.snapshot(4, 0, now).pipeline;
  t.same({ stages: p.stages, replicas: p.replicas }, { stages: 2, replicas: 2 });
  t.equal(p.byStage.length, 2, 'one row per stage');
  const [s0, s1] = p.byStage;
  t.same(s0.ranks, [0, 2]);
  t.same(s1.ranks, [1, 3]);
  t.equal(s0.utilization, 0.7, 'stage 0: (0.6 + 0.8) / 2');
  t.equal(s1.utilization, 0.4, 'stage 1: (0.5 + 0.3) / 2');
  t.equal(s1.bubble, 0.6);
  t.same([s0.batches, s1.batches], [12, 12], 'the most batches of any replica');
  t.same([s0.weightBytes, s1.weightBytes], [4096, 8192]);
  t.same([s0.peakStashBytes, s1.peakStashBytes], [3000, 4000], 'the largest stash of any replica');
  t.equal(s0.wallS, 22, 'since the start, summed over replicas');

  const silent = m.snapshot(4, 0, now + 10000).pipeline;
  t.equal(silent.byStage[0].utilization, (9.6 / 11 + 9.8 / 11) / 2, 'ranks gone silent: since the start');
  t.ok(JSON.stringify(m.snapshot(4, 0, now)).includes('"byStage"'), 'the snapshot (the dashboard\'s JSON) carries the section');
});

t.test('pipeline stages: a stage with no report yet, and a claim of more stages than ranks', async (t) => {
  const m = new JobMonitor(2);
  m.record(1, report({ timeMs: 1, pipeline: { stage: 1, stages: 1000, replica: 0, replicas: 1, batches: 0, busyUs: 0, wallUs: 0, weightBytes: 0, peakStashBytes: 0 } }), 1);
  const p = m.snapshot(2, 0, 1).pipeline;
  t.equal(p.stages, 1000);
  t.equal(p.byStage.length, 2, 'no more rows than ranks');
  t.same(p.byStage.map((s) => [s.ranks, s.utilization]), [[[], null], [[1], null]], 'no batch yet: no utilization');
});

t.test('the pipeline section travels in Stats; a malformed one is refused', async (t) => {
  const { encodeEnvelope, decodeEnvelope, ControlProtocolError } = require('../dist/ts/control/messages.js');
  const plain = { kind: 'stats', ...report({ timeMs: 5, submitted: 3, completed: 2 }) };
  const back = decodeEnvelope(encodeEnvelope(plain));
  t.same(back, plain, 'a report without it stays valid');
  t.notOk('pipeline' in back, 'and decodes without the key');
  const withPipe = { kind: 'stats', ...pipelineReport(3, 5, 7, 1500, 2000) };
  t.same(decodeEnvelope(encodeEnvelope(withPipe)), withPipe, 'round-trips');
  const broken = [
    [{ stage: 2 }, /Stats\.pipeline\.stage 2 is out of range for 2 stages/],
    [{ stages: 0, stage: 0 }, /Stats\.pipeline\.stages 0 is out of range/],
    [{ replica: 5 }, /Stats\.pipeline\.replica 5 is out of range for 2 replicas/],
    [{ replicas: 0, replica: 0 }, /Stats\.pipeline\.replicas 0 is out of range/],
    [{ busyUs: 2001 }, /Stats\.pipeline\.busyUs 2001 exceeds Stats\.pipeline\.wallUs 2000/],
  ];
  for (const [change, message] of broken) {
    const msg = { kind: 'stats', ...pipelineReport(3, 5, 7, 1500, 2000, change) };
    const err = t.throws(() => decodeEnvelope(encodeEnvelope(msg)), message, JSON.stringify(change));
    t.ok(err instanceof ControlProtocolError, 'a ControlProtocolError, as for any malformed report');
  }
});

t.test('reportPipelineBatch: the rank\'s reports carry its stage\'s totals', async (t) => {
  const { CollectiveStats } = require('../dist/ts/stats.js');
  const { reportPipelineBatch } = require('../dist/adapters/tfjs/pipeline/stats.js');
  const stats = new CollectiveStats(() => []);
  t.notOk('pipeline' in stats.snapshot(), 'nothing before the first batch');
  const batch = { stage: 1, stages: 2, replica: 0, replicas: 2, busyMs: 6, wallMs: 10, weightBytes: 800, peakStashBytes: 300 };
  reportPipelineBatch(batch);
  reportPipelineBatch({ ...batch, busyMs: 10.0005, wallMs: 10, peakStashBytes: 200 });
  t.same(stats.snapshot().pipeline, { stage: 1, stages: 2, replica: 0, replicas: 2, batches: 2, busyUs: 16000, wallUs: 20000, weightBytes: 800, peakStashBytes: 300 },
    'totals; busy never above wall; the peak stash is the largest');
  reportPipelineBatch({ ...batch, stage: 0 });
  t.same(stats.snapshot().pipeline.batches, 1, 'another place starts new totals');
  const bad = [
    [{ stage: 2 }, /'batch\.stage' must be an integer in 0\.\.1; received number 2/],
    [{ stages: 0 }, /'batch\.stages' must be an integer in 1\.\.65536; received number 0/],
    [{ replica: -1 }, /'batch\.replica'/],
    [{ busyMs: NaN }, /'batch\.busyMs' must be a finite number >= 0; received number NaN/],
    [{ wallMs: '3' }, /'batch\.wallMs'.*the string "3"/],
    [{ peakStashBytes: 1.5 }, /'batch\.peakStashBytes'/],
  ];
  for (const [change, message] of bad) {
    const err = t.throws(() => reportPipelineBatch({ ...batch, ...change }), message, JSON.stringify(change));
    t.equal(err.code, 'ERR_INVALID_ARGUMENT');
  }
  t.same(stats.snapshot().pipeline.batches, 1, 'a refused batch counts nothing');
});

t.test('CollectiveStats: busy time from hand-over to completion, or the time a wait() call ran', async (t) => {
  const { CollectiveStats } = require('../dist/ts/stats.js');
  const pending = [];
  const stats = new CollectiveStats(() => pending);
  const allreduce = () => stats.snapshot().kinds.find((k) => k.kind === 'allreduce');
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // Submitted and not yet handed to the engine: pending, but not in flight, and no age yet.
  const a = stats.submitted(0, 'grad/a', 1024, 0);
  pending.push(a);
  t.same(stats.snapshot().pending, [{ seq: 1, name: 'grad/a', kind: 'allreduce', ageMs: 0 }], 'no age before hand-over');
  t.equal(allreduce().busyUs, 0, 'not busy before hand-over');
  stats.started(a, performance.now());
  await sleep(30);
  t.ok(stats.snapshot().pending[0].ageMs >= 25, 'the age counts from hand-over');
  t.ok(allreduce().busyUs >= 25000, 'busy while in flight');
  pending.pop();
  stats.settled(a, {});
  const afterA = allreduce();
  t.ok(afterA.busyUs >= 25000 && afterA.busyUs < 5e6, `busy ${afterA.busyUs} µs: hand-over to completion`);
  t.same([afterA.count, afterA.bytes], [1, 1024]);

  // Run inside one call (runOne): the call's time is the busy time.
  const b = stats.submitted(0, '', 4096, 0);
  stats.settled(b, {}, 2.5);
  t.equal(allreduce().busyUs - afterA.busyUs, 2500, 'the time the call took');
  t.same([allreduce().count, allreduce().bytes], [2, 1024 + 4096]);

  // ... unless another of its kind was in flight meanwhile, whose span covers it.
  const c = stats.submitted(0, '', 8, 0);
  stats.started(c, performance.now());
  const d = stats.submitted(0, '', 8, 0);
  stats.settled(d, {}, 1000);
  const during = allreduce().busyUs;
  t.ok(during - afterA.busyUs - 2500 < 900000, 'not counted twice');
  stats.settled(c, { code: 'ERR_TIMEOUT' });
  t.same([allreduce().count, stats.snapshot().completed], [3, 4], 'a failure counts as completed, not in the totals');
});

t.test('send and recv: counted, in bytes/s and messages/s, with no bandwidth; outside the order of collectives', async (t) => {
  const m = new JobMonitor(2);
  const now = 3_000_000;
  const kinds = (n) => [
    { kind: 'allreduce', count: n, bytes: 1000 * n, busyUs: 1000 * n },
    { kind: 'send', count: 10 * n, bytes: 4000 * n, busyUs: 0 },
    { kind: 'recv', count: 10 * n, bytes: 4000 * n, busyUs: 0 },
  ];
  for (const rank of [0, 1]) {
    m.record(rank, report({ timeMs: 1000, submitted: 1, completed: 1, kinds: kinds(1) }), now - 1000);
    m.record(rank, report({ timeMs: 2000, submitted: 3, completed: 3, kinds: kinds(3) }), now);
  }
  const s = m.snapshot(2, 60000, now);
  t.equal(s.ranks[0].messagesPerS, 40, '20 sends and 20 receives in a second');
  t.equal(s.ranks[0].collectivesPerS, 2);
  t.equal(s.ranks[0].bytesPerS, 2000 + 16000, 'bytes/s counts the messages\' bytes too');
  t.equal(s.messagesPerS, 80);
  t.equal(s.messages, 120, 'messages so far, all ranks');
  t.same(s.kinds.find((k) => k.kind === 'send'), { kind: 'send', count: 60, bytes: 24000, busyS: 0, algbw: null, busbw: null, recentAlgbw: null, recentBusbw: null });
  t.match(s.kinds.find((k) => k.kind === 'recv'), { count: 60, bytes: 24000, algbw: null });
  t.ok(s.kinds.find((k) => k.kind === 'allreduce').algbw > 0, 'collectives keep their bandwidth');
  const { encodeEnvelope, decodeEnvelope } = require('../dist/ts/control/messages.js');
  const sent = { kind: 'stats', ...report({ timeMs: 5, kinds: kinds(1), submitted: 1, completed: 1 }) };
  t.same(decodeEnvelope(encodeEnvelope(sent)).kinds, kinds(1), 'send and recv travel in a Stats message and pass its checks');
});

t.test('CollectiveStats: a message counts in its kind when it completes, takes no sequence number and is not timed', async (t) => {
  const { CollectiveStats } = require('../dist/ts/stats.js');
  const stats = new CollectiveStats(() => []);
  const SEND = 6, RECV = 7, FLOAT32 = 0;
  const s = stats.submitted(SEND, '', 4000, FLOAT32, false);
  stats.started(s, performance.now());
  stats.settled(s, {});
  const r = stats.submitted(RECV, '', 64, FLOAT32, false);
  stats.settled(r, { code: 'ERR_PEER_LOST' });
  const snap = stats.snapshot();
  t.same(snap.kinds, [{ kind: 'send', count: 1, bytes: 4000, busyUs: 0 }, { kind: 'recv', count: 0, bytes: 0, busyUs: 0 }]);
  t.same([snap.submitted, snap.completed], [0, 0], 'no place in the order of collectives');
});
