/**
 * The contract between the TypeScript layer and the native addon (native/binding/).
 *
 * The JS side validates every argument and owns promises; the addon is a flat set of calls on a
 * Communicator object. A collective is submitted as a plain item; the addon keeps a pointer into the
 * item's TypedArray until the work completes, so the JS side must keep that array referenced and
 * untouched until then. There is one way in per kind of call: `submit(items)` for a batch, and for an item
 * alone `collective(...)` or `message(...)` with positional arguments, the manner of waiting in the code
 * (Manner). Completion arrives as `onComplete(id)` on the JS thread; the JS side then calls
 * `result(id, 0)` once to collect the result: `true` for a success with nothing to hand back, otherwise a
 * NativeResult. `result(id, -1)` blocks the JS thread until the work is done and returns the same result
 * (a later `result` for that id returns null).
 *
 * Device memory (hora.cuda.DeviceBuffer) crosses as BigInt pointers. A device item carries `device`,
 * `devicePtr`, `count` and `stream` (and `outPtr` for a reducescatter) in place of the `data` and `out`
 * views; the JS side keeps the DeviceBuffers referenced and unfreed until the work completes. A device
 * allgather hands back `devicePtr`, memory the engine allocated, which the JS side then owns and must free
 * with `cuda.free`. The `cuda` object's calls are synchronous; a failure throws an Error whose `code` is
 * a HoraError code.
 *
 * Send and Recv items (hora.send / hora.recv) travel in the same submit() calls but are posted at once,
 * beside the ordered queue of collectives (native/src/engine/p2p.h); a send completes when the peer's
 * matching receive has taken the message.
 *
 * The enums below are the wire contract's tables, the only ones on the JS side: each const enum gives
 * the values code uses (inlined by tsc: no lookup per call), and the table beside it binds every member
 * to its name, keyed by the member, as native/src/common/enums.h binds them with a switch. The TS types
 * of those names derive from the tables. Values are shared with the C++ side (and, for kinds, dtypes and
 * ops, with other ranks on the wire): never renumber them. The addon hands out its names (enums()) and
 * test/enums.test.js checks them against these tables entry by entry.
 */

export const enum NativeKind { Allreduce = 0, Broadcast = 1, Allgather = 2, ReduceScatter = 3, Barrier = 4, Invalid = 5, Send = 6, Recv = 7,
  Alltoall = 8, Reduce = 9, Gather = 10, Scatter = 11, Join = 12 }
export const enum NativeDType { Float32 = 0, Float64 = 1, Float16 = 2, BFloat16 = 3, Int32 = 4, Int64 = 5, Uint8 = 6,
  Int8 = 7, Int16 = 8, Uint16 = 9 }
export const enum NativeOp { Sum = 0, Avg = 1, Min = 2, Max = 3, Prod = 4 }
export const enum NativeAlgorithm { Auto = 0, Ring = 1, RecursiveDoubling = 2, Hierarchical = 3, MultiDim = 4 }
export const enum NativeTransport { Auto = 0, Tcp = 1 }

/** Element types: the API's names (the DType option; the addon's dtypeName). */
export const DTYPE_NAMES = {
  [NativeDType.Float32]: 'float32', [NativeDType.Float64]: 'float64', [NativeDType.Float16]: 'float16',
  [NativeDType.BFloat16]: 'bfloat16', [NativeDType.Int32]: 'int32', [NativeDType.Int64]: 'int64', [NativeDType.Uint8]: 'uint8',
  [NativeDType.Int8]: 'int8', [NativeDType.Int16]: 'int16', [NativeDType.Uint16]: 'uint16',
} as const satisfies { readonly [D in NativeDType]: string };
/**
 * Element types. float16 and bfloat16 travel in Uint16Array and are reduced in float32; uint16 travels in
 * Uint16Array too, so a Uint16Array always names its dtype. The integers wrap around on overflow.
 */
export type DType = (typeof DTYPE_NAMES)[NativeDType];

/** The arrays collectives accept, at any byteOffset. */
export type Tensor = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array | Uint16Array | Int8Array | Int16Array;

/** Bytes per element of each NativeDType (the addon's dtypeSize). */
export const DTYPE_BYTES: readonly number[] = valuesOf({
  [NativeDType.Float32]: 4, [NativeDType.Float64]: 8, [NativeDType.Float16]: 2, [NativeDType.BFloat16]: 2,
  [NativeDType.Int32]: 4, [NativeDType.Int64]: 8, [NativeDType.Uint8]: 1,
  [NativeDType.Int8]: 1, [NativeDType.Int16]: 2, [NativeDType.Uint16]: 2,
} satisfies { readonly [D in NativeDType]: number });

/** Reduction operators (the op option). */
export const OP_NAMES = {
  [NativeOp.Sum]: 'sum', [NativeOp.Avg]: 'avg', [NativeOp.Min]: 'min', [NativeOp.Max]: 'max', [NativeOp.Prod]: 'prod',
} as const satisfies { readonly [O in NativeOp]: string };
/** Reduction operators. 'avg' sums on the wire and divides by the world size once. */
export type ReduceOp = (typeof OP_NAMES)[NativeOp];

/** Allreduce algorithms: the algorithm option and HORA_ALGO's values. */
export const ALGORITHM_NAMES = {
  [NativeAlgorithm.Auto]: 'auto', [NativeAlgorithm.Ring]: 'ring', [NativeAlgorithm.RecursiveDoubling]: 'recursive_doubling',
  [NativeAlgorithm.Hierarchical]: 'hierarchical', [NativeAlgorithm.MultiDim]: 'multidim',
} as const satisfies { readonly [A in NativeAlgorithm]: string };
export type AlgorithmName = (typeof ALGORITHM_NAMES)[NativeAlgorithm];

/**
 * The kinds of item. `api`: the JS API's name (hora.reduceScatter; stats and the dashboard), 'invalid' for
 * the placeholder of a call refused here; `engine`: the engine's name, in its error messages and the
 * timeline's slices (the addon's kindName).
 */
export const KIND_NAMES = {
  [NativeKind.Allreduce]: { api: 'allreduce', engine: 'allreduce' },
  [NativeKind.Broadcast]: { api: 'broadcast', engine: 'broadcast' },
  [NativeKind.Allgather]: { api: 'allgather', engine: 'allgather' },
  [NativeKind.ReduceScatter]: { api: 'reduceScatter', engine: 'reducescatter' },
  [NativeKind.Barrier]: { api: 'barrier', engine: 'barrier' },
  [NativeKind.Invalid]: { api: 'invalid', engine: 'invalid call' },
  [NativeKind.Send]: { api: 'send', engine: 'send' },
  [NativeKind.Recv]: { api: 'recv', engine: 'recv' },
  [NativeKind.Alltoall]: { api: 'alltoall', engine: 'alltoall' },
  [NativeKind.Reduce]: { api: 'reduce', engine: 'reduce' },
  [NativeKind.Gather]: { api: 'gather', engine: 'gather' },
  [NativeKind.Scatter]: { api: 'scatter', engine: 'scatter' },
  [NativeKind.Join]: { api: 'join', engine: 'join' },
} as const satisfies { readonly [K in NativeKind]: { readonly api: string; readonly engine: string } };
/** The kinds that are collectives of the ordered queue (not a placeholder, not a message). */
export type CollectiveNativeKind = NativeKind.Allreduce | NativeKind.Broadcast | NativeKind.Allgather | NativeKind.ReduceScatter | NativeKind.Barrier
  | NativeKind.Alltoall | NativeKind.Reduce | NativeKind.Gather | NativeKind.Scatter;
/** The collectives (every kind but the placeholder and the messages), in the order of their values. */
export const COLLECTIVE_NATIVE_KINDS = [
  NativeKind.Allreduce, NativeKind.Broadcast, NativeKind.Allgather, NativeKind.ReduceScatter, NativeKind.Barrier,
  NativeKind.Alltoall, NativeKind.Reduce, NativeKind.Gather, NativeKind.Scatter,
] as const satisfies readonly CollectiveNativeKind[];

/**
 * The codes of a native Status in the addon's order (codeName); every one but 'OK' is a HoraError code
 * (ts/errors.ts). Codes cross the boundary as these strings.
 */
export const CODE_NAMES = [
  'OK', 'ERR_TIMEOUT', 'ERR_PEER_LOST', 'ERR_MISMATCH', 'ERR_INVALID_ARGUMENT', 'ERR_NOT_INITIALIZED', 'ERR_SHUTDOWN',
  'ERR_AUTH', 'ERR_INTERNAL', 'ERR_IO',
] as const;

/**
 * The numbers of one completed work in takeTimeline()'s rows: the id, the WorkTimes (nanoseconds, then
 * counts), and indexes into its strings for the algorithm, the error code and the message (-1: none).
 * Columns is the row's length.
 */
export const enum TimelineColumn {
  Id, Enqueued, Started, CopyInStart, CopyInEnd, NegotiateStart, NegotiateEnd, TransferEnd, CopyOutStart,
  CopyOutEnd, Done, ReduceNanos, ReduceCalls, FusedTensors, Seq, Algorithm, Code, Message, Columns,
}
export const TIMELINE_COLUMN_NAMES = {
  [TimelineColumn.Id]: 'id', [TimelineColumn.Enqueued]: 'enqueued', [TimelineColumn.Started]: 'started',
  [TimelineColumn.CopyInStart]: 'copyInStart', [TimelineColumn.CopyInEnd]: 'copyInEnd',
  [TimelineColumn.NegotiateStart]: 'negotiateStart', [TimelineColumn.NegotiateEnd]: 'negotiateEnd',
  [TimelineColumn.TransferEnd]: 'transferEnd', [TimelineColumn.CopyOutStart]: 'copyOutStart',
  [TimelineColumn.CopyOutEnd]: 'copyOutEnd', [TimelineColumn.Done]: 'done', [TimelineColumn.ReduceNanos]: 'reduceNanos',
  [TimelineColumn.ReduceCalls]: 'reduceCalls', [TimelineColumn.FusedTensors]: 'fusedTensors', [TimelineColumn.Seq]: 'seq',
  [TimelineColumn.Algorithm]: 'algorithm', [TimelineColumn.Code]: 'code', [TimelineColumn.Message]: 'message',
} as const satisfies { readonly [C in Exclude<TimelineColumn, TimelineColumn.Columns>]: string };

/**
 * A table's entries (or what pick takes of each) in the order of their values (0, 1, ...): an array
 * filled by push, so that the lookups by value made per call read a packed array, as they read a literal.
 */
export function valuesOf<T, U = T>(table: { readonly [value: number]: T }, pick?: (entry: T) => U): U[] {
  const keys = Object.keys(table);
  const out: U[] = [];
  for (let i = 0; i < keys.length; i++) {
    if (Number(keys[i]) !== i) throw new Error(`hora: an enum table skips value ${i}`);
    out.push(pick ? pick(table[i]) : (table[i] as unknown as U));
  }
  return out;
}

/** The value of each name of a table (a name's member, from its name). */
export function valueOfName<N extends string>(table: { readonly [value: number]: N }): Record<N, number> {
  return Object.fromEntries(valuesOf(table).map((name, value) => [name, value])) as Record<N, number>;
}

/**
 * The value of `name` in a table made by valueOfName, or undefined. Only the table's own names count:
 * the tables are plain objects, so `'toString' in table` and `table['constructor']` find Object.prototype's
 * functions; every entry's value is a number, and nothing inherited is.
 */
export function lookupName<V extends number>(table: Readonly<Record<string, V>>, name: unknown): V | undefined {
  if (typeof name !== 'string') return undefined;
  const v = table[name];
  return typeof v === 'number' ? v : undefined;
}

/** The value of each DType name. */
export const DTYPE_OF_NAME = valueOfName(DTYPE_NAMES) as Record<DType, NativeDType>;

/**
 * Every table, as lists in the order of their values: what the addon's enums() answers with, for
 * test/enums.test.js.
 */
export function enumTables(): Record<string, readonly unknown[]> {
  return {
    dtypes: valuesOf(DTYPE_NAMES), dtypeBytes: DTYPE_BYTES, ops: valuesOf(OP_NAMES), algorithms: valuesOf(ALGORITHM_NAMES),
    kinds: valuesOf(KIND_NAMES, (k) => k.engine), codes: CODE_NAMES, timelineColumns: valuesOf(TIMELINE_COLUMN_NAMES),
    itemKeys: ITEM_KEYS,
  };
}

export interface NativeCommOptions {
  rank: number;
  size: number;
  timeoutMs: number;
  fusionBytes: number;
  algorithm: NativeAlgorithm;
  transport: NativeTransport;
  /** IPv4 address the data-plane listener binds; '' for all interfaces. */
  bindHost: string;
  /** Per-job secret (HORA_SECRET); its UTF-8 bytes key the data-plane handshake's HMAC. */
  secret: string;
  /** 0 WARN, 1 INFO, 2 TRACE */
  logLevel: number;
  /** HORA_TOPOLOGY grid, fastest dimension first (product = size); [] for none. */
  grid: number[];
  /** Link costs set by the user ({alpha: s, beta: s/byte}); absent: measured at connect. */
  costLocal?: { alpha: number; beta: number };
  costCross?: { alpha: number; beta: number };
  /** Record phase times of every collective and return them in NativeResult.times (HORA_TIMELINE). */
  timeline?: boolean;
  /** CUDA builds: the IPC path's staging slots even when every rank shares one GPU (HORA_IPC_SLOTS). */
  ipcSlots?: boolean;
  /** alltoall and scatter: false moves every block through the shared-memory rings, never a single copy (HORA_SHM_SINGLE_COPY=0). */
  shmSingleCopy?: boolean;
  /** CUDA builds: false keeps libnccl.so.2 unloaded, so device collectives take the IPC or staged path (HORA_NCCL=0). */
  nccl?: boolean;
  /**
   * A world of an elastic job: a failure does not hang up the connections but tells the peers on their
   * notice sockets, so that the next world can take over those between survivors.
   */
  elastic?: boolean;
}

export interface NativePeer {
  rank: number;
  hostId: string;
  addr: string;
  port: number;
  localRank: number;
  /** The peer's rank in the last world, whose pair with it this connect takes over; -1 or absent: none. */
  keptRank?: number;
}

/** Connections a closed world left for the next one (opaque; they close when it is collected). */
export type NativeKeptConnections = { readonly __brand: 'NativeKeptConnections' };

export interface NativeItem {
  id: number;
  /**
   * kind, op and dtype with the algorithm, as itemCode() packs them: what the addon reads of them (kind, op
   * and dtype are beside it for the JS side's own use, and say the same).
   */
  code: number;
  kind: NativeKind;
  op: NativeOp;
  dtype: NativeDType;
  root: number;
  name: string;
  /** allreduce/broadcast: reduced or received in place; allgather/reducescatter/reduce/gather: input. */
  data: ArrayBufferView | null;
  /** reducescatter: this rank's block of the result; reduce: the root's result (null on the other ranks). */
  out: ArrayBufferView | null;
  /** kind Invalid: why this rank's call was rejected. */
  invalidReason?: string;
  /** A collective of process group `group` (made with addGroup); 0 or absent: the world. */
  group?: number;
  /** kinds Send and Recv: the other rank (world rank), and the message's tag. data is sent from, or received into. */
  peer?: number;
  tag?: number;
  /** A device item: the CUDA device of devicePtr and outPtr (data and out are then null). */
  device?: number;
  /** allreduce/broadcast: reduced or received in place; allgather/reducescatter: input. Device memory. */
  devicePtr?: bigint;
  /** Elements at devicePtr. */
  count?: number;
  /** The work waits for what is queued on this cudaStream_t and leaves its result ready on it; 0n: the legacy default stream. */
  stream?: bigint;
  /** reducescatter of a device item: this rank's block of the result, device memory. */
  outPtr?: bigint;
  /**
   * allreduce, reducescatter, reduce of a float dtype on host memory: [prescaleFactor, postscaleFactor], finite;
   * absent when both are 1. An item with it goes through submit() (collective() has no room for it).
   */
  scale?: [number, number];
  /**
   * alltoall: the elements this rank sends each rank of its group, in group rank order (their sum is
   * data's length), then, when the caller gave recvSplits, the elements it expects from each (size or 2 *
   * size entries). scatter: on the root, the elements for each rank; absent elsewhere. An item with it goes
   * through submit(). A Float64Array: the addon reads its memory at once, where an array's elements would
   * each be a call into V8 (about a microsecond for four).
   */
  splits?: Float64Array;
}

export interface NativeResult {
  code?: string;
  message?: string;
  peer?: number;
  /** allgather, alltoall, scatter of host memory, and gather at its root: what came from each rank, concatenated in rank order. */
  gathered?: ArrayBuffer;
  /** allgather of device memory: the same, in device memory of the item's device, now owned by the JS side. */
  devicePtr?: bigint;
  /** allgather, alltoall, scatter, and gather at its root: elements from each rank. */
  counts?: number[];
  fused?: boolean;
  /** join: the rank (of the join's group, if any) that joined last. */
  lastJoined?: number;
}

export interface NativeCommunicator {
  /** Opens the data-plane listener and returns its port. */
  listen(): number;
  /** Connects to every peer; completes work `id`. */
  connect(id: number, peers: NativePeer[], jobId: string, kept?: NativeKeptConnections): void;
  /** willWait: the caller goes on to wait() for one of the items at once (the engine need not be woken for them). */
  submit(items: NativeItem[], willWait?: boolean): void;
  /**
   * Makes process group `id` (> 0, not used before) of `members` (world ranks by group rank, this rank
   * among them) for later items to name. Call once connected; every member must call it with the same id
   * and members. Throws on a bad list.
   */
  addGroup(id: number, members: number[]): void;
  /**
   * The way in for a batch of one host collective (no message, device item or invalid call), without an
   * item object to read (an alltoall's splits in root's place); code is packCode()'s, with the manner of waiting (Manner). Manner.WaitNow: handed
   * in and waited for in one call; its result, or for plain success the nanoseconds the call took.
   * Manner.WillWait: queued, and undefined (result(id, -1) follows). Manner.Awaited: a collective that
   * cannot wait on a peer (two ranks, a small allreduce or a barrier, the partner's message already here)
   * runs at once: then its result; else undefined, and its completion comes later.
   */
  collective(id: number, code: number, root: number | Float64Array, data: ArrayBufferView | null, out: ArrayBufferView | null,
    name: string | null): NativeResult | true | number | undefined;
  /**
   * The way in for one host send or recv (code: packCode(), kind, dtype and the manner): group 0 is the
   * world. Manner.WaitNow: posted and waited for in one call; its result. Otherwise undefined.
   */
  message(id: number, code: number, data: ArrayBufferView, peer: number, tag: number, group: number): NativeResult | true | undefined;
  /**
   * The one completion step of a work that is pending (submit(), or collective() and message() without
   * Manner.WaitNow): its result once; null when already taken. micros: 0, the completion has come (take
   * it); > 0, spin up to that long for the work to complete (null when it has not; its completion comes
   * later as usual); < 0, block until it completes (wait()).
   */
  result(id: number, micros: number): NativeResult | true | null;
  /** Fails every pending and later operation with `code` and `message`; `peer`: the lost rank, when one is known. */
  abort(code: string, message: string, peer?: number): void;
  /**
   * The cost model's predicted seconds of a float32 allreduce of `bytes` per algorithm (absent where
   * not applicable), and the algorithm `algorithm` resolves to. `measured` is false on one host.
   */
  estimate(bytes: number, algorithm: NativeAlgorithm): NativeEstimate;
  /**
   * Timeline on: the phase times of the works completed since the last call, one row of numbers each
   * (layout: TimelineColumn above), and the strings the rows point to.
   */
  takeTimeline(): { rows: Float64Array; strings: string[] };
  /**
   * Stops the communication thread after the queue drains and closes every connection; with keep, hands
   * a connected world's connections over instead, for the next world's connect().
   */
  close(options?: { keep: boolean }): NativeKeptConnections | undefined;
}

export interface NativeEstimate {
  measured: boolean;
  ring: number;
  recursive_doubling: number;
  hierarchical?: number;
  multidim?: number;
  chosen: string;
}

export interface NativeAddon {
  Communicator: new (options: NativeCommOptions, onComplete: (id: number) => void) => NativeCommunicator;
  /** [monotonic nanoseconds (process.hrtime's clock), wall clock minus monotonic in microseconds]. */
  clocks(): [number, number];
  /** A world of one's allreduce or reducescatter with factors: view (a float dtype) times prescale, then postscale, in place. */
  scaleAlone(view: ArrayBufferView, dtype: NativeDType, prescale: number, postscale: number): void;
  /** The CRC-32C of the view's bytes (native/src/common/crc32c.h): the checksum of a checkpoint's chunks. */
  crc32c(view: ArrayBufferView): number;
  abiVersion: number;
  /** The addon's enum tables (native/src/common/enums.h), named and ordered as enumTables() names them. */
  enums(): Record<string, readonly unknown[]>;
  /** The native log level, 0 WARN, 1 INFO, 2 TRACE (HORA_DEBUG): set by the loader; each Communicator's logLevel sets it again. */
  setLogLevel(level: number): void;
  /**
   * The addon holds the memory of the arrays of a pending work (native/binding/backing_store.h): a detached
   * ArrayBuffer's memory stays valid until the work's result is taken. False where this Node's V8 does not
   * let it; the JS side then copies pending arrays to its own (ts/lend.ts).
   */
  holdsArrayBuffers?: boolean;
  cuda: NativeCuda;
}

/**
 * CUDA devices and device memory (native/src/cuda/device.h). An addon built without CUDA answers
 * built() false, available() false, deviceCount() 0, and throws from the rest with a message that says how
 * to get a CUDA build. Pointers and streams are BigInt; 0n stream is the legacy default stream.
 */
export interface NativeCuda {
  /** Compiled with CUDA. */
  built(): boolean;
  /** built(), a driver, and at least one device visible. */
  available(): boolean;
  /** Devices visible to this process (0 when !available()). */
  deviceCount(): number;
  /** Why available() is false ('' when it is true). */
  unavailableReason(): string;
  /** Zero-filled device memory of `bytes` on `device`. */
  alloc(device: number, bytes: number): bigint;
  /** Frees memory from alloc() or an allgather's devicePtr; any other pointer throws. */
  free(ptr: bigint): void;
  /** Copies view.byteLength bytes from the view to ptr, after the work queued on stream; synchronous. */
  copyFromHost(device: number, ptr: bigint, view: ArrayBufferView, stream: bigint): void;
  /** Copies view.byteLength bytes from ptr into the view, after the work queued on stream; synchronous. */
  copyToHost(device: number, ptr: bigint, view: ArrayBufferView, stream: bigint): void;
  /** Throws unless [ptr, ptr + bytes) lies in one allocation of device memory of `device` and stream (if not 0n) belongs to it. */
  checkRange(device: number, ptr: bigint, bytes: number, stream: bigint): void;
  /** float32 <-> float16 / bfloat16 conversion of count elements, or a copy when the dtypes match; synchronous on stream. */
  cast(device: number, src: bigint, fromDtype: NativeDType, dst: bigint, toDtype: NativeDType, count: number, stream: bigint): void;
}

/**
 * The keys of NativeItem the addon reads, in the order of its table (native/binding/communicator.h ItemKey):
 * test/enums.test.js checks the two entry by entry.
 */
export const ITEM_KEYS = [
  'id', 'code', 'root', 'name', 'invalidReason', 'device', 'devicePtr', 'count', 'stream', 'outPtr', 'data', 'out',
  'peer', 'tag', 'group', 'scale', 'splits',
] as const satisfies readonly (keyof NativeItem)[];

/**
 * An item's kind, op, dtype and algorithm, four bits each: the one encoding of them across the boundary
 * (native/binding/work_calls.cc decodeCode reads it, for every way in). A batch's item carries it as
 * `code`; collective() and message() take it in packCode()'s code.
 */
export function itemCode(kind: NativeKind, op: NativeOp, dtype: NativeDType, algorithm = NativeAlgorithm.Auto): number {
  return kind | (op << 4) | (dtype << 8) | (algorithm << 12);
}

/**
 * The one builder of an item: every plan, process-group call and placeholder makes its item here. A
 * message's peer and tag are in the same literal (a property added to an object afterwards takes an
 * allocation of its own, on the small-message path), and a collective's item has the same eight fields
 * as ever. The rest (scale, group, a device item's fields, invalidReason) is added by the few callers
 * that need it. The addon reads every field with one reader (native/binding/work_calls.cc), whichever way
 * in the item takes: Submit for an object, FillOne and FillMessage for packCode()'s positional form.
 */
export function nativeItem(kind: NativeKind, op: NativeOp, dtype: NativeDType, root: number, name: string,
  data: ArrayBufferView | null, out: ArrayBufferView | null, peer?: number, tag?: number): Omit<NativeItem, 'id'> {
  const code = itemCode(kind, op, dtype);
  if (peer === undefined) return { code, kind, op, dtype, root, name, data, out };
  return { code, kind, op, dtype, root, name, data, out, peer, tag };
}

/** Bytes an item moves in from this rank: its host view, or count elements of device memory. */
export function itemBytes(item: Omit<NativeItem, 'id'>): number {
  if (item.data) return item.data.byteLength;
  return item.devicePtr !== undefined ? (item.count ?? 0) * DTYPE_BYTES[item.dtype] : 0;
}

/**
 * How a lone collective or message handed to collective() or message() is to be waited for: its bits in
 * packCode()'s code (native/binding/communicator.h kWillWait, kWaitNow).
 */
export const enum Manner {
  /** Awaited: it completes through the completion callback (or result() when spun for). */
  Awaited = 0,
  /** The caller goes on to result(id, -1) at once (and runs the batch itself when the engine is idle). */
  WillWait = 1 << 16,
  /** Handed in and waited for in the same call (a wait() on an item alone in its batch). */
  WaitNow = 1 << 20,
}

/**
 * The code argument of collective() and message(): the item's code (itemCode(): kind, op, dtype and
 * algorithm, four bits each); then the manner of waiting (bits 16 and 20, Manner), and whether data, out
 * and name are given (bits 17-19). Node-API copies a call's first six arguments into its frame and any
 * more into a heap array: packed, a small collective's or message's call stays within six, and the addon
 * asks for no argument that is absent.
 */
export function packCode(item: NativeItem, manner = Manner.Awaited): number {
  return item.code | manner | (item.data ? 1 << 17 : 0) | (item.out ? 1 << 18 : 0) | (item.name ? 1 << 19 : 0);
}
