'use strict';
// hora/brain from inside each rank. Usage: node brain-worker.js <scenario> (under `hora run`, or alone: a world of one)
//   equiv     trains a 4-6-5-3 net on 100 deterministic samples with distributed(net, {batchSize: 12}) for
//             3 iterations (27 steps); BRAIN_PRAXIS=adam for Adam. Rank 0 (or the lone process) starts from
//             seeded weights, the other ranks from brain's random ones: the broadcast must make them equal.
//   thresh    trains until errorThresh 0.02; reports the iteration where it stopped
//   timeout   rank 1 alone sets a 300 ms timeout; every rank must stop at the same iteration
//   overlap   records the adapter's trace; rank 1 spends 300 ms computing the layer below the output
//   throw     rank 1's callback throws at iteration 3; every rank reports the error it got and exits 1
//             (BRAIN_LINGER=1: rank 1 then stays alive for 60 s instead of exiting)
//   disagree  rank 1 passes different data; badopts: rank 1 alone passes an option brain rejects
// BRAIN_MODULE picks the brain.js package: 'brain.js' (1.6.1, the default) or 'brain.js-2' (2.0.0-beta).
// Each rank writes one JSON line to $HORA_TEST_RESULT_DIR/rank-<rank>.json, or to stdout when that is unset.
const crypto = require('node:crypto');
const brain = require(process.env.BRAIN_MODULE || 'brain.js');
const hora = require('../../dist/ts/index.js');
const { distributed } = require('../../dist/adapters/brain/index.js');
const { report, prng } = require('../support/worker-util');

/** Three Gaussian-ish clusters in 4 dimensions with one-hot outputs (iris-like). */
function clusters(n, seed) {
  const rand = prng(seed);
  const centers = [[0.2, 0.7, 0.3, 0.2], [0.5, 0.4, 0.6, 0.5], [0.8, 0.5, 0.8, 0.8]];
  const data = [];
  for (let i = 0; i < n; i++) {
    const c = i % 3;
    const input = centers[c].map((m) => m + (rand() + rand() + rand() - 1.5) * 0.15);
    const output = [0, 0, 0];
    output[c] = 1;
    data.push({ input, output });
  }
  return data;
}

function newNet(seeded) {
  const net = new brain.NeuralNetwork({ hiddenLayers: [6, 5] });
  net.sizes = [4, 6, 5, 3];
  net.initialize();
  if (seeded) {
    const rand = prng(42);
    for (let l = 1; l < net.sizes.length; l++) {
      for (const row of net.weights[l]) for (let k = 0; k < row.length; k++) row[k] = rand() * 0.8 - 0.4;
      for (let k = 0; k < net.biases[l].length; k++) net.biases[l][k] = rand() * 0.8 - 0.4;
    }
  }
  return net;
}

function flatWeights(net) {
  const out = [];
  for (let l = 1; l < net.sizes.length; l++) {
    for (const row of net.weights[l]) out.push(...row);
    out.push(...net.biases[l]);
  }
  return out;
}

function sha256(values) {
  return crypto.createHash('sha256').update(Buffer.from(Float32Array.from(values).buffer)).digest('hex');
}

const sleep = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

async function main(scenario) {
  await hora.init();
  const rank = hora.rank();
  const size = hora.size();
  const data = clusters(100, 7);
  const net = newNet(rank === 0);
  if (scenario === 'equiv') {
    const praxis = process.env.BRAIN_PRAXIS === 'adam' ? 'adam' : null;
    const initial = flatWeights(net);
    const status = await distributed(net, { batchSize: 12 }).trainAsync(data, {
      iterations: 3, errorThresh: 0.001, learningRate: praxis ? 0.01 : 0.3, momentum: 0.5, praxis,
    });
    const weights = flatWeights(net);
    report(rank, {
      size, status, weights, hash: sha256(weights), initial, initialHash: sha256(initial), adamSteps: net.iterations ?? null,
    });
  } else if (scenario === 'thresh') {
    const status = await distributed(net, { batchSize: 8 }).trainAsync(data, {
      iterations: 3000, errorThresh: 0.02, learningRate: 0.5, momentum: 0.5,
    });
    report(rank, { size, status, hash: sha256(flatWeights(net)) });
  } else if (scenario === 'timeout') {
    const status = await distributed(net, { batchSize: 8 }).trainAsync(data, {
      iterations: 1e7, errorThresh: 1e-9, ...(rank === 1 ? { timeout: 300 } : {}),
    });
    report(rank, { size, status, hash: sha256(flatWeights(net)) });
  } else if (scenario === 'overlap') {
    const events = [];
    let slowUntil = [];
    const trace = (e) => {
      events.push(e);
      if (rank === 1 && e.phase === 'deltas' && e.layer === net.outputLayer - 1) {
        sleep(300); // a slow layer below the output layer
        slowUntil.push(performance.timeOrigin + performance.now());
      }
    };
    await distributed(net, { batchSize: 24, trace }).trainAsync(data.slice(0, 48), { iterations: 1 });
    report(rank, { size, top: net.outputLayer, events, slowUntil });
  } else if (scenario === 'throw') {
    const started = Date.now();
    try {
      await distributed(net, { batchSize: 10 }).trainAsync(data, {
        iterations: 50, errorThresh: 1e-9, callbackPeriod: 1,
        callback: ({ iterations }) => {
          if (rank === 1 && iterations === 3) throw new Error('boom on rank 1 at iteration 3');
        },
      });
      report(rank, { size, ok: true });
    } catch (e) {
      report(rank, { size, ok: false, code: e.code ?? null, message: e.message, peer: e.peer ?? null, seconds: (Date.now() - started) / 1000 });
      if (rank === 1 && process.env.BRAIN_LINGER === '1') setTimeout(() => process.exit(1), 60000);
      else process.exit(1);
    }
  } else if (scenario === 'disagree' || scenario === 'badopts') {
    // disagree: rank 1 passes data with one label changed; badopts: rank 1 alone passes learningRate 5.
    if (scenario === 'disagree' && rank === 1) data[50].output = [1, 1, 0];
    const options = { iterations: 5, ...(scenario === 'badopts' && rank === 1 ? { learningRate: 5 } : {}) };
    try {
      await distributed(net, { batchSize: 10 }).trainAsync(data, options);
      report(rank, { size, ok: true });
    } catch (e) {
      report(rank, { size, ok: false, code: e.code ?? null, message: e.message, peer: e.peer ?? null });
    }
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
  await hora.shutdown();
}

main(process.argv[2]).catch((e) => {
  console.error(e);
  process.exit(1);
});
