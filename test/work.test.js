'use strict';
// Work as a thenable (ts/work.ts): what `await` and then() see, whether the work is still pending when it is
// awaited, settles inside the await's own then() (a small collective's spin: Dispatcher.spinFor), or had
// settled before. Callbacks always run later than then() returns, as a promise's do; values and errors go
// through unchanged; the driver hears of the first await once.
const t = require('tap');
const { Work } = require('../dist/ts/work.js');
const { HoraError } = require('../dist/ts/errors.js');

const OnAwait = { Nothing: 0, Awaited: 1, Spin: 2 };

/** A driver that records what it is told and, told of an await, may settle the work there (as the spin does). */
function driver(onAwaited) {
  const record = { awaited: [], work: null };
  return {
    record,
    waitFor: () => {},
    awaited: (id, spin) => {
      record.awaited.push([id, spin]);
      if (onAwaited) onAwaited(record.work);
    },
  };
}

const states = {
  'pending, settled later': (w) => setImmediate(() => w.fulfil(7)),
  'settled inside then() (the spin)': null,
  'settled before then()': (w) => w.fulfil(7),
};

for (const [how, arrange] of Object.entries(states)) {
  t.test(`fulfilled: ${how}`, async (t) => {
    const drv = driver(arrange === null ? (w) => w.fulfil(7) : null);
    const w = new Work(drv, 5, OnAwait.Spin);
    drv.record.work = w;
    if (arrange) arrange(w);
    let ran = false;
    const p = w.then((v) => { ran = true; return v * 2; });
    t.equal(ran, false, 'the callback has not run when then() returns');
    t.ok(p instanceof Promise, 'then() returns a promise');
    t.equal(await p, 14, 'the promise resolves to what the callback returned');
    t.equal(await w, 7, 'await gives the value');
    t.same(drv.record.awaited, [[5, true]], 'the driver heard of the first await once, with its spin flag');
  });

  t.test(`rejected: ${how}`, async (t) => {
    const err = new HoraError('ERR_MISMATCH', 'ranks differ', 0);
    const reject = (w) => w.reject(err);
    const drv = driver(arrange === null ? reject : null);
    const w = new Work(drv, 6, OnAwait.Awaited);
    drv.record.work = w;
    if (arrange) (arrange === states['settled before then()'] ? reject(w) : setImmediate(() => reject(w)));
    let ran = false;
    const p = w.then(() => 'wrong', (e) => { ran = true; return e; });
    t.equal(ran, false, 'the rejection callback has not run when then() returns');
    t.equal(await p, err, 'the rejection callback gets the HoraError itself');
    await t.rejects(w.then((v) => v), err, 'then() without a rejection callback gives a promise that rejects with it');
    t.equal(await w.catch((e) => e.code), 'ERR_MISMATCH', 'catch() gets it');
    await t.rejects((async () => await w)(), err, 'await throws it');
    t.same(drv.record.awaited, [[6, false]], 'the driver heard of the first await once, without spin');
  });
}

t.test('a callback returning a promise is followed, as a promise then() follows it', async (t) => {
  const w = new Work(null);
  w.fulfil(1);
  t.equal(await w.then((v) => Promise.resolve(v + 1)), 2);
  t.equal(await w.then(null, null), 1, 'no callbacks: the value passes through');
});
