/**
 * brain.js's own update rules (NeuralNetwork.adjustWeights and _adjustWeightsAdam, the same in 1.6.x and
 * 2.0.0-beta), applied to a gradient averaged over a global mini-batch instead of to one sample's
 * `delta x incoming`.
 *
 * grad holds sums over the global batch (layout of net.ts accumulateLayer); dividing by `count` makes it
 * the batch mean, which takes the place of brain's per-sample gradient.
 */
import type { BrainNeuralNetwork } from './net';

/** Plain brain update: change = learningRate * g + momentum * change; weight += change; bias += learningRate * g. */
export function applyMomentum(net: BrainNeuralNetwork, layer: number, grad: Float64Array, count: number): void {
  const { learningRate, momentum } = net.trainOpts;
  const weights = net.weights[layer];
  const changes = net.changes[layer];
  const biases = net.biases[layer];
  const n = (net.sizes as number[])[layer - 1];
  const biasAt = weights.length * n;
  for (let node = 0; node < weights.length; node++) {
    const w = weights[node];
    const c = changes[node];
    const row = node * n;
    for (let k = 0; k < n; k++) {
      const change = learningRate * (grad[row + k] / count) + momentum * c[k];
      c[k] = change;
      w[k] += change;
    }
    biases[node] += learningRate * (grad[biasAt + node] / count);
  }
}

/**
 * brain's Adam ("praxis: 'adam'"). One step per mini-batch: net.iterations counts steps where brain
 * counts samples. Reproduced as brain writes it, including its bias update, which corrects the
 * moments of the previous step (it reads biasChangesLow/High before storing the new ones).
 */
export function applyAdam(net: BrainNeuralNetwork, layer: number, grad: Float64Array, count: number, step: number): void {
  const { learningRate, beta1, beta2, epsilon } = net.trainOpts;
  const weights = net.weights[layer];
  const biases = net.biases[layer];
  const low = (net.changesLow as Float32Array[][])[layer];
  const high = (net.changesHigh as Float32Array[][])[layer];
  const biasLow = (net.biasChangesLow as Float32Array[])[layer];
  const biasHigh = (net.biasChangesHigh as Float32Array[])[layer];
  const n = (net.sizes as number[])[layer - 1];
  const biasAt = weights.length * n;
  const correction1 = 1 - Math.pow(beta1, step);
  const correction2 = 1 - Math.pow(beta2, step);
  for (let node = 0; node < weights.length; node++) {
    const w = weights[node];
    const l = low[node];
    const h = high[node];
    const row = node * n;
    for (let k = 0; k < n; k++) {
      const gradient = grad[row + k] / count;
      const changeLow = l[k] * beta1 + (1 - beta1) * gradient;
      const changeHigh = h[k] * beta2 + (1 - beta2) * gradient * gradient;
      const momentumCorrection = changeLow / correction1;
      const gradientCorrection = changeHigh / correction2;
      l[k] = changeLow;
      h[k] = changeHigh;
      w[k] += learningRate * momentumCorrection / (Math.sqrt(gradientCorrection) + epsilon);
    }
    const biasGradient = grad[biasAt + node] / count;
    const biasChangeLow = biasLow[node] * beta1 + (1 - beta1) * biasGradient;
    const biasChangeHigh = biasHigh[node] * beta2 + (1 - beta2) * biasGradient * biasGradient;
    const biasMomentumCorrection = biasLow[node] / correction1;
    const biasGradientCorrection = biasHigh[node] / correction2;
    biasLow[node] = biasChangeLow;
    biasHigh[node] = biasChangeHigh;
    biases[node] += learningRate * biasMomentumCorrection / (Math.sqrt(biasGradientCorrection) + epsilon);
  }
}
