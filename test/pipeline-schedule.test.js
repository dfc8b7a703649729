'use strict';
// Pipeline schedules (GPipe, 1F1B) and their simulator: pure functions, no ranks, no tfjs.
const t = require('tap');
const { buildSchedule, stageSchedule, simulate } = require('../dist/adapters/tfjs/pipeline/schedule.js');

const KINDS = ['gpipe', '1f1b'];
const ops = (list) => list.map((i) => `${i.op[0]}${i.microBatch}`).join(' ');
const equal = (S, f, b) => ({ forward: new Array(S).fill(f), backward: new Array(S).fill(b) });

t.test('1F1B and GPipe orders, written out for 3 stages and 4 micro-batches', async (t) => {
  t.same(buildSchedule('1f1b', 3, 4).map(ops), [
    'f0 f1 f2 b0 f3 b1 b2 b3',
    'f0 f1 b0 f2 b1 f3 b2 b3',
    'f0 b0 f1 b1 f2 b2 f3 b3',
  ]);
  t.same(buildSchedule('gpipe', 2, 3).map(ops), ['f0 f1 f2 b0 b1 b2', 'f0 f1 f2 b0 b1 b2']);
  t.same(ops(stageSchedule('1f1b', 0, 4, 2)), 'f0 f1 b0 b1', 'fewer micro-batches than warm-up slots: all forwards first');
  const [first, last] = buildSchedule('1f1b', 2, 1);
  t.same(first[0], { op: 'forward', microBatch: 0, recv: null, send: { kind: 'activation', peer: 1, microBatch: 0 } });
  t.same(first[1], { op: 'backward', microBatch: 0, recv: { kind: 'gradient', peer: 1, microBatch: 0 }, send: null });
  t.same(last[0], { op: 'forward', microBatch: 0, recv: { kind: 'activation', peer: 0, microBatch: 0 }, send: null });
  t.same(last[1], { op: 'backward', microBatch: 0, recv: null, send: { kind: 'gradient', peer: 0, microBatch: 0 } });
});

t.test('every micro-batch runs forward and backward exactly once per stage, forward first; the backward order is the same in both schedules', async (t) => {
  let checked = 0;
  for (let S = 1; S <= 6; S++) {
    for (let m = 1; m <= 32; m++) {
      const orders = {};
      for (const kind of KINDS) {
        buildSchedule(kind, S, m).forEach((list, s) => {
          const f = list.filter((i) => i.op === 'forward').map((i) => i.microBatch);
          const b = list.filter((i) => i.op === 'backward').map((i) => i.microBatch);
          const all = [...Array(m).keys()];
          if (list.length !== 2 * m || f.join() !== all.join() || [...b].sort((x, y) => x - y).join() !== all.join()) {
            t.fail(`${kind} S=${S} m=${m} stage ${s}: ${ops(list)}`);
          }
          for (const k of all) {
            if (list.findIndex((i) => i.op === 'forward' && i.microBatch === k) > list.findIndex((i) => i.op === 'backward' && i.microBatch === k)) {
              t.fail(`${kind} S=${S} m=${m} stage ${s}: backward of ${k} before its forward`);
            }
          }
          (orders[s] = orders[s] || []).push(b.join());
          checked++;
        });
      }
      for (const s in orders) if (orders[s][0] !== orders[s][1]) t.fail(`S=${S} m=${m} stage ${s}: backward orders differ`);
    }
  }
  t.equal(checked, 2 * 32 * 21, 'all stage lists of S = 1..6, m = 1..32 checked');
});

t.test('between adjacent stages, the sender\'s sends and the receiver\'s receives are the same sequence', async (t) => {
  let pairs = 0;
  for (const kind of KINDS) {
    for (let S = 2; S <= 6; S++) {
      for (const m of [1, 2, 3, 5, 8, 13, 32]) {
        const sch = buildSchedule(kind, S, m);
        for (let s = 0; s + 1 < S; s++) {
          for (const [from, to] of [[s, s + 1], [s + 1, s]]) {
            const sent = sch[from].filter((i) => i.send && i.send.peer === to).map((i) => `${i.send.kind}${i.send.microBatch}`);
            const recvd = sch[to].filter((i) => i.recv && i.recv.peer === from).map((i) => `${i.recv.kind}${i.recv.microBatch}`);
            if (sent.length !== m || sent.join() !== recvd.join()) t.fail(`${kind} S=${S} m=${m} ${from}->${to}: sent ${sent} received ${recvd}`);
            pairs++;
          }
        }
        // Nothing goes to a stage that is not adjacent, nor off either end.
        sch.forEach((list, s) => list.forEach((i) => {
          for (const msg of [i.send, i.recv]) if (msg && Math.abs(msg.peer - s) !== 1) t.fail(`${kind} S=${S} stage ${s} talks to ${msg.peer}`);
        }));
      }
    }
  }
  t.equal(pairs, 2 * 7 * 2 * (1 + 2 + 3 + 4 + 5), 'every directed link checked');
});

t.test('the simulator finishes every schedule for S = 1..6 and m = 1..32: no deadlock', async (t) => {
  let runs = 0;
  for (const kind of KINDS) {
    for (let S = 1; S <= 6; S++) {
      for (let m = 1; m <= 32; m++) {
        const r = simulate(buildSchedule(kind, S, m), { forward: new Array(S).fill(1), backward: new Array(S).fill(2), transfer: new Array(S - 1).fill(0.5) });
        if (!(r.makespan > 0) || r.end.flat().some(Number.isNaN)) t.fail(`${kind} S=${S} m=${m} did not finish`);
        runs++;
      }
    }
  }
  t.equal(runs, 2 * 6 * 32);
});

t.test('peak in-flight micro-batches: 1F1B keeps min(S - s, m) on stage s, GPipe keeps m', async (t) => {
  for (let S = 1; S <= 6; S++) {
    for (const m of [1, 2, 4, 7, 16, 32]) {
      const g = simulate(buildSchedule('gpipe', S, m), equal(S, 1, 2)).peakInFlight;
      const o = simulate(buildSchedule('1f1b', S, m), equal(S, 1, 2)).peakInFlight;
      const want = [...Array(S).keys()].map((s) => Math.min(S - s, m));
      if (g.join() !== new Array(S).fill(m).join()) t.fail(`gpipe S=${S} m=${m}: ${g}`);
      if (o.join() !== want.join()) t.fail(`1f1b S=${S} m=${m}: ${o}, want ${want}`);
    }
  }
  t.same(simulate(buildSchedule('1f1b', 4, 16), equal(4, 1, 1)).peakInFlight, [4, 3, 2, 1], 'S = 4, m = 16');
  t.same(simulate(buildSchedule('gpipe', 4, 16), equal(4, 1, 1)).peakInFlight, [16, 16, 16, 16]);
});

t.test('equal costs and free transfers: makespan (m + S - 1)(f + b), bubble (S - 1) / (m + S - 1), both schedules', async (t) => {
  for (const kind of KINDS) {
    for (let S = 1; S <= 6; S++) {
      for (const m of [1, 2, 3, 4, 8, 16, 32]) {
        for (const [f, b] of [[1, 1], [1, 2], [3, 5]]) {
          const r = simulate(buildSchedule(kind, S, m), equal(S, f, b));
          if (r.makespan !== (m + S - 1) * (f + b)) t.fail(`${kind} S=${S} m=${m} f=${f} b=${b}: makespan ${r.makespan}`);
          if (Math.abs(r.bubbleFraction - (S - 1) / (m + S - 1)) > 1e-12) t.fail(`${kind} S=${S} m=${m}: bubble ${r.bubbleFraction}`);
          if (r.busy.some((x) => x !== m * (f + b))) t.fail(`${kind} S=${S} m=${m}: busy ${r.busy}`);
        }
      }
    }
  }
  const r = simulate(buildSchedule('gpipe', 2, 8), equal(2, 1, 1));
  t.equal(r.makespan, 18);
  t.ok(Math.abs(r.bubbleFraction - 1 / 9) < 1e-12, 'S = 2, m = 8: 1/9');
});

t.test('the simulator follows the slowest stage and charges transfers on the link', async (t) => {
  // One slow stage bounds the batch: m x (its f + b), plus stage 0's first forward and last backward.
  const slow = simulate(buildSchedule('1f1b', 3, 8), { forward: [1, 3, 1], backward: [1, 3, 1] });
  t.equal(slow.makespan, 1 + 8 * 6 + 1, 'the slow middle stage is never idle once its first micro-batch arrives');
  t.equal(slow.busy[1], 48);
  // Two stages, one micro-batch: f0, transfer, f1 + b1, transfer, b0.
  const one = simulate(buildSchedule('gpipe', 2, 1), { forward: [1, 1], backward: [2, 2], transfer: [5] });
  t.equal(one.makespan, 1 + 5 + 1 + 2 + 5 + 2);
  t.same(one.start, [[0, 14], [6, 7]]);
  // A link carries one message at a time: three activations sent 1 apart over a link that takes 4 each.
  const busyLink = simulate(buildSchedule('gpipe', 2, 3), { forward: [1, 1], backward: [1, 1], transfer: [4] });
  t.same(busyLink.start[1].slice(0, 3), [5, 9, 13], 'activations arrive 4 apart, not 1');
});

t.test('the simulator reports messages out of order and deadlocks, naming the stage', async (t) => {
  const swapped = buildSchedule('gpipe', 2, 2);
  swapped[1] = [swapped[1][1], swapped[1][0], ...swapped[1].slice(2)];
  t.throws(() => simulate(swapped, equal(2, 1, 1)), /stage 1 expects the activation of micro-batch 1 from stage 0 but the next message on that link is the activation of micro-batch 0/);
  const stuck = buildSchedule('1f1b', 2, 2);
  stuck[0] = [stuck[0][0], stuck[0][2], stuck[0][3], stuck[0][1]]; // f0 b0 b1 f1: b1 needs f1 downstream
  t.throws(() => simulate(stuck, equal(2, 1, 1)), /deadlock: stage 0 waits for the gradient of micro-batch 1 from stage 1; stage 1 waits for the activation of micro-batch 1 from stage 0/);
  const early = buildSchedule('gpipe', 1, 2);
  early[0] = [early[0][2], ...early[0].slice(0, 2), early[0][3]];
  t.throws(() => simulate(early, equal(1, 1, 1)), /stage 0 runs the backward of micro-batch 0 before its forward/);
  t.throws(() => simulate(buildSchedule('gpipe', 2, 2), { forward: [1], backward: [1, 1] }), /argument 'costs.forward' must be an array of 2 finite numbers >= 0; received \[1\]/);
});

t.test('with sends that hold the sender until the receiver takes them, 1F1B deadlocks and GPipe does not', async (t) => {
  let deadlocks = 0;
  for (let S = 1; S <= 6; S++) {
    for (let m = 1; m <= 32; m++) {
      const g = simulate(buildSchedule('gpipe', S, m), equal(S, 1, 2), 'rendezvous');
      if (g.makespan !== (m + S - 1) * 3) t.fail(`gpipe S=${S} m=${m}: makespan ${g.makespan}`);
      let stuck = false;
      try {
        simulate(buildSchedule('1f1b', S, m), equal(S, 1, 2), 'rendezvous');
      } catch (e) {
        if (!/deadlock/.test(e.message)) throw e;
        stuck = true;
        deadlocks++;
      }
      if (stuck !== (S >= 2 && m >= 2)) t.fail(`1f1b S=${S} m=${m}: ${stuck ? 'deadlocked' : 'finished'}`);
    }
  }
  t.equal(deadlocks, 5 * 31, '1F1B deadlocks exactly when S >= 2 and m >= 2');
  t.throws(() => simulate(buildSchedule('1f1b', 2, 2), equal(2, 1, 1), 'rendezvous'),
    /deadlock: stage 0 waits for stage 1 to take the activation of micro-batch 1; stage 1 waits for stage 0 to take the gradient of micro-batch 0/);
  const one = simulate(buildSchedule('gpipe', 2, 1), { forward: [1, 1], backward: [2, 2], transfer: [5] }, 'rendezvous');
  t.same(one.start, [[0, 14], [6, 7]], 'one micro-batch: the same times as eager sends');
  t.equal(one.makespan, 16);
});

t.test('bad arguments name the argument and the value', async (t) => {
  t.throws(() => buildSchedule('zigzag', 2, 2), /argument 'kind' must be 'gpipe' or '1f1b'; received 'zigzag'/);
  t.throws(() => buildSchedule('1f1b', 0, 2), /argument 'stages' must be an integer >= 1; received 0/);
  t.throws(() => buildSchedule('1f1b', 2, 1.5), /argument 'microBatches' must be an integer >= 1; received 1.5/);
  t.throws(() => simulate(buildSchedule('1f1b', 2, 2), equal(2, 1, 1), 'blocking'), /argument 'sends' must be 'eager' or 'rendezvous'; received 'blocking'/);
  t.throws(() => stageSchedule('1f1b', 2, 2, 4), /argument 'stage' must be an integer from 0 to 1; received 2/);
});
