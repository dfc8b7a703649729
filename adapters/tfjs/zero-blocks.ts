/**
 * ZeRO stage 3's sharded weight (zero-weights.ts; docs/zero-weights.md): this rank's block of a weight as a
 * variable of its own (ShardVariable), where the block lies in the weight (ShardedWeight: the first
 * count % N blocks one element longer, as hora.reduceScatter cuts an array), the full view tfjs and hora
 * read and write through `weights` (FullWeight), and the allgather that makes a layer's weights whole
 * (gather, or startGather then finishGather where the overlap starts it ahead; zero-overlap.ts). And what
 * stage 3 needs of the DistributedOptimizer that owns it (ShardingOwner), which each of its parts reads.
 */
import { tf } from './framework';
import * as hora from '../../ts/index';
import type { Work } from '../../ts/index';
import { HoraError, blockRange } from '../../ts/internal';

/** What stage 3 needs of the DistributedOptimizer that owns it (optimizer.ts; a type, to keep the import one way). */
export interface ShardingOwner {
  readonly optimizer: tf.Optimizer;
  readonly op: 'avg' | 'sum';
  readonly compression: 'none' | 'fp16' | 'bf16';
  readonly backwardPassesPerStep: number;
  /** Prefetch the next layer's allgather and defer the gradients' reduce-scatters to applyGradients. */
  readonly overlap: boolean;
  /** With overlap: the gradient bytes whose reduce-scatters may be in flight before the backward pass waits for the oldest. */
  readonly bucketMB: number;
  readonly stats: { steps: number; submitMs: number; waitMs: number; applyMs: number };
  /** The DistributedOptimizer's own minimize (a shadow pass runs through it, as fit's passes do). */
  minimize(f: () => tf.Scalar, returnCost?: boolean, varList?: tf.Variable[]): tf.Scalar | null;
}

/** This rank's block of one weight, as the trainable variable the layer lists and the optimizer updates. */
export class ShardVariable {
  val: tf.Variable;
  shape: number[];
  readonly dtype = 'float32';
  private trainable_: boolean;

  constructor(readonly name: string, readonly originalName: string, values: Float32Array, trainable: boolean) {
    const t = tf.tensor1d(values, 'float32');
    this.val = tf.variable(t, trainable, name);
    t.dispose();
    this.shape = [values.length];
    this.trainable_ = trainable;
  }

  read(): tf.Variable {
    return this.val;
  }

  write(v: tf.Tensor): this {
    if (v.size !== this.val.size) throw new Error(`Shape mismatch: [${this.shape.join(', ')}] vs. [${v.shape.join(', ')}] (a shard of '${this.name}')`);
    tf.tidy(() => this.val.assign(tf.reshape(v, this.shape)));
    return this;
  }

  dispose(): void {
    if (!this.val.isDisposed) this.val.dispose();
  }

  /** A new block of `length` zeros under the same name (a recut: the caller writes its values next). */
  resize(length: number): void {
    if (length === this.val.size) return;
    this.dispose();
    const t = tf.zeros([length], 'float32');
    this.val = tf.variable(t, this.trainable_, this.name);
    t.dispose();
    this.shape = [length];
  }

  get trainable(): boolean {
    return this.trainable_;
  }

  set trainable(t: boolean) {
    this.trainable_ = t;
    this.val.trainable = t;
  }
}

/** One sharded weight: its full shape, this rank's block of it, and its full view. */
export class ShardedWeight {
  readonly count: number;
  begin: number;
  end: number;
  readonly view: FullWeight;

  constructor(readonly layer: string, readonly shape: number[], readonly shard: ShardVariable, rank: number, size: number) {
    this.count = shape.reduce((a, b) => a * b, 1);
    [this.begin, this.end] = blockRange(this.count, size, rank);
    this.view = new FullWeight(this);
  }

  /** This rank's block for another world: the range, and a shard variable of its length (zeros until written). */
  cut(rank: number, size: number): void {
    [this.begin, this.end] = blockRange(this.count, size, rank);
    this.shard.resize(this.end - this.begin);
  }

  get name(): string {
    return this.shard.name;
  }
}

/**
 * A sharded weight as tfjs and hora see it in `weights`: full shape; read() allgathers it (a new tensor,
 * the caller's to dispose), write() keeps this rank's block of the value. Every rank must call them together.
 */
export class FullWeight {
  constructor(private readonly w: ShardedWeight) {}

  get name(): string { return this.w.shard.name; }
  get originalName(): string { return this.w.shard.originalName; }
  get shape(): number[] { return this.w.shape.slice(); }
  get dtype(): string { return 'float32'; }
  get trainable(): boolean { return this.w.shard.trainable; }
  set trainable(t: boolean) { this.w.shard.trainable = t; }

  read(): tf.Tensor {
    return gather([this.w])[0];
  }

  write(value: tf.Tensor): this {
    const { w } = this;
    if (value.size !== w.count || value.shape.length !== w.shape.length || value.shape.some((d, i) => d !== w.shape[i])) {
      throw new Error(`Shape mismatch: ${JSON.stringify(w.shape)} vs. ${JSON.stringify(value.shape)} (sharded weight '${w.name}')`);
    }
    const values = value.dataSync() as Float32Array;
    const block = tf.tensor1d(values.subarray(w.begin, w.end), 'float32');
    w.shard.val.assign(block);
    block.dispose();
    return this;
  }

  dispose(): void {
    this.w.shard.dispose();
  }
}

/** Allgathers each weight (all submitted, then waited for) into a tensor of its full shape. */
export function gather(weights: ShardedWeight[]): tf.Tensor[] {
  return finishGather(weights, startGather(weights));
}

/** Starts the allgather of each weight, in one batch. */
export function startGather(weights: ShardedWeight[]): Array<Work<Float32Array>> {
  return weights.map((w) => hora.allgather(w.shard.val.dataSync() as Float32Array, { name: `zero3 ${w.name}` }));
}

/** Waits for the allgathers startGather started; each weight as a tensor of its full shape. */
export function finishGather(weights: ShardedWeight[], works: Array<Work<Float32Array>>): tf.Tensor[] {
  return works.map((work, i) => {
    const full = work.wait();
    const w = weights[i];
    if (full.length !== w.count) {
      throw new HoraError('ERR_MISMATCH', `DistributedOptimizer (shard: 'weights'): the allgather of '${w.name}' gave ${full.length} values, ` +
        `the weight has ${w.count}: every rank must run the same model through the same steps`);
    }
    return tf.tensor(full, w.shape, 'float32');
  });
}

/** A sharded layer: what its forward and backward gather. */
export type ShardedLayer = { readonly name: string; readonly weights: ShardedWeight[] };

/** The tensor data a variable holds now (tfjs gives a variable new data at each assign). */
export const dataOf = (w: ShardedWeight): unknown => (w.shard.val as unknown as { dataId: unknown }).dataId;
