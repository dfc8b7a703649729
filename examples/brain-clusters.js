// brain.js, data-parallel: a small classifier of three iris-like clusters (4 features, generated from a seed,
// so every rank builds the same data), trained by mini-batches of 30 averaged across ranks.
//   node dist/ts/cli/main.js run -np 2 node examples/brain-clusters.js
// Every rank passes the whole data set; hora/brain gives rank r the samples i of each batch with
// i % size === r. Rank 0 prints the training error every 10 iterations and the accuracy at the end.
const brain = require('brain.js');
const hora = require('hora');
const { distributed } = require('hora/brain');

/** mulberry32: a seeded PRNG (Math.random would give each rank different data). */
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

const SPECIES = ['setosa', 'versicolor', 'virginica'];
const CENTERS = [[0.25, 0.7, 0.2, 0.1], [0.5, 0.35, 0.55, 0.5], [0.7, 0.45, 0.75, 0.8]];

function makeData(n, seed) {
  const rand = prng(seed);
  return Array.from({ length: n }, (_, i) => {
    const c = i % 3;
    const input = CENTERS[c].map((m) => m + (rand() + rand() + rand() - 1.5) * 0.2);
    const output = SPECIES.map((_, k) => (k === c ? 1 : 0));
    return { input, output };
  });
}

function accuracy(net, data) {
  let right = 0;
  for (const { input, output } of data) {
    const y = net.run(input);
    if (y.indexOf(Math.max(...y)) === output.indexOf(1)) right++;
  }
  return right / data.length;
}

async function main() {
  await hora.init();
  const train = makeData(600, 1);
  const test = makeData(150, 2);
  const net = new brain.NeuralNetwork({ hiddenLayers: [8] });
  const status = await distributed(net, { batchSize: 30 }).trainAsync(train, {
    iterations: 200, errorThresh: 0.01, learningRate: 0.5, momentum: 0.5,
    log: true, logPeriod: 10, // log runs on rank 0 only
  });
  if (hora.rank() === 0) {
    console.log(`${hora.size()} ranks: stopped after ${status.iterations} iterations, training error ${status.error.toFixed(4)}`);
    console.log(`accuracy: train ${(100 * accuracy(net, train)).toFixed(1)}%, held out ${(100 * accuracy(net, test)).toFixed(1)}%`);
  }
  await hora.shutdown();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
