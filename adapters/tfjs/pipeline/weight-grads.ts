/**
 * Dense kernels' gradients computed once per batch instead of once per micro-batch
 * (pipeline option deferWeightGradients).
 *
 * A Dense layer's kernel gradient over a batch is the sum over its micro-batches of
 * input_k^T x outputGradient_k, which equals concat(inputs)^T x concat(outputGradients): one product with
 * the whole batch as its inner dimension instead of m products with a micro-batch's, and no running sum of
 * m kernel-sized results. tfjs's cpu backend pays 9-12% more for a batch cut into 8 micro-batches than for
 * the whole batch, most of it in those m small products (docs/pipeline.md, "Weight gradients once per
 * batch").
 *
 * The backward of a micro-batch then computes only what the previous stage waits for (the input's
 * gradient) and the other weights' gradients; each Dense layer's input and output gradient is kept until
 * the batch's last backward, and the kernel gradients are computed then. That is the weight half of a
 * zero-bubble schedule's split backward: the last stage computes them while the stages before it run their
 * last backwards.
 *
 * How: before a recorded tape is replayed, the node of each Dense kernel's product (BatchMatMul, or the
 * fused product tfjs records for a linear Dense) gets a stand-in scalar in place of the kernel and a
 * gradient function that keeps (input, output gradient) and returns a zero for the stand-in. The stand-ins
 * are among the gradient call's xs, so the replay reaches every such node even on the first stage, whose
 * input needs no gradient. A kernel that also reaches the loss another way (a regularizer) keeps that part
 * of its gradient from the replay, and the deferred part is added to it.
 */
import { tf } from '../framework';
import type { Layer } from './layers';

/** A tape node, as tfjs-core's engine records it. */
export interface TapeNode {
  kernelName: string;
  inputs: Record<string, tf.Tensor>;
  outputs: tf.Tensor[];
  saved?: tf.Tensor[];
  gradient?: (dys: Array<tf.Tensor | null>) => Record<string, () => tf.Tensor>;
}

type DataId = unknown;
const dataIdOf = (t: tf.Tensor): DataId => (t as unknown as { dataId: DataId }).dataId;

/** tfjs-core names a fused product's tape node after the op's scope. */
const FUSED_MATMUL = 'fusedMatMul__op';

interface Kernel {
  /** Position in the stage's trainable variables. */
  index: number;
  shape: [number, number];
  /** Per replayed micro-batch: the layer's input and its output's gradient, both [rows, units]. */
  inputs: tf.Tensor2D[];
  grads: tf.Tensor2D[];
}

export class DeferredKernels {
  private readonly kernels: Kernel[] = [];
  /** Bytes of the inputs and output gradients kept for the batch's kernel gradients. */
  bytes = 0;

  /**
   * The Dense layers' kernels among `layers`, found in `variables` (the stage's trainable variables):
   * tfjs-layers' Dense multiplies its input by its kernel untransposed, the one case handled.
   */
  constructor(layers: Layer[], private readonly variables: tf.Variable[]) {
    for (const layer of layers) {
      if (layer.getClassName() !== 'Dense' || !layer.trainable) continue;
      const kernel = (layer as unknown as { kernel?: { read(): tf.Tensor } }).kernel?.read();
      if (!kernel || kernel.rank !== 2) continue;
      const index = variables.indexOf(kernel as tf.Variable);
      if (index < 0) continue;
      this.kernels.push({ index, shape: kernel.shape as [number, number], inputs: [], grads: [] });
    }
  }

  get size(): number {
    return this.kernels.length;
  }

  /**
   * Rewires `tape` (a recorded forward, not yet replayed) so that its replay keeps each kernel product's
   * input and output gradient instead of computing the kernel's gradient. Returns the stand-ins, to be
   * added to the replay's xs and disposed after it (their gradients are zeros).
   */
  rewire(tape: TapeNode[]): tf.Scalar[] {
    const standIns: tf.Scalar[] = [];
    // A tape names a kernel by its data (the fused product reads a reshape of it), and a variable's data
    // changes with every update: look them up as they are now.
    const byData = new Map(this.kernels.map((k) => [dataIdOf(this.variables[k.index]), k]));
    for (const node of tape) {
      const plan = this.planFor(node, byData);
      if (!plan) continue;
      const { key, kernel, fused } = plan;
      const standIn = tf.keep(tf.scalar(0));
      standIns.push(standIn);
      node.inputs = { ...node.inputs, [key]: standIn };
      const saved = node.saved as tf.Tensor[];
      const original = node.gradient as NonNullable<TapeNode['gradient']>;
      const zero = () => tf.scalar(0);
      node.gradient = (dys) => {
        const dy = dys[0];
        if (dy) this.keep(kernel, saved[0], dy);
        if (!fused) return { ...original(dys), b: zero };
        // The fused product tfjs records under a tape is linear (it fuses nothing else while recording),
        // so the output's gradient is the product's; saved is [a, b, product, bias?], all [1, rows, n].
        const [, b3, y3, bias] = saved;
        const d3 = dy ? tf.reshape(dy, y3.shape) : tf.zerosLike(y3);
        const grads: Record<string, () => tf.Tensor> = { 0: () => tf.matMul(d3, b3, false, true), 1: zero };
        if (bias) grads[2] = () => tf.reshape(tf.sum(d3, [0, 1]), bias.shape);
        return grads;
      };
    }
    return standIns;
  }

  /** The node's kernel input and how to handle it, or null to leave the node as it is. */
  private planFor(node: TapeNode, byData: Map<DataId, Kernel>): { key: string; kernel: Kernel; fused: boolean } | null {
    if (!node.gradient || !node.saved) return null;
    if (node.kernelName === 'BatchMatMul') {
      const { a, b } = node.inputs;
      const kernel = b ? byData.get(dataIdOf(b)) : undefined;
      if (!kernel || !a || a.rank !== 2 || b.rank !== 2 || node.saved.length !== 2) return null;
      return { key: 'b', kernel, fused: false };
    }
    if (node.kernelName === FUSED_MATMUL) {
      const keys = Object.keys(node.inputs);
      const b = node.inputs[1];
      const kernel = b ? byData.get(dataIdOf(b)) : undefined;
      if (!kernel || keys.some((k) => k !== '0' && k !== '1' && k !== '2')) return null;
      const [a3, b3, y3, bias] = node.saved;
      const [rows, inner] = [a3?.shape[1], a3?.shape[2]];
      const units = kernel.shape[1];
      if (!a3 || !b3 || !y3 || a3.rank !== 3 || a3.shape[0] !== 1 || inner !== kernel.shape[0]) return null;
      if (y3.rank !== 3 || y3.shape[1] !== rows || y3.shape[2] !== units) return null;
      if (('2' in node.inputs) !== (bias !== undefined) || (bias && (bias.rank !== 1 || bias.shape[0] !== units))) return null;
      return { key: '1', kernel, fused: true };
    }
    return null;
  }

  private keep(kernel: Kernel, input: tf.Tensor, dy: tf.Tensor): void {
    const [inner, units] = kernel.shape;
    kernel.inputs.push(tf.keep(tf.reshape(input, [-1, inner])));
    kernel.grads.push(tf.keep(tf.reshape(dy, [-1, units])));
    this.bytes += (input.size + dy.size) * 4;
  }

  /**
   * The batch's kernel gradients, one product each, handed to `accumulate` (by variable index); frees
   * what was kept. Nothing to do when no micro-batch was replayed since the last call.
   */
  finish(accumulate: (index: number, grad: tf.Tensor) => void): void {
    for (const kernel of this.kernels) {
      if (kernel.inputs.length === 0) continue;
      const grad = tf.tidy(() => {
        const a = kernel.inputs.length === 1 ? kernel.inputs[0] : tf.concat(kernel.inputs, 0);
        const d = kernel.grads.length === 1 ? kernel.grads[0] : tf.concat(kernel.grads, 0);
        return tf.matMul(a, d, true, false);
      });
      this.release(kernel);
      accumulate(kernel.index, grad);
      grad.dispose();
    }
    this.bytes = 0;
  }

  /** Frees what was kept for a batch that will not finish. */
  discard(): void {
    for (const kernel of this.kernels) this.release(kernel);
    this.bytes = 0;
  }

  private release(kernel: Kernel): void {
    kernel.inputs.forEach((t) => t.dispose());
    kernel.grads.forEach((t) => t.dispose());
    kernel.inputs = [];
    kernel.grads = [];
  }
}
