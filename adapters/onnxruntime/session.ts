/**
 * DistributedTrainingSession: data-parallel training of ONNX Runtime training artifacts (onnxruntime-web's
 * TrainingSession) over hora. Each rank feeds its own shard; the methods mirror TrainingSession's.
 *
 * Modes.
 * - 'exact' (the default): the training model is rewritten so its gradients are graph outputs (see onnx.ts)
 *   and run as an InferenceSession of the training build. runTrainStep adds this batch's gradient into a
 *   float32 accumulation buffer (or replaces it after lazyResetGrad, like ORT's InPlaceAccumulatorV2);
 *   runOptimizerStep averages that buffer across ranks with one allreduce and applies the optimizer model's
 *   update (AdamW or SGD, attributes read from the model; update.ts) to parameters hora holds. With equal
 *   shards this is one process's step on the whole batch, up to float32 rounding of the average, for AdamW too.
 * - 'average-parameters': public TrainingSession API only. ORT takes its own optimizer step on each rank's
 *   gradient, then the parameters are averaged (getContiguousParameters, allreduce, loadParametersBuffer).
 *   The average of per-rank SGD steps is the SGD step on the averaged gradient, so this is exact for plain SGD
 *   only; with AdamW each rank's moments see only its own gradients, and the result is not that of one process.
 * In both modes rank `root`'s initial parameters are broadcast when the session is created, and every rank's
 * parameters are bit-identical after every optimizer step.
 *
 * Failures. A rank whose runTrainStep or runOptimizerStep throws (a bad feed, an ORT error) first issues a
 * deliberately invalid collective: hora fails the collective the other ranks are in with an error naming that
 * rank, so nobody waits for it. A rank that dies is seen by hora as a lost peer.
 */
import * as fs from 'node:fs';
import * as hora from '../../ts/index';
import { HoraError } from '../../ts/index';
import { checkOptionKeys, knownOptions, steps } from '../../ts/internal';
import { StepFailure } from '../step-failure';
import { GradientModel, OptimizerSpec, gradientModel, readOptimizer } from './onnx';
import { OrtFeeds, OrtInferenceSession, OrtOutputs, OrtTensor, OrtTrainingModule, OrtTrainingSession, loadOrtTraining } from './ort';
import { OptimizerState, applyUpdate, newOptimizerState } from './update';

export type DistributedMode = 'exact' | 'average-parameters';

export interface DistributedTrainingSessionOptions {
  /** The artifacts, as bytes or file paths (as written by onnxruntime.training.artifacts.generate_artifacts). */
  checkpointState: Uint8Array | string;
  trainModel: Uint8Array | string;
  optimizerModel: Uint8Array | string;
  evalModel?: Uint8Array | string;
  /** 'exact' (default) or 'average-parameters' (public API only, exact for SGD only); see the file comment. */
  mode?: DistributedMode;
  /** The module of onnxruntime-web's training build; loaded by path from onnxruntime-web when left out. */
  ort?: OrtTrainingModule;
  /** Exact mode: the learning rate hora's optimizer step uses (ORT's own default, 0.001, when left out). */
  learningRate?: number;
  /** The rank whose initial parameters every rank starts from (default 0). */
  root?: number;
}

const WHERE = 'hora/onnxruntime';
const OPTIONS = knownOptions<DistributedTrainingSessionOptions>({
  checkpointState: true, trainModel: true, optimizerModel: true, evalModel: true, mode: true, ort: true, learningRate: true, root: true,
}, '');
const FAILURE_SIGNAL = 'hora/onnxruntime: a rank failed';
/** ORT's training API starts every optimizer at this learning rate and onnxruntime-web cannot change it. */
const ORT_DEFAULT_LEARNING_RATE = 0.001;

function bytesOf(what: string, v: Uint8Array | string | undefined): Uint8Array | undefined {
  if (v === undefined) return undefined;
  if (typeof v === 'string') return fs.readFileSync(v);
  if (v instanceof Uint8Array) return v;
  throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE}: argument 'options.${what}' must be a Uint8Array or a file path; received ${typeof v}`);
}

export class DistributedTrainingSession {
  /** The steps this session has taken (optimizer steps), identical on every rank. */
  optimizerSteps = 0;
  private resetPending = true;
  private readonly failure = new StepFailure(FAILURE_SIGNAL);
  private trainingSessionStale = false;

  private constructor(
    readonly mode: DistributedMode,
    private readonly ort: OrtTrainingModule,
    private readonly training: OrtTrainingSession,
    private readonly exact: {
      model: GradientModel; session: OrtInferenceSession; optimizer: OptimizerSpec; state: OptimizerState;
      parameters: Float32Array; gradients: Float32Array; learningRate: number;
    } | null,
  ) {}

  /** Creates the session on every rank (a collective: every rank must call it) and broadcasts rank root's parameters. */
  static async create(options: DistributedTrainingSessionOptions): Promise<DistributedTrainingSession> {
    if (options === null || typeof options !== 'object') {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE}: argument 'options' must be an object; received ${options === null ? 'null' : typeof options}`);
    }
    checkOptionKeys(`${WHERE} DistributedTrainingSession.create`, options, OPTIONS);
    const mode = options.mode ?? 'exact';
    if (mode !== 'exact' && mode !== 'average-parameters') {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE}: argument 'options.mode' must be 'exact' or 'average-parameters'; received ${String(mode)}`);
    }
    const learningRate = options.learningRate ?? ORT_DEFAULT_LEARNING_RATE;
    if (!(typeof learningRate === 'number' && Number.isFinite(learningRate) && learningRate > 0)) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE}: argument 'options.learningRate' must be a positive number; received ${String(learningRate)}`);
    }
    if (mode === 'average-parameters' && options.learningRate !== undefined) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE}: options.learningRate applies to mode 'exact' only (ORT's own optimizer step uses its default)`);
    }
    if (!hora.isInitialized()) await hora.init();
    const ort = options.ort ?? loadOrtTraining();
    const trainModel = bytesOf('trainModel', options.trainModel) as Uint8Array;
    const optimizerModel = bytesOf('optimizerModel', options.optimizerModel) as Uint8Array;
    const training = await ort.TrainingSession.create({
      checkpointState: bytesOf('checkpointState', options.checkpointState) as Uint8Array,
      trainModel, evalModel: bytesOf('evalModel', options.evalModel),
      // Exact mode applies the update itself, so ORT never sees the optimizer model (it accepts AdamW only).
      ...(mode === 'average-parameters' ? { optimizerModel } : {}),
    });
    const root = options.root ?? 0;
    const initial = new Float32Array((await training.getContiguousParameters(true)).data as Float32Array);
    await hora.broadcast(initial, { root, inplace: true, name: `${WHERE} initial parameters` });
    if (mode === 'average-parameters') {
      await training.loadParametersBuffer(new Uint8Array(initial.buffer, initial.byteOffset, initial.byteLength), true);
      return new DistributedTrainingSession(mode, ort, training, null);
    }
    const model = gradientModel(trainModel);
    const total = model.parameters.reduce((n, p) => n + p.size, 0);
    if (total !== initial.length) {
      throw new HoraError('ERR_INTERNAL', `${WHERE}: the training model's parameters hold ${total} values but the checkpoint's ${initial.length}`);
    }
    const optimizer = readOptimizer(optimizerModel);
    const session = await ort.InferenceSession.create(model.bytes);
    return new DistributedTrainingSession(mode, ort, training, {
      model, session, optimizer, state: newOptimizerState(optimizer, total),
      parameters: initial, gradients: new Float32Array(total), learningRate,
    });
  }

  /** The inputs a train step needs (the training model's own inputs, without parameters or gradient state). */
  get trainingInputNames(): readonly string[] {
    return this.exact ? this.exact.model.userInputs : this.training.trainingInputNames;
  }

  /** Runs forward and backward on this rank's batch and accumulates its gradient; returns this rank's outputs (loss). */
  async runTrainStep(feeds: OrtFeeds): Promise<OrtOutputs> {
    steps.begin(true);
    try {
      if (!this.exact) return await this.training.runTrainStep(feeds);
      const { model, session, parameters, gradients } = this.exact;
      const inputs: OrtFeeds = { ...feeds };
      for (const p of model.parameters) {
        inputs[p.name] = new this.ort.Tensor('float32', parameters.subarray(p.offset, p.offset + p.size), p.dims);
      }
      const out = await session.run(inputs);
      for (let k = 0; k < model.parameters.length; k++) {
        const p = model.parameters[k];
        const g = out[model.gradientOutputs[k]].data as Float32Array;
        const acc = gradients.subarray(p.offset, p.offset + p.size);
        if (this.resetPending) acc.set(g);
        else for (let i = 0; i < g.length; i++) acc[i] += g[i];
      }
      this.resetPending = false;
      const result: OrtOutputs = {};
      for (const name of model.userOutputs) result[name] = out[name];
      return result;
    } catch (e) {
      throw this.failure.error(e, `${WHERE} runTrainStep (rank ${hora.rank()}, optimizer step ${this.optimizerSteps})`, 'failed in its training step');
    }
  }

  /** Averages the accumulated gradients (exact) or the updated parameters (average-parameters) across ranks. */
  async runOptimizerStep(): Promise<void> {
    try {
      if (this.exact) {
        const { optimizer, state, parameters, gradients, learningRate } = this.exact;
        await this.failure.collective(hora.allreduce(gradients, { op: 'avg', inplace: true, name: `${WHERE} gradients` }));
        applyUpdate(optimizer, state, parameters, gradients, learningRate);
        this.trainingSessionStale = true;
      } else {
        await this.training.runOptimizerStep();
        const params = new Float32Array((await this.training.getContiguousParameters(true)).data as Float32Array);
        await this.failure.collective(hora.allreduce(params, { op: 'avg', inplace: true, name: `${WHERE} parameters` }));
        await this.training.loadParametersBuffer(new Uint8Array(params.buffer, params.byteOffset, params.byteLength), true);
      }
      this.optimizerSteps += 1;
      steps.end();
    } catch (e) {
      throw this.failure.error(e, `${WHERE} runOptimizerStep (rank ${hora.rank()}, optimizer step ${this.optimizerSteps})`, 'failed in its training step');
    }
  }

  /** The next runTrainStep replaces the accumulated gradients instead of adding to them (as in ORT). */
  async lazyResetGrad(): Promise<void> {
    if (this.exact) this.resetPending = true;
    else await this.training.lazyResetGrad();
  }

  /** The trainable parameters in ORT's contiguous order (a copy), identical on every rank. */
  async getContiguousParameters(): Promise<OrtTensor> {
    if (this.exact) return new this.ort.Tensor('float32', this.exact.parameters.slice(), [this.exact.parameters.length]);
    return this.training.getContiguousParameters(true);
  }

  /** Runs the eval model on this rank's batch with the current parameters. */
  async runEvalStep(feeds: OrtFeeds): Promise<OrtOutputs> {
    await this.syncTrainingSession();
    return this.training.runEvalStep(feeds);
  }

  async release(): Promise<void> {
    if (this.exact) await this.exact.session.release();
    await this.training.release();
  }

  /** In exact mode the parameters live in hora; ORT's session gets them only when it needs them (eval). */
  private async syncTrainingSession(): Promise<void> {
    if (!this.exact || !this.trainingSessionStale) return;
    const p = this.exact.parameters;
    await this.training.loadParametersBuffer(new Uint8Array(p.buffer, p.byteOffset, p.byteLength), true);
    this.trainingSessionStale = false;
  }
}
