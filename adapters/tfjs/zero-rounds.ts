/**
 * The rounds of sharded DistributedOptimizers on uneven data (ZeRO stage 3, zero-weights.ts; stages 1 and 2,
 * optimizer.ts with zero.ts; docs/zero-weights.md and docs/zero.md, "Uneven data"): every pass begins with a
 * round, an allgather of whether each rank steps and with how many samples, from which every rank alike takes
 * the pass's weighting (agree): stage 3's gradient scale and weight in the step, stages 1 and 2's sample count
 * for DistributedOptimizer's own sample weighting. A rank whose data has ended (joinEpoch) takes part in the
 * other ranks' rounds and serves each of their passes with a shadow pass on zeros, since every step needs
 * every rank's blocks (of the weights, or of the optimizer state) and updates every block.
 */
import { tf } from './framework';
import * as hora from '../../ts/index';
import { HoraError } from '../../ts/internal';
import type { ShardingOwner } from './zero-blocks';
import type { Model } from './zero-layers';

/** The name of a pass's round (PassRounds.startPass), in every sharded mode. */
const ROUND = 'zero round';

/** One DistributedOptimizer's rounds with the other ranks, a pass each, and this rank's scale and weight of the pass agreed. */
export class PassRounds {
  /** The owner's shard option, for messages. */
  private readonly shard: string;
  /** The agreement of the coming pass (its step round) has run; the pass has not yet applied. */
  private passAgreed = false;
  /** What this pass's gradients are multiplied by before the reduce-scatter (agree()): 1 when every rank steps alike. */
  gradientScale = 1;
  /** The weight of this pass in its step (the pass's samples over all ranks, or 1 with no counts); k > 1 sums them. */
  private passWeight = 1;
  /** This rank's samples in the pass agreed (null: not counted). */
  private passSamples: number | null = null;
  /**
   * Stages 1 and 2: this rank's count in DistributedOptimizer's sample weighting of the pass agreed: its
   * samples where the stepping ranks gave counts, 1 where they gave none and some rank is in joinEpoch (an
   * average over the ranks with data), 0 on a rank in joinEpoch, null where every rank steps without a count.
   */
  private sampleWeight: number | null = null;
  /** The highest rank that stepped in the latest round with a rank stepping, this epoch (joinEpoch's result); -1 for none. */
  private lastStepper = -1;

  /**
   * `model`: the model a shadow pass runs (stage 3's; null for stages 1 and 2, whose joinEpoch gives it);
   * `variables`: the variables a shadow pass trains (stage 3: the trainable shard variables; else the model's trainable weights).
   */
  constructor(private readonly owner: ShardingOwner, private readonly model: Model | null,
    private readonly variables: (model: Model) => tf.Variable[] = (m) => m.trainableWeights.map((w) => w.read() as tf.Variable)) {
    this.shard = (owner as { shard?: string }).shard ?? 'weights';
  }

  /**
   * The start of a pass of this rank's data (DistributedOptimizer.setSampleCount, or computeGradients where
   * no count came first): the pass's round, an allgather of [1, samples, 1 if counted] from every rank that
   * steps and [0, 0, 0] from every rank in joinEpoch, so that a rank whose data has ended serves the pass
   * (shadowPass). Blocks for the round. Once per pass: a second call before the pass applies changes nothing
   * when it gives the same count.
   */
  startPass(samples: number | null): void {
    if (hora.size() === 1) return;
    if (this.passAgreed) {
      if (samples === null || samples === this.passSamples) return;
      throw new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer.setSampleCount (shard: '${this.shard}'): argument 'samples' was ${this.passSamples} ` +
        `for the coming pass, agreed with the other ranks already; received ${samples} before that pass ran`);
    }
    const round = hora.allgather(Float64Array.of(1, samples ?? 0, samples === null ? 0 : 1), { name: ROUND }).wait();
    this.passSamples = samples;
    this.agree(round, samples);
  }

  /**
   * A round's outcome, alike on every rank: how many ranks step; this rank's gradient scale for the pass
   * (op 'avg': with every stepping rank's count, n_r x N / sum(n), so the reduce-scatter's average over the
   * N ranks is the average over the pass's samples; without counts, N / (ranks stepping), an average over
   * the ranks that have data; 0 on a rank in joinEpoch); the pass's weight in its step.
   */
  private agree(round: Float64Array, samples: number | null): number {
    if (round.length !== 3 * hora.size()) {
      // A rank in hora.join() serves the round with nothing: every rank that took part got the same short round.
      throw new HoraError('ERR_MISMATCH', `DistributedOptimizer (shard: '${this.shard}'): the round of a pass brought ${round.length / 3} of ${hora.size()} ranks: ` +
        'a rank took no part (it joined: hora.join()). A sharded optimizer needs every rank in every step; at the end of a rank\'s data call ' +
        'joinEpoch(model, optimizer) (model.fit and fitDataset do), which serves the other ranks\' steps, not hora.join()');
    }
    const size = round.length / 3;
    let stepping = 0, counted = 0, total = 0, last = -1;
    for (let r = 0; r < size; r++) {
      if (round[3 * r] !== 1) continue;
      stepping += 1;
      counted += round[3 * r + 2];
      total += round[3 * r + 1];
      last = r;
    }
    if (stepping === 0) return 0;
    this.lastStepper = last;
    if (counted !== 0 && counted !== stepping) {
      const none = Array.from({ length: size }, (_, r) => r).filter((r) => round[3 * r] === 1 && round[3 * r + 2] === 0);
      throw new HoraError('ERR_MISMATCH', `DistributedOptimizer (shard: '${this.shard}'): rank${none.length > 1 ? 's' : ''} ${none.join(', ')} ` +
        'began a pass without a sample count where other ranks gave one (setSampleCount); every rank must give counts alike');
    }
    this.passAgreed = true;
    const mine = samples === null ? 0 : samples;
    const stepsHere = round[3 * hora.rank()] === 1;
    if (this.owner.op !== 'avg') this.gradientScale = 1;
    else if (counted === stepping) this.gradientScale = !stepsHere || total === 0 ? 0 : (mine * size === total ? 1 : mine * size / total);
    else this.gradientScale = !stepsHere ? 0 : (stepping === size ? 1 : size / stepping);
    this.passWeight = counted === stepping && this.owner.op === 'avg' ? total : 1;
    this.sampleWeight = !stepsHere ? 0 : counted === stepping ? mine : stepping === size ? null : 1;
    return stepping;
  }

  /** computeGradients: a pass that no setSampleCount began begins here, without a count. */
  beginPassIfNot(): void {
    if (!this.passAgreed) this.startPass(null);
  }

  /**
   * Stages 1 and 2 (DistributedOptimizer's setSampleCount, computeGradients, applyGradients): begins the pass
   * with `samples` where no round agreed it yet, and gives the count the pass weighs in the optimizer's sample
   * weighting (sampleWeight): alike in kind on every rank, so every rank sends the step's count, or none does.
   * At one rank (no round) `samples` itself.
   */
  passCount(samples: number | null): number | null {
    if (!this.passAgreed) this.startPass(samples);
    return this.passAgreed ? this.sampleWeight : samples;
  }

  /**
   * joinEpoch with a sharded optimizer: this rank's data for the epoch has ended. Every step needs every rank's
   * blocks, and every block must be updated, so instead of hora.join() this rank takes the rounds of the
   * other ranks' passes with [0, 0, 0], and serves each with a shadow pass: the model's forward and backward
   * on zeros, with a loss times 0, so its collectives are those of the other ranks' pass and its gradient is
   * 0 (stages 1 and 2: its sample count 0 too); the update of its blocks with the gradient the other ranks
   * reduced. Ends on every rank at the round where no rank steps. Resolves to the highest rank that stepped
   * last (the one that took every step). `model`: the model to run (stages 1 and 2; stage 3 has its own).
   */
  async joinEpoch(model: Model | null = this.model): Promise<number> {
    const size = hora.size();
    if (size === 1) return 0;
    if (this.passAgreed) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `joinEpoch (shard: '${this.shard}'): a pass was begun (setSampleCount) and has not run; ` +
        'call joinEpoch after the last pass of the epoch');
    }
    for (;;) {
      const round = await hora.allgather(Float64Array.of(0, 0, 0), { name: ROUND });
      if (this.agree(round, null) === 0) break;
      try {
        this.shadowPass(model);
      } catch (e) {
        this.endPass();
        throw e;
      }
    }
    const last = this.lastStepper;
    this.lastStepper = -1;
    return last < 0 ? size - 1 : last;
  }

  /** One pass of the model on zeros, its loss times 0: the collectives of a pass, a gradient of 0, the update. */
  private shadowPass(model: Model | null): void {
    const inputs = model?.inputs;
    if (!model || !Array.isArray(inputs) || inputs.length === 0 || typeof model.apply !== 'function') {
      throw new HoraError('ERR_INVALID_ARGUMENT', `joinEpoch (shard: '${this.shard}'): the model has no inputs to run a pass on zeros with`);
    }
    const xs = inputs.map((i) => tf.zeros(i.shape.map((d) => d ?? 1), (i.dtype ?? 'float32') as 'float32'));
    const vars = this.variables(model);
    try {
      this.owner.minimize(() => {
        const out = (model.apply as NonNullable<Model['apply']>)(xs.length === 1 ? xs[0] : xs, { training: true }) as tf.Tensor | tf.Tensor[];
        const outs = Array.isArray(out) ? out : [out];
        return tf.addN(outs.map((o) => tf.sum(tf.mul(o, 0)))) as tf.Scalar;
      }, false, vars);
    } finally {
      xs.forEach((x) => x.dispose());
    }
  }

  /** The pass applied (or was forgotten): its weight in its step; the next pass agrees anew. */
  endPass(): number {
    const passWeight = this.passWeight;
    this.passAgreed = false;
    this.gradientScale = 1;
    this.passWeight = 1;
    this.sampleWeight = null;
    return passWeight;
  }
}
