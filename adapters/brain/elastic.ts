/**
 * ElasticState for brain.js: a hora.elastic.State that also holds a NeuralNetwork's weights, biases and
 * update-rule state (momentum changes; Adam's moments and step count), so that distributed training
 * rolls back and re-syncs with the rest of the state.
 *
 * Why this is enough for distributed(net) to stay correct across a reset: every rank passes the whole
 * data set and trainAsync takes this rank's share of each global batch from hora.rank() and hora.size()
 * at each call, so after the world re-forms the next call shards by the new world, and a global batch is
 * the same samples whatever the number of ranks. What a reset must give back is the net and the count of
 * passes done; both are here.
 */
import * as hora from '../../ts/index';
import { HoraError, describeValue, current, keepCopy, rankList } from '../../ts/internal';
import { BrainNeuralNetwork, ensureAdamState, hasAdamState, stateArrays } from './net';

const WHERE = 'hora/brain';

function isInitialized(net: BrainNeuralNetwork): boolean {
  return Array.isArray(net.sizes) && net.sizes.length >= 2 && Array.isArray(net.weights) && net.weights.length === net.sizes.length;
}

/** Adam's moments back to brain's starting zeros. */
function zeroAdam(net: BrainNeuralNetwork): void {
  for (let layer = 1; layer <= net.outputLayer; layer++) {
    for (const a of [...net.changesLow![layer], ...net.changesHigh![layer], net.biasChangesLow![layer], net.biasChangesHigh![layer]]) a.fill(0);
  }
}

/** Sizes and Adam, as numbers that ranks compare (the sizes hashed exactly in float64). */
function layoutOf(net: BrainNeuralNetwork): [sizes: number, adam: number, iterations: number] {
  let h = 0;
  for (const s of net.sizes as number[]) h = (h * 1009 + s + 1) % 2 ** 40;
  return [h, hasAdamState(net) ? 1 : 0, net.iterations ?? 0];
}

/**
 * `new ElasticState(net, {iterations: 0, ...})`: the net (initialized: sizes set and weights made, by
 * net.initialize() or a first training) plus fields as hora.elastic.State takes them. `iterations`
 * (default 0) is the count of passes over the data done, for the training loop to go on from.
 */
export class ElasticState extends hora.elastic.State {
  declare iterations: number;
  declare readonly net: BrainNeuralNetwork;
  #saved: Float32Array[] = [];
  #adam = false;
  /** net.iterations (Adam's step count); undefined where brain has not set it. */
  #adamSteps: number | undefined = undefined;

  constructor(net: BrainNeuralNetwork, fields: Record<string, unknown> = {}) {
    if (fields === null || typeof fields !== 'object' || Array.isArray(fields)) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ElasticState: argument 'fields' must be an object of named values; received ${describeValue(fields)}`);
    }
    if ('net' in fields) throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ElasticState: field 'net' has the name of an ElasticState property; rename it`);
    const all = { iterations: 0, ...fields };
    if (!Number.isSafeInteger(all.iterations) || all.iterations < 0) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ElasticState: argument 'fields.iterations' must be an integer >= 0; received ${describeValue(all.iterations)}`);
    }
    super(all);
    if (net === null || typeof net !== 'object' || !isInitialized(net)) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ElasticState: argument 'net' must be an initialized brain.js NeuralNetwork ` +
        `(set net.sizes and call net.initialize(), or train it once); received ${net && typeof net === 'object' ? 'a net without weights' : describeValue(net)}`);
    }
    Object.defineProperty(this, 'net', { value: net, enumerable: false });
    this.#save();
  }

  /** Copies the net's arrays into ones kept from one commit to the next (allocated again only if the layout changed). */
  #save(): void {
    const adam = hasAdamState(this.net);
    const arrays = stateArrays(this.net, adam);
    if (this.#saved.length !== arrays.length) this.#saved = [];
    arrays.forEach((a, i) => { this.#saved[i] = keepCopy(a, this.#saved[i]); });
    this.#adam = adam;
    this.#adamSteps = this.net.iterations;
  }

  async commit(): Promise<void> {
    this.#save();
    await super.commit();
  }

  /**
   * Back to the last commit, written into the net's own arrays. Adam's moments made since a commit
   * without them are zeroed (brain starts Adam from zeros and step 0, so that is the committed state).
   */
  restore(): void {
    super.restore();
    const net = this.net;
    if (!this.#adam && hasAdamState(net)) zeroAdam(net);
    const arrays = stateArrays(net, this.#adam);
    if (arrays.length !== this.#saved.length || arrays.some((a, i) => a.length !== this.#saved[i].length)) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ElasticState.restore: the net's layers changed since the commit`);
    }
    arrays.forEach((a, i) => a.set(this.#saved[i]));
    net.iterations = this.#adamSteps;
  }

  /**
   * Gives every rank root's net (weights, biases, momentum, Adam's moments and step count) and fields, and
   * makes them the rollback point everywhere. Nets of different sizes: ERR_MISMATCH on every rank.
   */
  async sync(root = 0): Promise<void> {
    await super.sync(root);
    const w = current('elastic.ElasticState.sync');
    if (w.size > 1) {
      const mine = layoutOf(this.net);
      const all = await hora.allgather(Float64Array.from(mine), { name: `${WHERE} ElasticState.sync layout` });
      const [sizes, adam, steps] = [all[3 * root], all[3 * root + 1], all[3 * root + 2]];
      const bad: number[] = [];
      for (let r = 0; r < w.size; r++) if (all[3 * r] !== sizes) bad.push(r);
      if (bad.length > 0) {
        throw new HoraError('ERR_MISMATCH', `${WHERE} ElasticState.sync: the net of ${rankList(bad)} ` +
          `has other layer sizes than root ${root}'s (this rank: [${this.net.sizes}])`, w.rank);
      }
      if (adam && !hasAdamState(this.net)) ensureAdamState(this.net);
      const arrays = stateArrays(this.net, adam === 1);
      const flat = new Float32Array(arrays.reduce((n, a) => n + a.length, 0));
      let at = 0;
      for (const a of arrays) { flat.set(a, at); at += a.length; }
      await hora.broadcast(flat, { root, inplace: true, name: `${WHERE} ElasticState.sync net` });
      at = 0;
      for (const a of arrays) { a.set(flat.subarray(at, at + a.length)); at += a.length; }
      if (!adam && hasAdamState(this.net)) zeroAdam(this.net);
      if (adam === 1 || this.net.iterations !== undefined) this.net.iterations = steps;
    }
    this.#save();
  }
}
