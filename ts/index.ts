/** hora: distributed data-parallel training for JavaScript. */
import * as core from './hora';
import * as groups from './group';
import * as works from './work';
import * as errors from './errors';
import * as checkpoints from './checkpoint';

// Plain values, not re-exports: a compiled `export { x } from` is a getter on the module object, and a
// program calls `hora.allreduce(...)` in its loop, where each call then ran the getter through a generic
// property lookup (a few percent of a small collective).
export const init = core.init;
export const shutdown = core.shutdown;
export const isInitialized = core.isInitialized;
export const rank = core.rank;
export const size = core.size;
export const localRank = core.localRank;
export const localSize = core.localSize;
export const crossRank = core.crossRank;
export const crossSize = core.crossSize;
export const allreduce = core.allreduce;
export const broadcast = core.broadcast;
export const allgather = core.allgather;
export const reduceScatter = core.reduceScatter;
export const reduce = core.reduce;
export const gather = core.gather;
export const barrier = core.barrier;
export const join = core.join;
export const broadcastObject = core.broadcastObject;
export const allgatherObject = core.allgatherObject;
export const grouped = core.grouped;
export type { Grouped } from './grouped';
export const alltoall = core.alltoall;
export const scatter = core.scatter;
export const failPeers = core.failPeers;
export const send = core.send;
export const recv = core.recv;
export const newGroup = groups.newGroup;
export const Group = groups.Group;
export type Group = groups.Group;
export const Work = works.Work;
export type Work<T> = works.Work<T>;
export * as cuda from './cuda';
export * as elastic from './elastic';
/** hora.checkpoint: checkpoints every rank writes in parallel and loads at any world size (docs/checkpoint.md). */
export const checkpoint = { save: checkpoints.save, load: checkpoints.load, latestStep: checkpoints.latestStep };
export type {
  CheckpointEntry, CheckpointArray, CheckpointShard, CheckpointSaveOptions, CheckpointLoadOptions, CheckpointExpectation, LoadedCheckpoint, LoadedShard,
} from './checkpoint';
export const HoraError = errors.HoraError;
export type HoraError = errors.HoraError;
export type { HoraErrorCode } from './errors';
export type {
  ReduceOp, DType, Tensor, CollectiveInput, InitOptions, AllreduceOptions, BroadcastOptions, AllgatherOptions,
  ReduceScatterOptions, ReduceOptions, GatherOptions, BarrierOptions, BroadcastObjectOptions, AlltoallOptions, AlltoallResult, ScatterOptions,
  AllgatherObjectOptions, SendOptions, RecvOptions, NewGroupOptions,
} from './types';
