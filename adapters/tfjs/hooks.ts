/**
 * Gradient-ready hooks: runs tfjs's backward pass and reports each trainable variable's gradient the
 * moment it is final, while the pass goes on computing the layers below.
 *
 * tfjs has no public per-variable hook, so this follows the engine's tape. When the forward function has
 * returned, the tape (tf.engine().state.activeTape) holds every op the pass will walk back through, and
 * each node's `gradient` function is still the one the backward pass will call (the engine copies nodes
 * only after the forward function returns). Each node with a followed variable among its inputs gets a
 * wrapper, and the wrappers learn, with no first step to learn from, when a gradient is final: a
 * variable's last contribution comes from the node that used it first (among the nodes that lead to the
 * loss, the only ones the pass visits), because the pass walks the tape from the last node back. When the
 * pass reaches a node older than a variable's first use, nothing can add to that variable any more.
 *
 * Why not the other places one could hook:
 * - the gradient registry (tf.getGradient / registerGradient) is per kernel and hands a gradient
 *   function its saved tensors, not its inputs, so it cannot tell which input is a variable; custom
 *   gradients (tf.customGrad) never pass through it;
 * - counting each variable's uses on a first step, as DDP does before it rebuilds its buckets, still needs
 *   a hook to see the uses, and goes wrong when a later step uses a variable a different number of
 *   times; reading the tape of each step costs one pass over it and is exact for that step.
 *
 * Within a node the wrapper computes the variables' gradients first (each is a pure function of the
 * node's output gradient and saved tensors, so the order changes no value) and hands them over before
 * tfjs computes the gradient of the layer's input: a dense layer's weight gradient then travels while
 * the layers below are still being computed.
 *
 * Values are read through dataSync() only. A variable used more than once is summed here in the order
 * tfjs sums it (float32 addition, the same rounding as tfjs's add on every backend), so the reported
 * gradient is bit for bit the one tfjs returns. A variable that no wrapper saw (the loss is the variable
 * itself, or the engine no longer keeps a tape where this looks) is missing from `followed`: the caller
 * reads it after the pass, as without hooks.
 */
import { tf } from './framework';

type Thunks = Record<string, () => tf.Tensor>;

/** The parts of a tfjs-core tape node (engine.ts) this reads. */
interface TapeNode {
  id: number;
  inputs: Record<string, tf.Tensor>;
  outputs?: tf.Tensor[];
  gradient?: (dys: tf.Tensor[]) => Thunks;
}

export interface GradientListener {
  /** The forward function returned: the backward pass starts now. */
  forwardEnded(): void;
  /**
   * A variable's gradient is final. `values` may be the backend's own storage of the tensor: read it
   * during the call, never write to it, never keep it.
   */
  ready(name: string, values: Float32Array): void;
}

export interface HookedGradients {
  value: tf.Scalar;
  grads: tf.NamedTensorMap;
  /** Variables whose gradients went to ready() (the others, if any, were not followed). */
  followed: Set<string>;
}

/** The engine's tape of the running pass, or null where this version of tfjs keeps none we can read. */
function activeTape(): TapeNode[] | null {
  const state = (tf.engine() as unknown as { state?: { activeTape?: unknown } }).state;
  const tape = state?.activeTape;
  return Array.isArray(tape) ? (tape as TapeNode[]) : null;
}

/**
 * The nodes whose outputs lead to `y`: the only ones the backward pass visits. Each op also leaves nodes
 * on the tape whose outputs nothing uses (an op's scope records its inputs as it enters), and a variable
 * is often one of their inputs; counted as uses, they would hold its gradient back until the pass had
 * gone below them, after the layer's input gradient. A tape whose nodes say nothing of their outputs
 * counts every node.
 */
function nodesLeadingTo(tape: TapeNode[], y: tf.Tensor): Set<TapeNode> {
  const needed = new Set<number>([y.id]);
  const onPath = new Set<TapeNode>();
  for (let i = tape.length - 1; i >= 0; i--) {
    const node = tape[i];
    if (!node || !node.inputs) continue;
    if (Array.isArray(node.outputs) && !node.outputs.some((o) => o && needed.has(o.id))) continue;
    onPath.add(node);
    for (const key of Object.keys(node.inputs)) {
      const input = node.inputs[key];
      if (input) needed.add(input.id);
    }
  }
  return onPath;
}

/** The variables tf.variableGrads(f, varList) differentiates against. */
function trainable(varList?: tf.Variable[]): tf.Variable[] {
  const all = varList ?? Object.values(tf.engine().registeredVariables);
  return all.filter((v) => v.trainable);
}

/** tf.variableGrads(f, varList), telling `listener` of each gradient as soon as it is final. */
export function gradientsWithHooks(f: () => tf.Scalar, varList: tf.Variable[] | undefined, listener: GradientListener): HookedGradients {
  const byId = new Map<number, tf.Variable>();
  for (const v of trainable(varList)) byId.set(v.id, v);
  const followed = new Set<string>();
  /** Followed variables by first use, latest first: the order in which their gradients become final. */
  let order: Array<{ id: number; firstUse: number }> = [];
  let next = 0;
  /** Summed contributions of variables not yet final; `owned` marks sums that are our own copies. */
  const sums = new Map<number, Float32Array>();
  const owned = new Set<number>();

  const finish = (id: number) => {
    const sum = sums.get(id);
    if (!sum) return; // no node on the path to the loss used it: tfjs gives it no gradient either
    sums.delete(id);
    owned.delete(id);
    const name = (byId.get(id) as tf.Variable).name;
    followed.add(name);
    listener.ready(name, sum);
  };
  const finishUsedAfter = (nodeId: number) => {
    while (next < order.length && order[next].firstUse > nodeId) finish(order[next++].id);
  };
  const contribute = (id: number, dx: tf.Tensor) => {
    if (dx.dtype !== 'float32') return; // tfjs rejects such a gradient right after this
    const values = dx.dataSync() as Float32Array;
    let sum = sums.get(id);
    if (!sum) {
      sums.set(id, values);
      return;
    }
    if (!owned.has(id)) {
      sum = sum.slice();
      sums.set(id, sum);
      owned.add(id);
    }
    for (let i = 0; i < sum.length; i++) sum[i] += values[i];
  };

  const wrap = (node: TapeNode, inner: (dys: tf.Tensor[]) => Thunks) => {
    node.gradient = (dys) => {
      const thunks = inner(dys);
      finishUsedAfter(node.id);
      for (const key of Object.keys(node.inputs)) {
        const input = node.inputs[key];
        if (!input || !byId.has(input.id) || typeof thunks[key] !== 'function') continue;
        const dx = tf.tidy(thunks[key]);
        thunks[key] = () => dx;
        contribute(input.id, dx);
      }
      finishUsedAfter(node.id - 1);
      return thunks;
    };
  };

  const hooked = () => {
    const y = f();
    const tape = activeTape();
    if (tape) {
      const onPath = nodesLeadingTo(tape, y);
      const firstUse = new Map<number, number>();
      for (const node of tape) {
        if (!node || typeof node.gradient !== 'function' || !node.inputs || !onPath.has(node)) continue;
        let uses = false;
        for (const key of Object.keys(node.inputs)) {
          const id = node.inputs[key]?.id;
          if (id === undefined || !byId.has(id)) continue;
          uses = true;
          if (!firstUse.has(id)) firstUse.set(id, node.id);
        }
        if (uses) wrap(node, node.gradient);
      }
      order = [...firstUse].map(([id, at]) => ({ id, firstUse: at })).sort((a, b) => b.firstUse - a.firstUse);
    }
    listener.forwardEnded();
    return y;
  };

  const { value, grads } = tf.variableGrads(hooked, varList);
  finishUsedAfter(-Infinity);
  return { value, grads, followed };
}
