/**
 * The optimizer updates of ORT's training ops, applied by hora to the averaged gradient (exact mode).
 *
 * AdamWOptimizer (com.microsoft), step t counted from 1, every array float32:
 *   m1 = alpha m1 + (1 - alpha) g;   m2 = beta m2 + (1 - beta) g^2
 *   adam_mode 0 (PyTorch AdamW): w -= lr weight_decay w first, then
 *                                w -= (lr / (1 - alpha^t)) m1 / (sqrt(m2) / sqrt(1 - beta^t) + epsilon)
 *   adam_mode 1 (Hugging Face):  lr' = lr sqrt(1 - beta^t) / (1 - alpha^t) when correct_bias, else lr;
 *                                w -= lr' m1 / (sqrt(m2) + epsilon), then w -= lr weight_decay w
 * SGDOptimizerV2: w -= lr g.
 * Each element's arithmetic is done in float64 and stored as float32, so every rank (which holds the same
 * inputs bit for bit) computes the same result bit for bit.
 */
import type { OptimizerSpec } from './onnx';

export interface OptimizerState {
  /** Optimizer steps taken so far. */
  step: number;
  /** First and second moments (AdamW only), one float per parameter element. */
  m1: Float32Array | null;
  m2: Float32Array | null;
}

export function newOptimizerState(spec: OptimizerSpec, size: number): OptimizerState {
  const adam = spec.kind === 'adamw';
  return { step: 0, m1: adam ? new Float32Array(size) : null, m2: adam ? new Float32Array(size) : null };
}

/** Applies one step of `spec` with learning rate `lr` and gradient `g` to the parameters `w`, in place. */
export function applyUpdate(spec: OptimizerSpec, state: OptimizerState, w: Float32Array, g: Float32Array, lr: number): void {
  state.step += 1;
  if (spec.kind === 'sgd') {
    for (let i = 0; i < w.length; i++) w[i] = w[i] - lr * g[i];
    return;
  }
  const m1 = state.m1 as Float32Array;
  const m2 = state.m2 as Float32Array;
  const { alpha, beta, epsilon, weightDecay } = spec;
  const t = state.step;
  const correction1 = 1 - Math.pow(alpha, t);
  const correction2 = 1 - Math.pow(beta, t);
  if (spec.adamMode === 0) {
    const stepSize = lr / correction1;
    const sqrtCorrection2 = Math.sqrt(correction2);
    for (let i = 0; i < w.length; i++) {
      const decayed = Math.fround(w[i] - w[i] * lr * weightDecay);
      m1[i] = alpha * m1[i] + (1 - alpha) * g[i];
      m2[i] = beta * m2[i] + (1 - beta) * g[i] * g[i];
      w[i] = decayed - stepSize * (m1[i] / (Math.sqrt(m2[i]) / sqrtCorrection2 + epsilon));
    }
    return;
  }
  const lrCorrected = spec.correctBias ? (lr * Math.sqrt(correction2)) / correction1 : lr;
  for (let i = 0; i < w.length; i++) {
    m1[i] = alpha * m1[i] + (1 - alpha) * g[i];
    m2[i] = beta * m2[i] + (1 - beta) * g[i] * g[i];
    let wi = Math.fround(w[i] - lrCorrected * (m1[i] / (Math.sqrt(m2[i]) + epsilon)));
    if (weightDecay > 0) wi = wi - lr * weightDecay * wi;
    w[i] = wi;
  }
}
