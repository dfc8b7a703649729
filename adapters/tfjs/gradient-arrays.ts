/**
 * A step's gradients as float32 arrays (optimizer.ts): each read back as a copy and checked to be float32
 * (readGradient, checkFloat32), put in the order of their names, the same on every rank (byName), summed
 * over a step's passes with a weight (addWeighted), and divided by the step's samples (divideBy).
 */
import type { tf } from './framework';

/** One gradient as applyGradients is given it (null or undefined: the variable got none). */
export type Entry = { name: string; tensor: tf.Tensor | null | undefined };

/** sum += weight x values (a weight of 0 adds nothing, not even a NaN of a pass over no samples). */
export function addWeighted(sum: Float32Array, values: ArrayLike<number>, weight: number): void {
  if (weight === 0) return;
  if (weight === 1) for (let i = 0; i < sum.length; i++) sum[i] += values[i];
  else for (let i = 0; i < sum.length; i++) sum[i] += weight * values[i];
}

/** A weighted step's averaged sums divided by the averaged count; zeros where no rank had a sample. */
export function divideBy(averaged: Array<Float32Array | null>, count: number): void {
  for (const a of averaged) {
    if (!a) continue;
    if (count === 0) a.fill(0);
    else for (let i = 0; i < a.length; i++) a[i] /= count;
  }
}

/** Indices of the entries in the order of their names: the same on every rank whatever order they came in. */
export function byName(entries: Entry[]): number[] {
  return entries.map((_, i) => i).sort((a, b) => (entries[a].name < entries[b].name ? -1 : entries[a].name > entries[b].name ? 1 : a - b));
}

/** Refuses a gradient that is not float32 (only float32 gradients are averaged). */
export function checkFloat32(e: Entry): void {
  if (e.tensor && e.tensor.dtype !== 'float32') {
    throw new TypeError(`DistributedOptimizer: gradient '${e.name}' has dtype ${e.tensor.dtype}; only float32 gradients can be averaged`);
  }
}

/** A float32 copy of one gradient (null where the variable got none). */
export function readGradient(e: Entry): Float32Array | null {
  if (!e.tensor) return null;
  checkFloat32(e);
  return Float32Array.from(e.tensor.dataSync() as Float32Array);
}
