'use strict';
// The enum tables on the two sides of the Node-API boundary agree entry by entry: the addon's
// (native/src/common/enums.h, handed out by enums()) and ts/native.ts's, from which the JS side's
// names, types and checks derive. So do the keys of a submitted item the addon reads
// (native/binding/communicator.h ItemKey) and ts/native.ts ITEM_KEYS, each a key of NativeItem.
const t = require('tap');
const { loadNative } = require('../dist/ts/loader.js');
const native = require('../dist/ts/native.js');

const addon = loadNative();
const ours = native.enumTables();
const theirs = addon.enums();

t.same(Object.keys(theirs).sort(), Object.keys(ours).sort(), 'the addon hands out the tables ts/native.ts has, and no other');

for (const table of Object.keys(ours)) {
  t.test(table, async (t) => {
    const a = theirs[table] || [];
    const b = ours[table];
    t.equal(a.length, b.length, `${table}: as many entries on both sides`);
    for (let i = 0; i < Math.max(a.length, b.length); i++) {
      t.equal(b[i], a[i], `${table}[${i}]: ts/native.ts says ${JSON.stringify(b[i])}, the addon ${JSON.stringify(a[i])}`);
    }
  });
}

t.test('the JS lists that users see derive from the tables', async (t) => {
  const { HoraError } = require('../dist/ts/errors.js');
  for (const code of ours.codes) {
    t.equal(new HoraError(code, 'x').code, code === 'OK' ? 'ERR_INTERNAL' : code, `HoraError keeps ${code}${code === 'OK' ? ' out' : ''}`);
  }
  const { ALGORITHMS } = require('../dist/ts/config.js');
  t.same(ALGORITHMS, ours.algorithms, 'HORA_ALGO takes the algorithms, in order');
  const { COLLECTIVE_KINDS, MESSAGE_KINDS } = require('../dist/ts/control/messages.js');
  t.same(COLLECTIVE_KINDS, ['allreduce', 'broadcast', 'allgather', 'reduceScatter', 'barrier', 'alltoall', 'reduce', 'gather', 'scatter'],
    'stats name the collectives as the API does');
  t.same(MESSAGE_KINDS, ['send', 'recv'], 'and the messages');
  t.equal(native.DTYPE_OF_NAME.bfloat16, ours.dtypes.indexOf('bfloat16'), 'DTYPE_OF_NAME gives a name its value');
});

t.test('kinds: the collectives appended after the messages keep their wire values', async (t) => {
  t.same(ours.kinds, ['allreduce', 'broadcast', 'allgather', 'reducescatter', 'barrier', 'invalid call', 'send', 'recv',
    'alltoall', 'reduce', 'gather', 'scatter'], 'the engine names of kinds 0-11 (never renumbered; new ones go last)');
});

t.test('dtypes: appended after the first seven, and every kind, op, dtype and algorithm fits its 4 bits of itemCode()', async (t) => {
  t.same(ours.dtypes, ['float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'int8', 'int16', 'uint16'],
    'the wire values of the dtypes (never renumbered; new ones go last)');
  t.same(ours.dtypeBytes, [4, 8, 2, 2, 4, 8, 1, 1, 2, 2], 'bytes per element');
  for (const table of ['kinds', 'ops', 'dtypes', 'algorithms']) t.ok(ours[table].length <= 16, `${table}: ${ours[table].length} fit in 4 bits`);
  for (let d = 0; d < ours.dtypes.length; d++) {
    t.equal((native.itemCode(7, 4, d, 4) >> 8) & 15, d, `itemCode keeps dtype ${ours.dtypes[d]}`);
  }
});
