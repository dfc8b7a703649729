'use strict';
// The pipeline partitioner: its cost model by hand, its dynamic program against trying every cut, and
// the checks on a manual partition.
const t = require('tap');
const { planPartition, evaluatePartition, validatePartition } = require('../dist/adapters/tfjs/pipeline/partition.js');
const { HoraError } = require('../dist/ts/errors.js');

const layer = (forward, backward, outputBytes = 0, paramBytes = 0) => ({ forward, backward, outputBytes, paramBytes });

// Every split of L layers into S non-empty stages, in lexicographic order of the counts.
function* cuts(L, S) {
  if (S === 1) { yield [L]; return; }
  for (let n = 1; n <= L - S + 1; n++) for (const rest of cuts(L - n, S - 1)) yield [n, ...rest];
}

function bruteForce(layers, options) {
  let best = null;
  for (const counts of cuts(layers.length, options.stages)) {
    const plan = evaluatePartition(layers, counts, options);
    if (!best || plan.bottleneck < best.bottleneck) best = plan;
  }
  return best;
}

function invalidArgument(t, fn, re, what) {
  try {
    fn();
  } catch (e) {
    t.ok(e instanceof HoraError && e.code === 'ERR_INVALID_ARGUMENT', `${what}: HoraError ERR_INVALID_ARGUMENT`);
    t.match(e.message, re, what);
    return;
  }
  t.fail(`${what}: did not throw`);
}

// A small deterministic generator, so a failure names a case that can be rerun.
function rng(seed) {
  let s = seed >>> 0;
  return () => { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; return s / 2 ** 32; };
}

t.test('the cost model: compute, both boundary transfers each way, the replicas\' allreduce per micro-batch', async (t) => {
  const layers = [layer(1, 2, 300, 40), layer(3, 4, 100, 80), layer(5, 6, 7, 120)];
  const link = { bandwidth: 100, latency: 0.5 };
  const p = evaluatePartition(layers, [1, 2], { stages: 2, link });
  t.same(p.stageTimes, [3 + 2 * (0.5 + 3), 18 + 2 * (0.5 + 3)], 'layer 0\'s 300 bytes cross the cut twice');
  t.same(p.firstLayer, [0, 1]);
  t.same(p.paramBytes, [40, 200]);
  t.equal(p.bottleneck, 25);
  const three = evaluatePartition(layers, [1, 1, 1], { stages: 3, link: [link, { bandwidth: 10, latency: 0 }] });
  t.same(three.stageTimes, [3 + 7, 7 + 7 + 2 * 10, 11 + 2 * 10], 'the middle stage pays for both of its links');
  const replicated = evaluatePartition(layers, [1, 2], { stages: 2, replicas: 4, microBatches: 2, replicaLink: { bandwidth: 10, latency: 1 } });
  t.same(replicated.stageTimes, [3 + (6 * 1 + 1.5 * 40 / 10) / 2, 18 + (6 * 1 + 1.5 * 200 / 10) / 2], 'ring allreduce shared by 2 micro-batches');
  t.same(evaluatePartition(layers, [3], { stages: 1, replicas: 1 }).stageTimes, [21], 'one stage: compute only');
  t.same(evaluatePartition(layers, [1, 1, 1], { stages: 3, rematerialize: true }).stageTimes, [3 + 1, 7 + 3, 11],
    're-materialization: every stage but the last runs its forward twice');
  // Without the second forward [2, 1] (5, 4.5) beats [1, 2] (4, 5.5); with it [1, 2] (6, 5.5) beats [2, 1] (7.5, 4.5).
  const uneven = [layer(2, 2, 0, 0), layer(0.5, 0.5, 0, 0), layer(1, 3.5, 0, 0)];
  t.same(planPartition(uneven, { stages: 2 }).counts, [2, 1], 'without re-materialization');
  const remat = planPartition(uneven, { stages: 2, rematerialize: true });
  t.same(remat.counts, [1, 2], 'the planner counts the second forward of the stages before the last');
  t.same(remat.stageTimes, [6, 5.5], 'and predicts it');
});

t.test('the dynamic program finds the best cut that trying every cut finds, and the same one among ties', async (t) => {
  const next = rng(14);
  let cases = 0;
  let ties = 0;
  for (let L = 1; L <= 9; L++) {
    for (let S = 1; S <= Math.min(L, 5); S++) {
      for (let rep = 0; rep < 12; rep++) {
        // Half the cases draw small integers so that many cuts tie.
        const draw = rep % 2 ? (k) => Math.floor(next() * k) : (k) => next() * k;
        const layers = Array.from({ length: L }, () => layer(draw(4), draw(8), draw(4) * 1000, draw(5) * 4000));
        const link = rep % 3 === 0 ? Array.from({ length: S - 1 }, () => ({ bandwidth: 1000 * (1 + draw(4)), latency: draw(2) }))
          : { bandwidth: 2000, latency: rep % 4 === 1 ? 0 : 0.25 };
        const options = { stages: S, link, replicas: 1 + (rep % 3), microBatches: 1 + (rep % 5) };
        const dp = planPartition(layers, options);
        const brute = bruteForce(layers, options);
        if (dp.bottleneck !== brute.bottleneck || dp.counts.join() !== brute.counts.join()) {
          t.fail(`L=${L} S=${S} rep=${rep}: dp ${dp.counts} (${dp.bottleneck}) brute force ${brute.counts} (${brute.bottleneck})`);
        }
        let tied = 0;
        for (const counts of cuts(L, S)) if (evaluatePartition(layers, counts, options).bottleneck === brute.bottleneck) tied++;
        if (tied > 1) ties++;
        cases++;
      }
    }
  }
  t.equal(cases, 12 * (1 + 2 + 3 + 4 + 5 * 5), 'cases compared');
  t.ok(ties >= 40, `${ties} cases had several optimal cuts, and the same one was taken`);
});

t.test('plans on models whose answer is known', async (t) => {
  const equal = (n) => Array.from({ length: n }, () => layer(1, 2, 4096, 1000));
  t.same(planPartition(equal(8), { stages: 2 }).counts, [4, 4], 'equal layers split evenly');
  t.same(planPartition(equal(8), { stages: 4 }).counts, [2, 2, 2, 2]);
  t.same(planPartition(equal(7), { stages: 2 }).counts, [3, 4], 'a tie goes to the smaller first stage');
  t.same(planPartition(equal(7), { stages: 3 }).counts, [1, 3, 3], 'any cut with no stage above 3 layers is optimal: the earliest small');
  const heavy = [layer(1, 1), layer(1, 1), layer(1, 1), layer(6, 6), layer(1, 1)];
  t.same(planPartition(heavy, { stages: 2 }).counts, [3, 2], 'the heavy layer gets a stage nearly to itself');
  t.same(planPartition(heavy, { stages: 3 }).counts, [3, 1, 1]);
  // Cutting after layer 1 would send a megabyte each way over a 1 kB/s link: the planner cuts elsewhere.
  const wide = [layer(1, 0, 10), layer(1, 0, 1e6), layer(1, 0, 10), layer(1, 0, 10)];
  const plan = planPartition(wide, { stages: 2, link: { bandwidth: 1000, latency: 0 } });
  t.same(plan.counts, [1, 3]);
  t.ok(Math.abs(plan.stageTimes[0] - 1.02) < 1e-12 && Math.abs(plan.stageTimes[1] - 3.02) < 1e-12, `stage times ${plan.stageTimes}`);
  t.ok(evaluatePartition(wide, [2, 2], { stages: 2, link: { bandwidth: 1000, latency: 0 } }).bottleneck > 2000, 'the even cut pays for the wide activation');
  const a = planPartition(heavy, { stages: 2, link: { bandwidth: 1e9, latency: 1e-5 } });
  const b = planPartition(heavy.map((l) => ({ ...l })), { stages: 2, link: { bandwidth: 1e9, latency: 1e-5 } });
  t.same(a, b, 'the same costs give the same plan');
});

t.test('a manual partition must give each stage an integer >= 1 layers, adding up to the layer count', async (t) => {
  const err = (fn, re, what) => invalidArgument(t, fn, re, what);
  t.same(validatePartition([4, 3], 7, 2), [4, 3]);
  err(() => validatePartition([4, 2], 7, 2), /pipeline: option 'partition' must be layer counts adding up to the model's 7 layers; received \[4, 2\] \(they add up to 6\)/, 'wrong total');
  err(() => validatePartition([7, 0], 7, 2), /option 'partition' must be layer counts that are integers >= 1 \(no stage may be empty\); received \[7, 0\] \(stage 1: 0\)/, 'empty stage');
  err(() => validatePartition([3.5, 3.5], 7, 2), /received \[3.5, 3.5\] \(stage 0: 3.5\)/, 'fractions');
  err(() => validatePartition(['4', 3], 7, 2), /received \['4', 3\] \(stage 0: '4'\)/, 'strings');
  err(() => validatePartition([3, 2, 2], 7, 2), /option 'partition' must be an array of 2 layer counts, one per stage; received \[3, 2, 2\] \(3 entries\)/, 'one count per stage');
  err(() => validatePartition('even', 7, 2), /option 'partition' must be 'auto' or an array of 2 layer counts; received 'even'/, 'not an array');
  err(() => evaluatePartition([layer(1, 1)], [1, 1], { stages: 2 }), /option 'stages' must be an integer from 1 to 1 \(the layer count: a stage cannot be empty\); received 2/, 'more stages than layers');
  for (const bad of [[4, 2], [7, 0], 'even', [3, 2, 2]]) {
    const e = t.throws(() => validatePartition(bad, 7, 2, 3));
    t.equal(e && e.rank, 3, `the error for ${JSON.stringify(bad)} carries the rank that checked it`);
  }
});

t.test('the planner rejects bad costs and options, naming them', async (t) => {
  const err = (fn, re) => invalidArgument(t, fn, re, String(re));
  const two = [layer(1, 1), layer(1, 1)];
  err(() => planPartition([], { stages: 1 }), /option 'layers' must be a non-empty array of layer costs; received \[\]/);
  err(() => planPartition([layer(1, 1), layer(NaN, 1)], { stages: 1 }), /option 'layers\[1\].forward' must be a finite number >= 0; received NaN/);
  err(() => planPartition([layer(1, 1), { forward: 1, backward: 1, outputBytes: 4 }], { stages: 1 }), /'layers\[1\].paramBytes' must be a finite number >= 0; received undefined/);
  err(() => planPartition(two, { stages: 0 }), /option 'stages' must be an integer from 1 to 2/);
  err(() => planPartition(two, { stages: 2, link: { bandwidth: 0, latency: 0 } }), /option 'link' must be a link \{bandwidth > 0 \(bytes\/s\), latency >= 0 \(s\)\}; received \{bandwidth: 0, latency: 0\}/);
  err(() => planPartition(two, { stages: 2, link: [] }), /option 'link' must be one link or an array of 1/);
  err(() => planPartition(two, { stages: 2, link: [{ bandwidth: 1, latency: -1 }] }), /option 'link\[0\]' must be a link/);
  err(() => planPartition(two, { stages: 2, microBatches: 0 }), /option 'microBatches' must be an integer >= 1; received 0/);
  err(() => planPartition(two, { stages: 2, replicas: 2.5 }), /option 'replicas' must be an integer >= 1; received 2.5/);
});
