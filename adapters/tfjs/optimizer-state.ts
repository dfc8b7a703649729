/**
 * What an optimizer's state is, as ElasticState's commits and saveCheckpoint read and write it: the wrapped
 * optimizer under DistributedOptimizers, its slots (getWeights() without the iteration count), the scalar
 * variables it keeps outside getWeights(), and its iteration count.
 */
import { tf } from './framework';
import { DistributedOptimizer } from './optimizer';

/** The optimizer that owns the slots and the iteration count (a DistributedOptimizer wraps one). */
export function innermost(optimizer: tf.Optimizer): tf.Optimizer {
  let o = optimizer;
  // Not instanceof: tf.Optimizer answers instanceof by duck typing, so every optimizer would pass.
  while (DistributedOptimizer.prototype.isPrototypeOf(o)) o = (o as DistributedOptimizer).optimizer;
  return o;
}

/** The scalar variables an optimizer keeps outside getWeights() (Adam's accBeta1/accBeta2...), by property name. */
export function hiddenVariables(optimizer: tf.Optimizer): Array<[string, tf.Variable]> {
  const inner = innermost(optimizer) as unknown as Record<string, unknown>;
  return Object.keys(inner).sort().filter((k) => inner[k] instanceof tf.Variable).map((k) => [k, inner[k] as tf.Variable]);
}

/** getWeights() without its first entry, the iteration count, which it makes as a new tensor (disposed here). */
export async function slotsOf(optimizer: tf.Optimizer): Promise<Array<{ name: string; tensor: tf.Tensor }>> {
  const named = await optimizer.getWeights();
  if (named.length > 0 && named[0].name === 'iter') {
    named[0].tensor.dispose();
    return named.slice(1);
  }
  return named;
}

/** Every DistributedOptimizer in the chain down to the innermost optimizer. */
export function distributedLayers(optimizer: tf.Optimizer): DistributedOptimizer[] {
  const out: DistributedOptimizer[] = [];
  let o = optimizer;
  while (DistributedOptimizer.prototype.isPrototypeOf(o)) {
    out.push(o as DistributedOptimizer);
    o = (o as DistributedOptimizer).optimizer;
  }
  return out;
}

export function setIterations(optimizer: tf.Optimizer, n: number): void {
  (innermost(optimizer) as unknown as { iterations_: number }).iterations_ = n;
}
