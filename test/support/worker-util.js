// Helpers for test workers: reporting a rank's result, and a seeded PRNG so every process builds the
// same data (Math.random would give each rank different numbers).
const fs = require('node:fs');
const path = require('node:path');

/** Writes this rank's result to $HORA_TEST_RESULT_DIR/rank-N.json, or prints it. */
function report(rank, data) {
  const line = JSON.stringify({ rank, ...data });
  if (process.env.HORA_TEST_RESULT_DIR) fs.writeFileSync(path.join(process.env.HORA_TEST_RESULT_DIR, `rank-${rank}.json`), line + '\n');
  else process.stdout.write(line + '\n');
}

/** mulberry32: uniform in [0, 1). */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

module.exports = { report, prng };
