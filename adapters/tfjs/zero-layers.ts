/**
 * Which layers ZeRO stage 3 (zero-weights.ts) shards, and the check of a model before it is sharded: the layer
 * classes whose call() reads each weight through one property, why others are refused, and which models
 * are sharded already. The reasons are in docs/zero-weights.md.
 */
import type { tf } from './framework';
import { HoraError, describeValue } from '../../ts/internal';

/** The layer classes stage 3 shards, and the properties through which their call() reads their weights. */
const SHARDABLE: Readonly<Record<string, readonly string[]>> = {
  Dense: ['kernel', 'bias'],
  Conv1D: ['kernel', 'bias'],
  Conv2D: ['kernel', 'bias'],
  Conv3D: ['kernel', 'bias'],
};

/** Why some layer classes with weights are not sharded (the rest: their call() reads weights otherwise). */
const REFUSED: Readonly<Record<string, string>> = {
  BatchNormalization: 'it updates its moving mean and variance inside call(), and its statistics are per feature',
  LayerNormalization: 'not sharded yet (its weights are per feature, small beside the layers around it)',
  LSTM: 'a recurrent layer reads its cell\'s weights at every time step, inside a loop tfjs runs',
  GRU: 'a recurrent layer reads its cell\'s weights at every time step, inside a loop tfjs runs',
  SimpleRNN: 'a recurrent layer reads its cell\'s weights at every time step, inside a loop tfjs runs',
  Embedding: 'not sharded yet (its gradient is a scatter of rows)',
};

export type LayerVariable = {
  name: string; originalName: string; shape: number[]; dtype: string; trainable: boolean;
  constraint?: unknown; read(): tf.Tensor; write(v: tf.Tensor): unknown; dispose(): void;
};
/** What sharding needs of a tfjs-layers Layer. */
export type Layer = {
  [property: string]: unknown;
  name: string; built: boolean; getClassName(): string;
  weights: LayerVariable[]; trainableWeights: LayerVariable[]; nonTrainableWeights: LayerVariable[]; _trainableWeights: LayerVariable[];
  call(inputs: tf.Tensor | tf.Tensor[], kwargs: Record<string, unknown>): tf.Tensor | tf.Tensor[];
};
/** What sharding needs of a model: tf.LayersModel's layers and weight lists. */
export type Model = {
  layers: Layer[]; trainableWeights: LayerVariable[]; nonTrainableWeights: LayerVariable[];
  collectedTrainableWeights?: LayerVariable[];
  /** A tf.Sequential's inner model. */
  model?: Model;
  /** The model's inputs (a shadow pass feeds zeros of their shapes). */
  inputs?: Array<{ shape: Array<number | null>; dtype?: string }>;
  apply?(inputs: tf.Tensor | tf.Tensor[], kwargs?: Record<string, unknown>): unknown;
};

/** The models stage 3 has sharded. */
const shardedModels = new WeakSet<object>();

/** Marks `model` as sharded by stage 3 (a second DistributedOptimizer then refuses it, and ElasticState keeps its blocks). */
export function markWeightSharded(model: object): void {
  shardedModels.add(model);
}

/** Whether `model`'s weights are sharded by a DistributedOptimizer with shard: 'weights'. */
export function isWeightSharded(model: unknown): boolean {
  return typeof model === 'object' && model !== null && shardedModels.has(model);
}

function refuse(argument: string, expected: string, received: unknown): HoraError {
  return new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer: option '${argument}' must be ${expected}; received ${describeValue(received)}`);
}

/**
 * The model's layers with weights, each with the properties to shard; an error naming the first layer that
 * cannot be sharded, before anything changes (so every rank, with the same model, refuses it alike).
 */
export function checkModel(model: Model): Array<[Layer, readonly string[]]> {
  if (model === null || typeof model !== 'object' || !Array.isArray((model as Model).layers) || !('trainableWeights' in model)) {
    throw refuse('model', "a tf.LayersModel (shard: 'weights' shards its layers' weights)", model);
  }
  if (isWeightSharded(model)) {
    throw refuse('model', "a model not sharded yet (this one's weights are sharded by another DistributedOptimizer)", model);
  }
  const out: Array<[Layer, readonly string[]]> = [];
  for (const layer of model.layers) {
    const className = layer.getClassName();
    if (layer.weights.length === 0) continue;
    const own = layer._trainableWeights ?? [];
    const props = SHARDABLE[className];
    const why = (reason: string) => new HoraError('ERR_INVALID_ARGUMENT',
      `DistributedOptimizer: shard: 'weights' cannot shard layer '${layer.name}' (${className}): ${reason}. ` +
      `Sharded layers: ${Object.keys(SHARDABLE).join(', ')}; see docs/zero-weights.md`);
    if (!props) {
      if (Array.isArray((layer as unknown as Model).layers)) throw why('a nested model; build the model from its layers instead');
      throw why(REFUSED[className] ?? 'its call() does not read its weights through properties that stage 3 can point at the gathered weights');
    }
    if (!layer.built) throw why('it is not built; build the model (give the first layer an inputShape, or call model.build()) first');
    const vars = props.map((p) => layer[p] as LayerVariable | null | undefined).filter((v): v is LayerVariable => v != null);
    const names = props.filter((p) => layer[p] != null);
    if (vars.length !== own.length || own.some((w) => !vars.includes(w)) || layer.nonTrainableWeights.length > 0) {
      throw why('its weights are not the ones its class reads in call()');
    }
    for (const p of names) {
      if (layer[`${p}Regularizer`] != null) throw why(`a ${p}Regularizer needs the full ${p} outside call()`);
      if ((layer[p] as LayerVariable).constraint != null || layer[`${p}Constraint`] != null) throw why(`a ${p}Constraint needs the full ${p} after each update`);
      if ((layer[p] as LayerVariable).dtype !== 'float32') throw why(`its ${p} is ${(layer[p] as LayerVariable).dtype}; only float32 weights are sharded`);
    }
    out.push([layer, names]);
  }
  return out;
}
