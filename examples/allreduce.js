// The README's example: every rank contributes its rank number; everyone gets the average.
//   npx hora run -np 4 node examples/allreduce.js
const hora = require('hora');

async function main() {
  await hora.init();
  const grads = new Float32Array(1 << 20).fill(hora.rank());
  const avg = await hora.allreduce(grads);
  console.log(`rank ${hora.rank()} of ${hora.size()} (local ${hora.localRank()} of ${hora.localSize()}): average ${avg[0]}`);
  await hora.shutdown();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
