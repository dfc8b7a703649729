/**
 * The slice of onnxruntime-web's training build (1.17 to 1.19.2) that hora/onnxruntime uses, and its loader.
 *
 * hora never imports a framework at load time: the module object is passed in by the user, or loaded here,
 * by path, the first time a session is created, from the application's onnxruntime-web (not a copy beside
 * a linked hora: adapters/application.ts). The package's `exports` hide its training build from Node,
 * so it is required as `onnxruntime-web/dist/ort.training.wasm.min.js` resolved to a file.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { applicationFolders, findFramework, packageFolder } from '../application';

export interface OrtTensor {
  readonly type: string;
  readonly dims: readonly number[];
  readonly data: unknown;
}

export type OrtFeeds = Record<string, OrtTensor>;
export type OrtOutputs = Record<string, OrtTensor>;

export interface OrtTrainingSession {
  readonly trainingInputNames: readonly string[];
  readonly trainingOutputNames: readonly string[];
  runTrainStep(feeds: OrtFeeds): Promise<OrtOutputs>;
  runOptimizerStep(): Promise<void>;
  runEvalStep(feeds: OrtFeeds): Promise<OrtOutputs>;
  lazyResetGrad(): Promise<void>;
  getParametersSize(trainableOnly?: boolean): Promise<number>;
  getContiguousParameters(trainableOnly?: boolean): Promise<OrtTensor>;
  loadParametersBuffer(buffer: Uint8Array, trainableOnly?: boolean): Promise<void>;
  release(): Promise<void>;
}

export interface OrtInferenceSession {
  run(feeds: OrtFeeds): Promise<OrtOutputs>;
  release(): Promise<void>;
}

/** What hora needs from `require('onnxruntime-web/dist/ort.training.wasm.min.js')`. */
export interface OrtTrainingModule {
  Tensor: new (type: string, data: unknown, dims?: readonly number[]) => OrtTensor;
  TrainingSession: {
    create(args: { checkpointState: Uint8Array; trainModel: Uint8Array; evalModel?: Uint8Array; optimizerModel?: Uint8Array }): Promise<OrtTrainingSession>;
  };
  InferenceSession: { create(model: Uint8Array): Promise<OrtInferenceSession> };
  env: { wasm: { numThreads?: number } };
}

const TRAINING_BUILD = 'onnxruntime-web/dist/ort.training.wasm.min.js';

/** Loads onnxruntime-web's training build by path (single-threaded wasm unless the caller set numThreads). */
export function loadOrtTraining(): OrtTrainingModule {
  // The application's copy (adapters/application.ts): one it loaded already, else the one it resolves, hora's
  // own last. onnxruntime-web's `exports` hide its package.json and the training build: resolve its main
  // entry, which they allow, and walk up to the package's folder.
  const found = findFramework((m) => m.filename.includes(`${path.sep}onnxruntime-web${path.sep}`), [['onnxruntime-web']]);
  if (!found) {
    throw new Error(`hora/onnxruntime: cannot find onnxruntime-web from the application (${applicationFolders().join(', ')}) or from hora; ` +
      `install a version with training (npm install onnxruntime-web@1.19.2) or pass {ort} (the module from ${TRAINING_BUILD})`);
  }
  const folder = packageFolder(found.file, 'onnxruntime-web');
  if (!folder) throw new Error(`hora/onnxruntime: no package.json of onnxruntime-web above ${found.file}`);
  const packageJson = path.join(folder, 'package.json');
  const file = path.join(folder, 'dist', 'ort.training.wasm.min.js');
  if (!fs.existsSync(file)) {
    const version = (JSON.parse(fs.readFileSync(packageJson, 'utf8')) as { version: string }).version;
    throw new Error(`hora/onnxruntime: onnxruntime-web ${version} has no training build (${file} is missing); training was removed in 1.20, install onnxruntime-web@1.19.2`);
  }
  // eslint-disable-next-line @typescript-eslint/no-var-requires
  const ort = require(file) as OrtTrainingModule;
  if (ort.env.wasm.numThreads === undefined || ort.env.wasm.numThreads === 0) ort.env.wasm.numThreads = 1;
  return ort;
}
