/**
 * The TensorFlow.js that hora/tfjs works with: the application's own copy, found as adapters/application.ts
 * says (already loaded, else resolved from the application, else beside hora), never a second one.
 *
 * Why at load time, from the application, and not lazily from the user's objects: DistributedOptimizer
 * must be a tf.Optimizer and the callbacks tf.Callbacks when the user constructs them, and
 * `new BroadcastWeightsCallback()` is given no object of theirs to learn the copy from; model.fit tells a
 * callback by its prototype chain. The user's objects are checked instead (checkSameTfjs): an optimizer or
 * model of another copy is an error that names both paths.
 *
 * The rest of the adapter imports `tf` and `tfl` from here and never '@tensorflow/...' as a value. `tf`
 * is both the module (a value) and, through the namespace below, the types the adapter names as tf.X.
 */
import type * as Core from '@tensorflow/tfjs-core';
import type * as Layers from '@tensorflow/tfjs-layers';
import * as path from 'node:path';
import { HoraError } from '../../ts/internal';
import { applicationFolders, findFramework, Found, loadedModuleOf, packageFolder } from '../application';

const CORE = '@tensorflow/tfjs-core';
const LAYERS = '@tensorflow/tfjs-layers';
/** What an application installs to get tfjs; each leads to tfjs-core and tfjs-layers (tfjs-node through tfjs). */
const UMBRELLAS: ReadonlyArray<readonly string[]> = [['@tensorflow/tfjs'], ['@tensorflow/tfjs-node', '@tensorflow/tfjs'], ['@tensorflow/tfjs-node-gpu', '@tensorflow/tfjs']];

const isCore = (m: NodeModule): boolean => isPackage(m, CORE) && typeof (m.exports as { version_core?: unknown })?.version_core === 'string';
const isLayers = (m: NodeModule): boolean => isPackage(m, LAYERS) && typeof (m.exports as { version_layers?: unknown })?.version_layers === 'string';

function isPackage(m: NodeModule, name: string): boolean {
  return m.filename.includes(`${path.sep}${name.replace('/', path.sep)}${path.sep}`);
}

function load<T>(name: string, isLoaded: (m: NodeModule) => boolean): { module: T; found: Found } {
  const found = findFramework(isLoaded, [...UMBRELLAS.map((u) => [...u, name]), [name]]);
  if (!found) {
    throw new HoraError('ERR_INTERNAL', `hora/tfjs: cannot find ${name} from the application (${applicationFolders().join(', ')}) ` +
      'or from hora; install TensorFlow.js 4 in the application: npm install @tensorflow/tfjs@4');
  }
  // eslint-disable-next-line @typescript-eslint/no-var-requires
  return { module: require(found.file) as T, found };
}

const core = load<typeof Core>(CORE, isCore);
const layers = load<typeof Layers>(LAYERS, isLayers);

/** tfjs-core, the application's. */
export const tf: typeof Core = core.module;
/** tfjs-layers, the application's. */
export const tfl: typeof Layers = layers.module;

/** The types the adapter names as tf.X (a type-only namespace: it adds no value). */
// eslint-disable-next-line @typescript-eslint/no-namespace
export namespace tf {
  export type Rank = Core.Rank;
  export type Tensor<R extends Core.Rank = Core.Rank> = Core.Tensor<R>;
  export type Scalar = Core.Scalar;
  export type Tensor1D = Core.Tensor1D;
  export type Tensor2D = Core.Tensor2D;
  export type Variable<R extends Core.Rank = Core.Rank> = Core.Variable<R>;
  export type Optimizer = Core.Optimizer;
  export type NamedTensorMap = Core.NamedTensorMap;
  export type TensorContainer = Core.TensorContainer;
  export namespace serialization {
    export type ConfigDict = Core.serialization.ConfigDict;
  }
  export namespace io {
    export type IOHandler = Core.io.IOHandler;
    export type ModelJSON = Core.io.ModelJSON;
    export type SaveResult = Core.io.SaveResult;
  }
}

/** Where hora/tfjs found tfjs-core and tfjs-layers, and how. */
export function tfjsFound(): { core: Found; layers: Found } {
  return { core: core.found, layers: layers.found };
}

/**
 * Refuses an object made by another copy of tfjs than hora/tfjs's (`exportName`: the tfjs class it must
 * derive from, in tfjs-core or tfjs-layers). tfjs's own instanceof accepts any copy's objects, so this
 * looks at the prototype chain.
 */
export function checkSameTfjs(value: object, exportName: 'Optimizer' | 'LayersModel', what: string): void {
  const inLayers = exportName === 'LayersModel';
  const ours = inLayers ? tfl.LayersModel : tf.Optimizer;
  if (ours.prototype.isPrototypeOf(value)) return;
  const mine = (inLayers ? layers : core).found;
  const theirs = loadedModuleOf(value, exportName, inLayers ? isLayers : isCore);
  const name = inLayers ? LAYERS : CORE;
  throw new HoraError('ERR_INVALID_ARGUMENT', `${what} comes from ${theirs ? `the ${name} at ${packageFolder(theirs, name) ?? theirs}` : `another copy of ${name}`}, ` +
    `but hora/tfjs works with the one at ${packageFolder(mine.file, name) ?? mine.file} (${mine.how}). Two copies of TensorFlow.js in one ` +
    'process do not share classes: keep one (npm dedupe, or remove the copy in the folder hora is linked from), or import ' +
    "@tensorflow/tfjs before hora/tfjs so that hora uses the application's");
}
