'use strict';
// Fused batches are checked tensor by tensor, and named collectives of one batch are matched by name
// (test/workers/fusion-agreement-worker.js runs the cases; this file asserts on every rank's report):
// - the same named collectives in a different order within one synchronous run: the right results;
// - the same total split differently (named or not), Horovod's [17 + rank]^3 shape test: ERR_MISMATCH on
//   every rank naming the first tensor that differs, the arrays untouched, the next collective right;
// - a name twice in one batch: ERR_INVALID_ARGUMENT on every rank; a different order across batches:
//   ERR_MISMATCH.
// Each with fusion on, fusion off, and over TCP (with a fusion buffer small enough that a size cut falls
// inside a batch), on 2 and 3 ranks.
const t = require('tap');
const path = require('node:path');
const { runScenario } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'fusion-agreement-worker.js');

const CONFIGS = [
  { np: 2, label: 'shared memory, fusion on', env: {}, fused: true },
  { np: 3, label: 'shared memory, fusion on', env: {}, fused: true },
  { np: 2, label: 'fusion off', env: { HORA_FUSION_MB: '0' }, fused: false },
  { np: 3, label: 'fusion off', env: { HORA_FUSION_MB: '0' }, fused: false },
  { np: 2, label: 'TCP, fusion on', env: { HORA_TRANSPORT: 'tcp' }, fused: true },
  { np: 3, label: 'TCP, fusion on, 0.25 MiB buffer', env: { HORA_TRANSPORT: 'tcp', HORA_FUSION_MB: '0.25' }, fused: true },
];

/** Rank r's values for tensor `seed` (as the worker makes them), and their sum over p ranks. */
const values = (n, seed, r) => Array.from({ length: n }, (_, i) => seed + 10 * i + 1000 * r);
const sumOf = (n, seed, p) => Array.from({ length: n }, (_, i) => p * (seed + 10 * i) + (1000 * p * (p - 1)) / 2);

function expectValue(t, got, want, where) {
  t.ok(got && got.ok, `${where}: succeeds`, { got });
  if (got && got.ok) t.same(got.value, want, `${where}: the right values`);
}

function expectError(t, got, code, where) {
  t.equal(got && got.code, code, `${where}: ${code}`, { got });
  t.ok(got && got.isHoraError, `${where}: a HoraError`);
}

/** The words of a mismatch between rank 0's tensor `mine` and rank 1's `theirs` ("'s_a' (float64 x 2)"), fused or not. */
function expectFirstTensor(t, got, cfg, position, mine, theirs, where) {
  expectError(t, got, 'ERR_MISMATCH', where);
  const m = (got && got.message) || '';
  if (cfg.fused) {
    t.match(m, `rank 0 and rank 1 fused different tensors into allreduce #`, `${where}: says the fused tensors differ`);
    t.match(m, `${position} is ${mine} on rank 0 but ${theirs} on rank 1`, `${where}: names the first tensor that differs, as each rank has it`);
  } else {
    const strip = (s) => s.replace(/\)$/, '');  // unfused: "(float64 x 2, op sum)"
    t.match(m, `rank 0 submitted allreduce ${strip(mine).replace(/^unnamed /, '')}`, `${where}: names rank 0's tensor`);
    t.match(m, `but rank 1 submitted allreduce ${strip(theirs).replace(/^unnamed /, '')}`, `${where}: names rank 1's tensor`);
  }
}

function check(t, cfg, rank, results) {
  const p = cfg.np;
  const at = (name) => `rank ${rank}, ${name}`;
  for (const [name, res] of Object.entries(results)) {
    t.same(res.after && res.after.value, [(p * (p + 1)) / 2], `${at(name)}: the collective after it is right`, { after: res.after });
  }
  const r = results;

  expectValue(t, r['order, equal lengths'].got[0], sumOf(2, 1, p), at('order, equal lengths: grad_a'));
  expectValue(t, r['order, equal lengths'].got[1], sumOf(2, 5, p), at('order, equal lengths: grad_b'));
  expectValue(t, r['order, lengths 2 and 3'].got[0], sumOf(2, 1, p), at('order, lengths 2 and 3: grad_a'));
  expectValue(t, r['order, lengths 2 and 3'].got[1], sumOf(3, 5, p), at('order, lengths 2 and 3: grad_b'));

  const kinds = r['order, four kinds'].got;
  expectValue(t, kinds[0], sumOf(3, 1, p), at('order, four kinds: allreduce'));
  expectValue(t, kinds[1], values(4, 2, p - 1), at('order, four kinds: broadcast'));
  expectValue(t, kinds[2], Array.from({ length: p }, (_, q) => values(q + 1, 3, q)).flat(), at('order, four kinds: allgather'));
  expectValue(t, kinds[3], values(2 * p, 4, p - 1).slice(2 * rank, 2 * rank + 2), at('order, four kinds: reduceScatter'));

  expectValue(t, r['order, waited'].got[0], sumOf(2, 1, p), at('order, waited: w_a'));
  expectValue(t, r['order, waited'].got[1], sumOf(3, 5, p), at('order, waited: w_b'));

  const msg = r['order, a message in the batch'].got;
  expectValue(t, msg[0], sumOf(2, 1, p), at('order, a message in the batch: m_a'));
  expectValue(t, msg[1], sumOf(3, 5, p), at('order, a message in the batch: m_b'));
  if ((rank ^ 1) < p) expectValue(t, msg[2], rank % 2 === 1 ? values(2, 9, rank ^ 1) : null, at('order, a message in the batch: the message'));

  const fusionMB = cfg.env.HORA_FUSION_MB === undefined ? 64 : Number(cfg.env.HORA_FUSION_MB);
  const bigCount = Math.min(fusionMB > 0 ? Math.ceil((fusionMB * 1024 * 1024) / 8) : 32768, 262144);
  const cut = r['order, across the size cut'].got;
  const bigSum = sumOf(1, 1, p)[0];
  t.same(cut[0], { ok: true, length: bigCount, first: bigSum, last: bigSum + 10 * p * (bigCount - 1) }, at('order, across the size cut: cut_big'));
  expectValue(t, cut[1], sumOf(2, 5, p), at('order, across the size cut: cut_small_a'));
  expectValue(t, cut[2], sumOf(3, 7, p), at('order, across the size cut: cut_small_b'));

  // Rank 0 (even) has [2, 3] elements, rank 1 (odd) [3, 2].
  for (const [name, a] of [['split, named', "'s_a'"], ['split, unnamed', 'unnamed']]) {
    const { outs, untouched } = r[name].got;
    expectFirstTensor(t, outs[0], cfg, 'tensor 1 of 2', `${a} (float64 x 2)`, `${a} (float64 x 3)`, at(`${name}: the first call`));
    expectError(t, outs[1], 'ERR_MISMATCH', at(`${name}: the second call`));
    t.ok(untouched, `${at(name)}: the arrays hold what they held`);
  }
  {
    const { outs, untouched } = r['split, one against two'].got;
    const five = 'unnamed (float64 x 5)', two = 'unnamed (float64 x 2)';
    if (cfg.fused) {
      expectFirstTensor(t, outs[0], cfg, 'tensor 1 of 1', five, `tensor 1 of 2 is ${two}`, at('split, one against two: the first call'));
    } else {
      expectFirstTensor(t, outs[0], cfg, '', five, two, at('split, one against two: the first call'));
    }
    t.ok(untouched, `${at('split, one against two')}: the array holds what it held`);
    expectValue(t, outs[1], sumOf(3, 2, p), at('split, one against two: the call after, matched with the other ranks\' second'));
  }
  for (const [name, x] of [['shape, named', "'shape_x'"], ['shape, unnamed', 'unnamed']]) {
    const { outs, untouched } = r[name].got;
    expectFirstTensor(t, outs[0], cfg, 'tensor 1 of 2', `${x} (float32 x 4913)`, `${x} (float32 x 5832)`, at(`${name}: [17 + rank]^3`));
    expectError(t, outs[1], 'ERR_MISMATCH', at(`${name}: the tensor that equalises the totals`));
    t.ok(untouched, `${at(name)}: the arrays hold what they held`);
  }

  const dup = r['duplicate, every rank'].got;
  expectValue(t, dup[0], sumOf(2, 1, p), at('duplicate, every rank: the first of the name'));
  expectError(t, dup[1], 'ERR_INVALID_ARGUMENT', at('duplicate, every rank: the second of the name'));
  t.match(dup[1] && dup[1].message, /argument 'options\.name' must differ .* received the string "dup" a second time/, at('duplicate, every rank: says why'));
  expectValue(t, dup[2], sumOf(2, 7, p), at('duplicate, every rank: the call after it in the batch'));
  const dupU = r['duplicate, with an unnamed call'].got;
  expectValue(t, dupU[0], sumOf(2, 1, p), at('duplicate, with an unnamed call: the unnamed call'));
  expectValue(t, dupU[1], sumOf(2, 5, p), at('duplicate, with an unnamed call: the first of the name'));
  expectError(t, dupU[2], 'ERR_INVALID_ARGUMENT', at('duplicate, with an unnamed call: the second of the name'));
  const dup0 = r['duplicate, rank 0 only'].got;
  expectValue(t, dup0[0], sumOf(2, 1, p), at('duplicate, rank 0 only: the first'));
  expectError(t, dup0[1], 'ERR_INVALID_ARGUMENT', at('duplicate, rank 0 only: the duplicate (and the other ranks\' call at its place)'));
  t.match(dup0[1] && dup0[1].message, /rank 0 made an invalid call: .*"once" a second time/, at('duplicate, rank 0 only: names rank 0 and the name'));

  const inv = r['invalid call keeps its place'].got;
  expectValue(t, inv[0], sumOf(2, 1, p), at('invalid call keeps its place: the valid call ordered before it'));
  expectError(t, inv[1], 'ERR_INVALID_ARGUMENT', at('invalid call keeps its place: the invalid call'));
  t.match(inv[1] && inv[1].message, rank === 0 ? /argument 'options\.op'/ : /rank 0 made an invalid call/, at('invalid call keeps its place: says why'));

  const across = r['order across batches'].got;
  for (const i of [0, 1]) expectError(t, across[i], 'ERR_MISMATCH', at(`order across batches: call ${i + 1}`));
  t.match(across[0] && across[0].message, /rank 0 submitted allreduce 'x_(a|b)'.* but rank 1 submitted allreduce 'x_(a|b)'/, at('order across batches: names both'));
}

for (const cfg of CONFIGS) {
  t.test(`p=${cfg.np}, ${cfg.label}`, async (t) => {
    const { results } = await runScenario(t, cfg.np, WORKER, 'all', cfg.env);
    for (const [rank, res] of results.entries()) {
      if (!res || res.threw) continue;
      check(t, cfg, rank, res);
    }
  });
}
