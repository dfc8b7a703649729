// shutdown() with a collective still outstanding: it must wait for it without blocking the event loop.
// Rank 1 submits its half 300 ms late, so rank 0's shutdown() is certain to be waiting meanwhile.
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

(async () => {
  await hora.init();
  const rank = hora.rank();
  if (rank === 1) await new Promise((resolve) => setTimeout(resolve, 300));
  const work = hora.allreduce(new Float32Array(1 << 22).fill(rank + 1), { op: 'sum' });
  let ticks = 0;
  const timer = setInterval(() => ticks++, 0);
  await hora.shutdown();
  clearInterval(timer);
  const value = (await work)[0];
  let after;
  try {
    hora.allreduce(new Float32Array(1));
  } catch (e) {
    after = e.code;
  }
  report(rank, { doneAtShutdown: work.done, value, ticks, initialized: hora.isInitialized(), after });
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
