/** hora: distributed data-parallel training for JavaScript. */
export {
  init, shutdown, isInitialized, rank, size, localRank, localSize, crossRank, crossSize,
  allreduce, broadcast, allgather, reduceScatter, barrier, failPeers, send, recv,
} from './hora';
export { newGroup, Group } from './group';
export { Work } from './work';
export * as cuda from './cuda';
export * as elastic from './elastic';
export { HoraError } from './errors';
export type { HoraErrorCode } from './errors';
export type {
  ReduceOp, DType, Tensor, CollectiveInput, InitOptions, AllreduceOptions, BroadcastOptions, AllgatherOptions,
  ReduceScatterOptions, BarrierOptions, SendOptions, RecvOptions,
} from './types';
