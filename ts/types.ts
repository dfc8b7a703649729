/**
 * Public types of the hora API: one doc line per option. Every call refuses an options object with a key
 * it does not know (ERR_INVALID_ARGUMENT naming the key and the likely one it meant), so that a misspelt
 * or foreign option (Horovod's average=False) is never ignored.
 */
import type { DeviceBuffer } from './device-buffer';
import type { AlgorithmName, DType, ReduceOp, Tensor } from './native';

/** Reduction operators, element types and the host arrays collectives accept: their tables are in ts/native.ts. */
export type { DType, ReduceOp, Tensor };

/** What collectives accept: a host array, or device memory (hora.cuda.DeviceBuffer), whose result stays on the device. */
export type CollectiveInput = Tensor | DeviceBuffer;

export interface InitOptions {
  /** Deadline of every collective in seconds (default HORA_TIMEOUT_S or 300). */
  timeoutSeconds?: number;
  /** Fusion buffer size in MiB; 0 disables fusion (default HORA_FUSION_MB). */
  fusionMB?: number;
  /**
   * Force an allreduce algorithm (default HORA_ALGO, else 'auto'): 'hierarchical' needs the same number of
   * ranks on every host; 'multidim' walks the HORA_TOPOLOGY grid (default: ranks per host x hosts).
   */
  algorithm?: AlgorithmName;
  /**
   * 'auto' uses shared memory between ranks on one host and TCP across hosts; 'tcp' forces TCP; 'shm'
   * is shared memory only, and init fails with ERR_INVALID_ARGUMENT on every rank when the ranks are on
   * more than one host (default HORA_TRANSPORT).
   */
  transport?: 'auto' | 'tcp' | 'shm';
}

export interface AllreduceOptions {
  /** Reduction operator (default 'avg', as for gradients). */
  op?: ReduceOp;
  /** Name shown in errors; ranks must agree on it. */
  name?: string;
  /** Write the result into x itself instead of a new array (default false). */
  inplace?: boolean;
  /** Element type of a Uint16Array: 'uint16', 'float16' or 'bfloat16' (required for Uint16Array); for a DeviceBuffer, its own dtype if given. */
  dtype?: DType;
  /** Multiplies every rank's x before the reduction (Horovod's prescale_factor): finite; float dtypes, host arrays. Default 1. */
  prescaleFactor?: number;
  /** Multiplies the result after the reduction (and after avg's division): finite; float dtypes, host arrays. Default 1. */
  postscaleFactor?: number;
}

export interface BroadcastOptions {
  /** Rank whose values everyone receives (default 0). */
  root?: number;
  name?: string;
  /** Receive into x itself instead of a new array (default false). */
  inplace?: boolean;
  dtype?: DType;
}

export interface AllgatherOptions {
  name?: string;
  dtype?: DType;
}

export interface ReduceScatterOptions {
  /** Reduction operator (default 'sum'). */
  op?: ReduceOp;
  name?: string;
  dtype?: DType;
  /** As for allreduce: multiplies every rank's x before the reduction. Default 1. */
  prescaleFactor?: number;
  /** As for allreduce: multiplies this rank's block of the result after it. Default 1. */
  postscaleFactor?: number;
}

export interface ReduceOptions {
  /** Rank that receives the reduction (default 0); every other rank's Work resolves to null. */
  root?: number;
  /** Reduction operator (default 'sum', as torch.distributed.reduce; 'avg' divides by the world or group size). */
  op?: ReduceOp;
  name?: string;
  dtype?: DType;
  /** As for allreduce: multiplies every rank's x before the reduction. Default 1. */
  prescaleFactor?: number;
  /** As for allreduce: multiplies the root's result after it. Default 1. */
  postscaleFactor?: number;
}

export interface GatherOptions {
  /** Rank that receives every rank's x, concatenated in rank order (default 0); every other rank's Work resolves to null. */
  root?: number;
  name?: string;
  dtype?: DType;
}

export interface BroadcastObjectOptions {
  /** Rank whose value everyone receives (default 0). */
  root?: number;
  /** Bound on the serialized value in bytes, the same on every rank (default 64 MiB); past it the call fails on every rank. */
  maxBytes?: number;
  name?: string;
}

export interface AllgatherObjectOptions {
  /** Bound on each rank's serialized value in bytes, the same on every rank (default 64 MiB); past it the call fails on every rank. */
  maxBytes?: number;
  name?: string;
}

export interface AlltoallOptions {
  /** Elements of x for each rank, in rank order (an array of size() non-negative integers summing to x.length). Omitted or empty: equal parts. */
  splits?: ArrayLike<number>;
  /** Elements this rank receives from each rank, when known: spares the exchange of counts (checked against every rank's splits). */
  recvSplits?: ArrayLike<number>;
  /**
   * Where what comes in lands: an array of x's type, which the Work resolves to as `data` (as torch's
   * all_to_all_single writes its output tensor), instead of a new array each call. Its length is the sum of
   * recvSplits; without recvSplits it is cut into size() equal parts, which then stand for recvSplits.
   */
  out?: Tensor;
  name?: string;
  /** Element type of a Uint16Array: 'uint16', 'float16' or 'bfloat16'. */
  dtype?: DType;
}

/** What an alltoall resolves to. */
export interface AlltoallResult<T> {
  /** What every rank sent this rank, concatenated in rank order. */
  data: T;
  /** Elements received from each rank, in rank order. */
  splits: number[];
}

export interface ScatterOptions {
  /** Rank whose x is cut and sent (default 0). */
  root?: number;
  /** On the root: elements of x for each rank (size() non-negative integers summing to x.length); default equal parts. Not read elsewhere. */
  splits?: ArrayLike<number>;
  name?: string;
  dtype?: DType;
}

export interface BarrierOptions {
  name?: string;
}

/** hora.newGroup takes no options yet; the object is checked so that a torch-style one is not ignored. */
export type NewGroupOptions = Record<never, never>;

export interface SendOptions {
  /** Rank that receives the message: 0 <= to < size(), not this rank. */
  to: number;
  /** Integer 0 <= tag < 2^31 (default 0). Messages of one (sender, tag) arrive in order. */
  tag?: number;
  /** Element type of a Uint16Array: 'uint16', 'float16' or 'bfloat16' (required for Uint16Array). */
  dtype?: DType;
}

export interface RecvOptions {
  /** Rank that sends the message: 0 <= from < size(), not this rank. */
  from: number;
  /** Integer 0 <= tag < 2^31 (default 0). */
  tag?: number;
  /** Without an array to receive into: the element type of the new array; with a Uint16Array, 'uint16', 'float16' or 'bfloat16'. */
  dtype?: DType;
  /** Without an array to receive into: its length in elements. */
  count?: number;
}
