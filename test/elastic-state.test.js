'use strict';
// hora.elastic.State: fields, commit and restore in one process; sync between ranks under hora run.
const t = require('tap');
const path = require('node:path');
const hora = require('../dist/ts/index.js');
const { runScenario } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'elastic-state-worker.js');

t.test('keepCopy, the commit copy of every elastic state: into the kept buffer when it fits, else a new array', async (t) => {
  const { keepCopy, rankList } = require('../dist/ts/elastic/sync.js');
  const kept = new Float32Array(3);
  const values = new Float32Array([1, 2, 3]);
  t.equal(keepCopy(values, kept), kept, 'same type and length: the kept buffer');
  t.same(Array.from(kept), [1, 2, 3], 'holding the values');
  const fresh = keepCopy(values, undefined);
  t.not(fresh, values, 'nothing kept: a new array, not the one given');
  t.same(Array.from(fresh), [1, 2, 3]);
  t.ok(fresh instanceof Float32Array);
  const other = keepCopy(new Int32Array([4, 5, 6]), kept);
  t.not(other, kept, 'another type: a new array');
  t.ok(other instanceof Int32Array);
  t.same(Array.from(kept), [1, 2, 3], 'the kept buffer of another type is left alone');
  t.not(keepCopy(new Float32Array(4), kept), kept, 'another length: a new array');
  t.equal(rankList([3]), 'rank 3');
  t.equal(rankList([1, 4]), 'ranks 1, 4');
});

t.test('fields read and write as properties; restore goes back to the last commit', async (t) => {
  const w = new Float32Array([1, 2, 3]);
  const s = new hora.elastic.State({ step: 0, epoch: 2, cfg: { lr: 0.5, sizes: [1, 2] }, w, name: 'run', done: false, none: null });
  t.same(s.fieldNames(), ['step', 'epoch', 'cfg', 'w', 'name', 'done', 'none']);
  t.equal(s.w, w, 'a typed array field is the array given, not a copy');
  s.step = 5;
  s.cfg.lr = 0.25;
  w[1] = 20;
  s.restore();
  t.equal(s.step, 0, 'restore before any commit goes back to the values given');
  t.same(s.cfg, { lr: 0.5, sizes: [1, 2] }, 'a JSON value changed in place is restored too');
  t.same(Array.from(s.w), [1, 2, 3]);
  t.equal(s.w, w, 'restore writes back into the same array');

  s.step = 7;
  w[0] = 10;
  s.cfg.sizes.push(3);
  await s.commit();
  s.step = 8;
  w[0] = 11;
  s.cfg.sizes.length = 0;
  s.restore();
  t.equal(s.step, 7);
  t.same(Array.from(s.w), [10, 2, 3]);
  t.same(s.cfg.sizes, [1, 2, 3]);

  const longer = new Float32Array([4, 5, 6, 7]);
  s.w = longer;
  await s.commit();
  t.equal(s.w, longer);
  s.w[3] = 0;
  s.restore();
  t.same(Array.from(s.w), [4, 5, 6, 7], 'an array of a new length is committed and restored');
  s.w = new Float32Array(1);
  s.restore();
  t.same(Array.from(s.w), [4, 5, 6, 7], 'restoring replaces an array whose length changed since the commit');
  t.same(Object.keys(s), ['step', 'epoch', 'cfg', 'w', 'name', 'done', 'none'], 'fields are the enumerable properties');
});

t.test('every typed array type commits and restores', async (t) => {
  const kinds = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array, Float32Array, Float64Array];
  for (const K of kinds) {
    const s = new hora.elastic.State({ a: new K([1, 2, 3]) });
    s.a[0] = 9;
    s.restore();
    t.same(Array.from(s.a), [1, 2, 3], K.name);
  }
  const s = new hora.elastic.State({ big: new BigInt64Array([1n, -2n]), ubig: new BigUint64Array([3n]) });
  s.big[1] = 5n;
  s.ubig[0] = 0n;
  s.restore();
  t.same(Array.from(s.big, String), ['1', '-2']);
  t.same(Array.from(s.ubig, String), ['3']);
});

t.test('bad fields: ERR_INVALID_ARGUMENT naming the field and what it holds', async (t) => {
  const cases = [
    [{ f: () => 1 }, /field 'f' must be a JSON value .* or a typed array; f is a function/],
    [{ n: NaN }, /field 'n' .*; n is NaN, which JSON cannot hold/],
    [{ c: { deep: [1, Infinity] } }, /field 'c' .*; c\.deep\[1\] is Infinity/],
    [{ d: new Date(0) }, /field 'd' .*; d is an object of type Date/],
    [{ m: new Map() }, /field 'm' .*; m is an object of type Map/],
    [{ u: undefined }, /field 'u' .*; u is undefined/],
    [{ b: 1n }, /field 'b' .*; b is bigint 1/],
    [{ v: new DataView(new ArrayBuffer(4)) }, /field 'v' .*; v is/],
    [{ commit: 1 }, /field 'commit' has the name of a State method/],
  ];
  const cyclic = { a: 1 };
  cyclic.self = cyclic;
  cases.push([{ cyc: cyclic }, /field 'cyc' .*; cyc\.self refers back to itself/]);
  for (const [fields, message] of cases) {
    t.throws(() => new hora.elastic.State(fields), { code: 'ERR_INVALID_ARGUMENT', message }, Object.keys(fields)[0]);
  }
  t.throws(() => new hora.elastic.State(null), { code: 'ERR_INVALID_ARGUMENT', message: /argument 'fields' must be an object of named values; received null/ });
  t.throws(() => new hora.elastic.State([1]), { code: 'ERR_INVALID_ARGUMENT', message: /argument 'fields'/ });

  const s = new hora.elastic.State({ step: 0, w: new Float32Array(2) });
  t.throws(() => { s.step = () => 0; }, { code: 'ERR_INVALID_ARGUMENT', message: /field 'step' .*; step is a function/ });
  t.throws(() => { s.w = 3; }, { code: 'ERR_INVALID_ARGUMENT', message: /field 'w' holds a typed array and cannot become number 3/ });
  t.throws(() => { s.step = new Float32Array(1); }, { code: 'ERR_INVALID_ARGUMENT', message: /field 'step' holds a JSON value and cannot become Float32Array\(1\)/ });
  t.throws(() => { s.w = new Float64Array(2); }, { code: 'ERR_INVALID_ARGUMENT', message: /field 'w' holds a Float32Array; received Float64Array\(2\)/ });
  t.equal(s.step, 0, 'a refused assignment leaves the field as it was');
  t.throws(() => { s.step = { nested: [NaN] }; }, { code: 'ERR_INVALID_ARGUMENT', message: /step\.nested\[0\] is NaN/ });
  s.step = { nested: [1] };
  s.step.nested[0] = NaN;
  await t.rejects(s.commit(), { code: 'ERR_INVALID_ARGUMENT', message: /step\.nested\[0\] is NaN/ }, 'a value made un-JSON-able in place is refused at commit');
  t.throws(() => s.onReset('x'), { code: 'ERR_INVALID_ARGUMENT', message: /onReset: argument 'fn' must be a function; received the string "x"/ });
});

t.test('reset callbacks run in order, each awaited', async (t) => {
  const s = new hora.elastic.State({ step: 0 });
  const seen = [];
  s.onReset(async () => {
    await new Promise((r) => setTimeout(r, 20));
    seen.push('first');
  });
  s.onReset(() => seen.push('second'));
  await s.runResetCallbacks();
  t.same(seen, ['first', 'second']);
});

t.test('sync before init is a clear error', async (t) => {
  const s = new hora.elastic.State({ step: 0 });
  await t.rejects(s.sync(), { code: 'ERR_NOT_INITIALIZED' });
});

t.test('sync gives every rank root\'s fields and rollback point (3 ranks)', async (t) => {
  const { results } = await runScenario(t, 3, WORKER, 'sync');
  const root = { step: 10, cfg: { lr: 0.2, tags: ['rank', 1] }, w: [1.5, 1.5, 1.5, 1.5, 1.5], ids: ['1', '-7'], wLength: 5 };
  for (const [r, res] of results.entries()) {
    t.same(res.after, root, `rank ${r} has rank 1's fields`);
    t.same(res.restored, root, `rank ${r} restores to what sync gave`);
    t.equal(res.sameArray, r !== 0, `rank ${r}: the array is kept where its length matched root's`);
  }
});

t.test('sync with fields that differ: ERR_MISMATCH on every rank, naming the ranks and fields', async (t) => {
  const { results } = await runScenario(t, 3, WORKER, 'mismatch');
  for (const [r, res] of results.entries()) {
    t.equal(res.code, 'ERR_MISMATCH', `rank ${r}`);
    t.match(res.message, /the fields of ranks 1, 2 differ from root 0's/, `rank ${r} names the ranks`);
  }
  t.match(results[1].message, /'extra' is a field here but not on rank 0/);
  t.match(results[2].message, /'w' is a Float32Array on rank 0 but a Float64Array here/);
});

t.test('sync with a root outside the world', async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'badRoot');
  for (const [r, res] of results.entries()) {
    t.equal(res.code, 'ERR_INVALID_ARGUMENT', `rank ${r}`);
    t.match(res.message, /argument 'root' must be a rank, 0 <= root < 2; received number 2/);
  }
});

t.test('hora.elastic.run outside an elastic job: runs fn once; a nested run is refused; a run after it ends runs', async (t) => {
  await hora.init();
  t.teardown(() => hora.shutdown());
  const s = new hora.elastic.State({ step: 0 });
  let nested;
  const first = await hora.elastic.run(s, async (state) => {
    state.step = 1;
    nested = await hora.elastic.run(s, () => 'nested').then(() => null, (e) => e);
    return 'first';
  });
  t.equal(first, 'first', 'run resolves with what fn returns');
  t.equal(nested && nested.code, 'ERR_INVALID_ARGUMENT', 'a run inside a run is refused');
  t.match(nested && nested.message, /hora\.elastic\.run: already running in this process; runs do not nest/);
  const failed = await hora.elastic.run(s, () => { throw new Error('fn threw'); }).then(() => null, (e) => e);
  t.match(failed && failed.message, /fn threw/, "fn's own error comes out of run");
  t.equal(await hora.elastic.run(s, () => 'again'), 'again', 'a run after one has ended (even by a throw) runs');
});
