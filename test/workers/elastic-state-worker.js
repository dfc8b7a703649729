'use strict';
// State.sync between ranks: every scenario builds fields that differ by rank and reports what sync left.
const hora = require('../../dist/ts/index.js');
const { runScenarios, describeError } = require('../support/worker-util');

function fieldsOf(s) {
  return { step: s.step, cfg: s.cfg, w: Array.from(s.w), ids: Array.from(s.ids, String), wLength: s.w.length };
}

runScenarios(hora, {
  // Rank r starts from its own values; after sync(root) everyone has root's, and restore() goes back to them.
  async sync(r) {
    const root = 1;
    const s = new hora.elastic.State({
      step: 10 * r, cfg: { lr: 0.1 * (r + 1), tags: ['rank', r] },
      w: new Float32Array(r === 0 ? 3 : 5).fill(r + 0.5), ids: new BigInt64Array([BigInt(r), -7n]),
    });
    const wBefore = s.w;
    await s.sync(root);
    const after = fieldsOf(s);
    const sameArray = s.w === wBefore;
    s.step = 999;
    s.w[0] = -1;
    s.restore();
    return { after, restored: fieldsOf(s), sameArray };
  },
  // Rank 2's fields differ from root's: every rank fails with ERR_MISMATCH, none hangs.
  async mismatch(r) {
    const fields = { step: 0, w: new Float32Array(4) };
    if (r === 2) fields.w = new Float64Array(4);
    if (r === 1) fields.extra = 1;
    const s = new hora.elastic.State(fields);
    try {
      await s.sync(0);
      return { ok: true };
    } catch (e) {
      return describeError(e);
    }
  },
  async badRoot(r, p) {
    const s = new hora.elastic.State({ step: 0 });
    try {
      await s.sync(p);
      return { ok: true };
    } catch (e) {
      return describeError(e);
    }
  },
});
