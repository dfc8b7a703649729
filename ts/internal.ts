/**
 * What the framework adapters (adapters/tfjs, adapters/brain, adapters/onnxruntime) use of the core beyond
 * the public API (ts/index.ts): the only other core module they import (test/imports.test.js checks it).
 * A new need of an adapter is added here, so that this list stays the whole contract between the two sides.
 *
 * Plain values, not re-exports, as in ts/index.ts: a compiled `export { x } from` is a getter, and the
 * adapters call some of these on every step.
 */
import * as checkpoint from './checkpoint';
import * as collectives from './collectives';
import * as config from './config';
import * as messages from './control/messages';
import * as elasticSync from './elastic/sync';
import * as errors from './errors';
import * as packageRoot from './package-root';
import * as stats from './stats';
import * as world from './world';

/** Errors: the error class and the checks that give every argument error one message shape. */
export const HoraError = errors.HoraError;
export type HoraError = errors.HoraError;
export const describeValue = errors.describeValue;
export const checkOptionKeys = errors.checkOptionKeys;
export const knownOptions = errors.knownOptions;

/**
 * hora.checkpoint's save and load with the adapter's own preparation and checks inside their agreement:
 * an error of either on one rank fails the call on every rank (hora/tfjs saveCheckpoint, loadCheckpoint).
 */
export const saveCheckpointAgreed = checkpoint.saveAgreed;
export const loadCheckpointAgreed = checkpoint.loadAgreed;

/** How reduceScatter cuts `count` elements into `size` blocks (the first count % size one longer): block `block`'s [begin, end). */
export const blockRange = collectives.blockRange;

/** The world this process is in, for a call named `collective`; throws before init(). */
export const current = world.current;
/** Hands the collectives submitted so far to the engine now (an adapter about to wait for them). */
export const flushCollectives = world.flushCollectives;
/** The timeline (HORA_TIMELINE): whether it records, and a span of the adapter's own on it. */
export const timelineOn = world.timelineOn;
export const timelineSpan = world.timelineSpan;

/** Configuration read from the environment (ts/config.ts is its only reader) and the logger of HORA_DEBUG. */
export const readTfjsSkipAllreduce = config.readTfjsSkipAllreduce;
export const makeLogger = config.makeLogger;

/** The folder of hora's package.json (to find the application's own copy of a framework beside it). */
export const findPackageRoot = packageRoot.findPackageRoot;

/**
 * What every elastic state does to commit and sync (ts/elastic/sync.ts); an adapter's ElasticState adds
 * how to read and write its framework's tensors.
 */
export const keepCopy = elasticSync.keepCopy;
export const broadcastHeader = elasticSync.broadcastHeader;
export const ranksThatDiffer = elasticSync.ranksThatDiffer;
export const rankList = elasticSync.rankList;
export const differsFromRoot = elasticSync.differsFromRoot;

/** The stats reports to the launcher: the training steps, and a section of the report an adapter fills. */
export const steps = stats.steps;
export const addStatsSection = stats.addStatsSection;
export const reportIfDue = stats.reportIfDue;
export type { PipelineStats } from './control/messages';
/** The bounds the launcher's server holds a report to (a report beyond them is refused, and the rank with it). */
export const FIELD_LIMITS = messages.FIELD_LIMITS;
