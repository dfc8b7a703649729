// Rank 1 gives up with hora.failPeers(); every other rank's pending allreduce must fail naming rank 1 and
// the reason, and the ranks must stay in step for the collective after it.
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

(async () => {
  await hora.init();
  const rank = hora.rank();
  const result = { rank };
  if (rank === 1) {
    hora.failPeers('disk full while loading shard 3');
  } else {
    try {
      await hora.allreduce(new Float32Array(4), { op: 'sum' });
      result.first = 'resolved';
    } catch (e) {
      result.first = { code: e.code, peer: e.peer, message: e.message };
    }
  }
  // A reason longer than the agreement's verdict holds (400 bytes) reaches the others whole.
  const long = `shard 3 is unreadable: ${'checksum mismatch in block; '.repeat(40)}the end`;
  if (rank === 1) {
    hora.failPeers(long);
  } else {
    try {
      await hora.allreduce(new Float32Array(4), { op: 'sum' });
      result.long = 'resolved';
    } catch (e) {
      result.long = { code: e.code, peer: e.peer, whole: e.message.includes(`rank 1 made an invalid call: ${long}`), message: e.message };
    }
  }
  const after = await hora.allreduce(new Float32Array([1]), { op: 'sum' });
  result.after = after[0];
  try {
    hora.failPeers(42);
  } catch (e) {
    result.badReason = e.message;
  }
  report(rank, result);
  await hora.shutdown();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
