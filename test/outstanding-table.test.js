'use strict';
// The Dispatcher's table of outstanding works (ts/outstanding.ts, OutstandingTable; ts/work.ts re-exports it): works settle in any order,
// ids jump, the table grows past its first size, and iteration stays oldest first, as the Map it replaced
// kept them. Checked against a Map driven by the same random steps.
const t = require('tap');
const { OutstandingTable } = require('../dist/ts/outstanding.js');

const rec = (id) => ({ id, work: null, finish: null, site: null, keep: [] });

t.test('add, get and take, one at a time (a wait() loop)', async (t) => {
  const table = new OutstandingTable();
  let wrong = 0;
  for (let id = 1; id <= 1000; id++) {
    table.add(rec(id));
    if (table.size !== 1 || table.get(id).id !== id || table.take(id).id !== id || table.size !== 0) wrong++;
    if (table.take(id) !== undefined || table.get(id) !== undefined) wrong++;
  }
  t.equal(wrong, 0, '1000 works added and taken in turn, each found once');
});

t.test('settling out of order, with gaps in the ids and growth, matches a Map', async (t) => {
  let seed = 42;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const table = new OutstandingTable();
  const map = new Map();
  let nextId = 1;
  let mismatches = 0;
  for (let step = 0; step < 20000; step++) {
    const r = random();
    if (r < 0.45 || map.size === 0) {
      // Sometimes ids are skipped (a work that never entered the table).
      nextId += random() < 0.1 ? 1 + Math.floor(random() * 40) : 1;
      const o = rec(nextId);
      table.add(o);
      map.set(nextId, o);
    } else {
      // Settle the oldest, the newest, or one in between.
      const ids = [...map.keys()];
      const pick = r < 0.7 ? ids[0] : r < 0.8 ? ids[ids.length - 1] : ids[Math.floor(random() * ids.length)];
      if (table.take(pick) !== map.get(pick)) mismatches++;
      map.delete(pick);
    }
    if (table.size !== map.size) mismatches++;
    if (step % 97 === 0) {
      const got = [...table.values()].map((o) => o.id).join(',');
      if (got !== [...map.keys()].join(',')) mismatches++;
      // Ids that were never added, or already taken, are not found.
      if (table.get(nextId + 1) !== undefined || table.get(0) !== undefined) mismatches++;
    }
  }
  t.equal(mismatches, 0, 'no step differed from the Map');
  t.ok(map.size > 0 || table.size === 0);
});

t.test('many outstanding at once: the table grows and keeps them all, oldest first', async (t) => {
  const table = new OutstandingTable();
  for (let id = 5; id < 5 + 3000; id++) table.add(rec(id));
  t.equal(table.size, 3000);
  const ids = [...table.values()].map((o) => o.id);
  t.same(ids.slice(0, 3), [5, 6, 7]);
  t.equal(ids.length, 3000);
  t.equal(ids[2999], 3004);
  // Take every other one, then the rest in reverse.
  let missing = 0;
  for (let id = 5; id < 3005; id += 2) if (table.take(id)?.id !== id) missing++;
  t.equal(missing, 0, 'every other one taken');
  t.equal(table.size, 1500);
  t.equal([...table.values()][0].id, 6);
  for (let id = 3004; id >= 6; id -= 2) table.take(id);
  t.equal(table.size, 0);
  t.same([...table.values()], []);
});
