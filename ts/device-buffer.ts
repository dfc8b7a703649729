/**
 * DeviceBuffer: CUDA device memory that every collective accepts in place of a typed array, and the
 * checks around it. The public surface is ts/cuda.ts (hora.cuda); the functions marked internal here
 * are for the collectives in ts/collectives.ts.
 *
 * A buffer's pointer is only handed to native code after the buffer has been checked to be live, and a
 * buffer lent to an outstanding collective cannot be freed until that collective settles: a use after
 * free is a HoraError here, never a fault on the communication thread.
 */
import { HoraError, describeValue, invalidArgument } from './errors';
import { loadNative } from './loader';
import { DTYPE_BYTES, DTYPE_NAMES, DTYPE_OF_NAME, NativeDType, lookupName, valuesOf } from './native';
import type { DType, NativeCuda, Tensor } from './native';

// int8, int16 and uint16 are host memory only: NCCL has no 16-bit integers and the device kernels no rows for them.
const HOST_ONLY: readonly DType[] = ['int8', 'int16', 'uint16'];
const DTYPE_LIST = valuesOf(DTYPE_NAMES).filter((d) => !HOST_ONLY.includes(d)).map((d) => `'${d}'`).join(', ');
const MAX_U64 = (1n << 64n) - 1n;

let nativeCuda: NativeCuda | null | undefined;
let loadFailure = '';

/** The addon's cuda object, or null when the addon does not load (loadFailure says why). */
function cudaAddon(): NativeCuda | null {
  if (nativeCuda === undefined) {
    try {
      nativeCuda = loadNative().cuda ?? null;
      if (!nativeCuda) loadFailure = 'the loaded hora addon has no CUDA interface; rebuild it (npm run build:native, or npm run build:cuda)';
    } catch (e) {
      nativeCuda = null;
      loadFailure = `the hora addon did not load: ${(e as Error).message}`;
    }
  }
  return nativeCuda;
}

/** True when this addon was built with CUDA (npm run build:cuda), whether or not a GPU is present. */
export function built(): boolean {
  return cudaAddon()?.built() ?? false;
}

/** True when DeviceBuffers can be made: a CUDA build, a driver and at least one visible GPU. Never throws. */
export function available(): boolean {
  return cudaAddon()?.available() ?? false;
}

/** CUDA devices visible to this process; 0 when !available(). Never throws. */
export function deviceCount(): number {
  return available() ? (cudaAddon() as NativeCuda).deviceCount() : 0;
}

/** Why available() is false (built without CUDA, no driver, no device), or '' when it is true. */
export function unavailableReason(): string {
  const c = cudaAddon();
  return c ? c.unavailableReason() : loadFailure;
}

/** The addon's cuda object once the caller may use a device; otherwise the HoraError that says why not. */
function requireCuda(where: string): NativeCuda {
  const c = cudaAddon();
  if (c && c.available()) return c;
  throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${where}: CUDA is not available: ${unavailableReason()}`);
}

/** Runs a native call, turning its Error into a HoraError that names the hora call. */
function native<T>(where: string, call: () => T): T {
  try {
    return call();
  } catch (e) {
    const err = e as Error & { code?: string };
    throw new HoraError(err.code ?? 'ERR_INTERNAL', `hora.${where}: ${err.message}`);
  }
}

// ---------------------------------------------------------------------------------------------------
// Argument checks, shared by the factories and the methods.

function dtypeArg(where: string, argument: string, v: unknown): DType {
  if (lookupName(DTYPE_OF_NAME, v) === undefined || HOST_ONLY.includes(v as DType)) {
    throw invalidArgument(where, argument, `one of ${DTYPE_LIST} (int8, int16 and uint16 are for host arrays only)`, v);
  }
  return v as DType;
}

function countArg(where: string, v: unknown, dtype: DType): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0 || !Number.isSafeInteger(v * DTYPE_BYTES[DTYPE_OF_NAME[dtype]])) {
    throw invalidArgument(where, 'count', 'a non-negative integer number of elements', v);
  }
  return v;
}

/** The integer check runs before availability is known; the range check after (see deviceInRange). */
function deviceArg(where: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw invalidArgument(where, 'device', 'a CUDA device index (an integer >= 0)', v);
  return v;
}

function deviceInRange(where: string, c: NativeCuda, device: number): void {
  const n = c.deviceCount();
  if (device >= n) {
    throw invalidArgument(where, 'device', `a CUDA device index from 0 to ${n - 1} (this process sees ${n} device${n === 1 ? '' : 's'})`, device);
  }
}

function pointerArg(where: string, v: unknown): bigint {
  if (typeof v !== 'bigint' || v <= 0n || v > MAX_U64) throw invalidArgument(where, 'pointer', 'a non-zero device address as a bigint', v);
  return v;
}

function streamArg(where: string, v: unknown): bigint {
  if (typeof v !== 'bigint' || v < 0n || v > MAX_U64) throw invalidArgument(where, 'stream', 'a cudaStream_t as a bigint (0n: the default stream)', v);
  return v;
}

/** The dtype an array holds: its own type, or options.dtype for a Uint16Array (float16 or bfloat16). */
function dtypeOfArray(where: string, array: unknown, dtype: unknown): DType {
  let natural: DType;
  if (array instanceof Float32Array) natural = 'float32';
  else if (array instanceof Float64Array) natural = 'float64';
  else if (array instanceof Int32Array) natural = 'int32';
  else if (array instanceof BigInt64Array) natural = 'int64';
  else if (array instanceof Uint8Array) natural = 'uint8';
  else if (array instanceof Uint16Array) {
    if (dtype === 'float16' || dtype === 'bfloat16') return dtype;
    throw invalidArgument(where, 'options.dtype', "'float16' or 'bfloat16' for a Uint16Array", dtype);
  } else {
    throw invalidArgument(where, 'array',
      'a Float32Array, Float64Array, Int32Array, BigInt64Array, Uint8Array or Uint16Array (with dtype float16 or bfloat16); ' +
      'int8, int16 and uint16 are for host arrays only', array);
  }
  if (dtype !== undefined && dtype !== natural) throw invalidArgument(where, 'options.dtype', `undefined or the array's own type ('${natural}')`, dtype);
  return natural;
}

/** A new host array for `count` elements of `dtype`. */
export function hostArray(dtype: DType, count: number): Tensor {
  switch (dtype) {
    case 'float32': return new Float32Array(count);
    case 'float64': return new Float64Array(count);
    case 'int32': return new Int32Array(count);
    case 'int64': return new BigInt64Array(count);
    case 'uint8': return new Uint8Array(count);
    case 'int8': return new Int8Array(count);
    case 'int16': return new Int16Array(count);
    case 'uint16':
    case 'float16':
    case 'bfloat16': return new Uint16Array(count);
  }
}

// ---------------------------------------------------------------------------------------------------
// DeviceBuffer.

interface State {
  pointer: bigint;
  freed: boolean;
  /** Outstanding collectives that point into it; free() refuses while > 0. */
  lent: number;
}

/** Per buffer: kept outside the object, so a look-alike object has none and is refused. */
const states = new WeakMap<DeviceBuffer, State>();
const CONSTRUCT = Symbol('DeviceBuffer');

/**
 * An owned buffer that becomes unreachable without free() still has its memory released, some time after
 * the garbage collector notices; free() releases it at once and is what a program should call.
 */
const collected = new FinalizationRegistry<bigint>((pointer) => {
  try {
    cudaAddon()?.free(pointer);
  } catch {
    // Nothing to tell: this runs outside any call of the program's.
  }
});

/**
 * CUDA device memory holding `count` elements of `dtype` on device `device`, usable wherever a collective
 * takes a typed array; the result stays on the device. Make one with DeviceBuffer.alloc, fromHost or wrap.
 */
export class DeviceBuffer {
  /** Element type. */
  readonly dtype: DType;
  /** Number of elements. */
  readonly count: number;
  /** CUDA device index (as cudaSetDevice counts them in this process). */
  readonly device: number;
  /** The cudaStream_t work on this buffer is ordered on (0n: the legacy default stream). */
  readonly stream: bigint;
  /** True when hora allocated the memory and free() releases it; false for wrap(), whose memory is the caller's. */
  readonly owned: boolean;

  /** @internal Use DeviceBuffer.alloc, fromHost or wrap. */
  constructor(token: symbol, pointer: bigint, dtype: DType, count: number, device: number, stream: bigint, owned: boolean) {
    if (token !== CONSTRUCT) {
      throw new HoraError('ERR_INVALID_ARGUMENT', 'hora.cuda.DeviceBuffer: make one with DeviceBuffer.alloc, DeviceBuffer.fromHost or DeviceBuffer.wrap');
    }
    this.dtype = dtype;
    this.count = count;
    this.device = device;
    this.stream = stream;
    this.owned = owned;
    states.set(this, { pointer, freed: false, lent: 0 });
    if (owned && pointer !== 0n) collected.register(this, pointer, this);
  }

  /**
   * Zero-filled device memory for `count` elements of `dtype` on `device` (default 0), owned by hora:
   * free() releases it.
   */
  static alloc(dtype: DType, count: number, device = 0): DeviceBuffer {
    const where = 'cuda.DeviceBuffer.alloc';
    const d = dtypeArg(where, 'dtype', dtype);
    const n = countArg(where, count, d);
    const dev = deviceArg(where, device);
    const c = requireCuda(where);
    deviceInRange(where, c, dev);
    const pointer = native(where, () => c.alloc(dev, n * DTYPE_BYTES[DTYPE_OF_NAME[d]]));
    return new DeviceBuffer(CONSTRUCT, pointer, d, n, dev, 0n, true);
  }

  /**
   * A copy of `array` in new device memory owned by hora. The dtype is the array's own; a Uint16Array
   * needs `dtype: 'float16'` or `'bfloat16'`.
   */
  static fromHost(array: Tensor, options: { device?: number; dtype?: DType } = {}): DeviceBuffer {
    const where = 'cuda.DeviceBuffer.fromHost';
    if (options === null || typeof options !== 'object') throw invalidArgument(where, 'options', 'an object', options);
    const d = dtypeOfArray(where, array, options.dtype);
    const dev = deviceArg(where, options.device ?? 0);
    const c = requireCuda(where);
    deviceInRange(where, c, dev);
    const buffer = new DeviceBuffer(CONSTRUCT, native(where, () => c.alloc(dev, array.byteLength)), d, array.length, dev, 0n, true);
    try {
      native(where, () => c.copyFromHost(dev, buffer.pointer, array, 0n));
    } catch (e) {
      buffer.free();
      throw e;
    }
    return buffer;
  }

  /**
   * Lends hora memory that something else owns (a framework's tensor): `count` elements of `dtype` at
   * `pointer` on `device`, with work ordered on `stream` (default 0n, the legacy default stream). The range
   * must lie inside one device allocation of that device. hora never frees it: free() only detaches this
   * buffer, and the owner must keep the memory alive until every collective given it has settled.
   */
  static wrap(pointer: bigint, dtype: DType, count: number, device: number, stream: bigint = 0n): DeviceBuffer {
    const where = 'cuda.DeviceBuffer.wrap';
    const p = pointerArg(where, pointer);
    const d = dtypeArg(where, 'dtype', dtype);
    const n = countArg(where, count, d);
    const dev = deviceArg(where, device);
    const s = streamArg(where, stream);
    const c = requireCuda(where);
    deviceInRange(where, c, dev);
    native(where, () => c.checkRange(dev, p, n * DTYPE_BYTES[DTYPE_OF_NAME[d]], s));
    return new DeviceBuffer(CONSTRUCT, p, d, n, dev, s, false);
  }

  /** Bytes of device memory: count times the element size. */
  get byteLength(): number {
    return this.count * DTYPE_BYTES[DTYPE_OF_NAME[this.dtype]];
  }

  /** The device address, as a bigint (throws once the buffer is freed). */
  get pointer(): bigint {
    return live(this, 'cuda.DeviceBuffer.pointer').pointer;
  }

  /** True once free() has been called. */
  get freed(): boolean {
    return states.get(this)?.freed ?? true;
  }

  /**
   * A new host array with the contents, after the work queued on the buffer's stream: Float32Array,
   * Float64Array, Int32Array, BigInt64Array, Uint8Array, or Uint16Array for float16 and bfloat16.
   */
  toHost(): Tensor {
    const where = 'cuda.DeviceBuffer.toHost';
    const s = live(this, where);
    const out = hostArray(this.dtype, this.count);
    const c = requireCuda(where);
    native(where, () => c.copyToHost(this.device, s.pointer, out, this.stream));
    return out;
  }

  /** Overwrites the contents with `array`, which must hold `count` elements of this buffer's dtype. */
  copyFromHost(array: Tensor): void {
    const where = 'cuda.DeviceBuffer.copyFromHost';
    const s = live(this, where);
    const d = dtypeOfArray(where, array, this.dtype === 'float16' || this.dtype === 'bfloat16' ? this.dtype : undefined);
    if (d !== this.dtype) throw invalidArgument(where, 'array', `an array of ${this.dtype} (the buffer's dtype)`, array);
    if (array.length !== this.count) throw invalidArgument(where, 'array', `an array of ${this.count} elements (the buffer's count)`, array);
    const c = requireCuda(where);
    native(where, () => c.copyFromHost(this.device, s.pointer, array, this.stream));
  }

  /**
   * A new buffer with the elements converted to `dtype` on the device: float32 to float16 or bfloat16
   * (rounded to nearest even) and back, or a plain copy when `dtype` is the buffer's own.
   */
  cast(dtype: DType): DeviceBuffer {
    const where = 'cuda.DeviceBuffer.cast';
    const s = live(this, where);
    const to = dtypeArg(where, 'dtype', dtype);
    const half = (t: DType) => t === 'float16' || t === 'bfloat16';
    if (!(to === this.dtype || (this.dtype === 'float32' && half(to)) || (half(this.dtype) && to === 'float32'))) {
      throw invalidArgument(where, 'dtype', `'${this.dtype}' or a conversion between float32 and float16 / bfloat16 (this buffer is ${this.dtype})`, dtype);
    }
    return castInto(where, this, s.pointer, to);
  }

  /**
   * Owned: releases the device memory now. Wrapped: only detaches hora from the memory, which stays its
   * owner's. Either way every later use of this buffer throws; calling free() again does nothing. Throws
   * while a collective given this buffer is outstanding: await it first.
   */
  free(): void {
    const where = 'cuda.DeviceBuffer.free';
    const s = states.get(this);
    if (!s) throw notABuffer(where, 'this', this);
    if (s.freed) return;
    if (s.lent > 0) {
      throw new HoraError('ERR_INVALID_ARGUMENT',
        `hora.${where}: ${describeBuffer(this)} is in use by ${s.lent} outstanding collective${s.lent === 1 ? '' : 's'}; await ${s.lent === 1 ? 'it' : 'them'} before freeing it`);
    }
    s.freed = true;
    if (!this.owned || s.pointer === 0n) return;
    collected.unregister(this);
    const c = cudaAddon();
    if (c) native(where, () => c.free(s.pointer));
  }

  toString(): string {
    return describeBuffer(this);
  }
}

/** "DeviceBuffer(float32 x 8 on device 0, freed)": for messages. */
function describeBuffer(b: DeviceBuffer): string {
  const s = states.get(b);
  return `DeviceBuffer(${b.dtype} x ${b.count} on device ${b.device}${b.owned ? '' : ', wrapped'}${s && s.freed ? ', freed' : ''})`;
}

function notABuffer(where: string, argument: string, v: unknown): HoraError {
  return new HoraError('ERR_INVALID_ARGUMENT',
    `hora.${where}: argument '${argument}' must be a DeviceBuffer made by DeviceBuffer.alloc, fromHost or wrap; received ${describeValue(v)} that was not`);
}

/** The state of a live buffer; a HoraError for a freed one or a look-alike. */
function live(b: DeviceBuffer, where: string): State {
  const s = states.get(b);
  if (!s) throw notABuffer(where, 'this', b);
  if (s.freed) throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${where}: the buffer was freed (${describeBuffer(b)})`);
  return s;
}

/** A new owned buffer on b's device and stream holding b's elements converted to `to` (a copy if the same). */
function castInto(where: string, b: DeviceBuffer, pointer: bigint, to: DType): DeviceBuffer {
  const c = requireCuda(where);
  const out = allocOn(where, to, b.count, b.device, b.stream);
  try {
    native(where, () => c.cast(b.device, pointer, DTYPE_OF_NAME[b.dtype], out.pointer, DTYPE_OF_NAME[to], b.count, b.stream));
  } catch (e) {
    out.free();
    throw e;
  }
  return out;
}

function allocOn(where: string, dtype: DType, count: number, device: number, stream: bigint): DeviceBuffer {
  const c = requireCuda(where);
  const pointer = native(where, () => c.alloc(device, count * DTYPE_BYTES[DTYPE_OF_NAME[dtype]]));
  return new DeviceBuffer(CONSTRUCT, pointer, dtype, count, device, stream, true);
}

// ---------------------------------------------------------------------------------------------------
// For the collectives (ts/collectives.ts).

/**
 * @internal The pointer of x given to a collective as argument 'x', checked: a buffer made by hora and not
 * freed. The message names the collective and the argument, as every other invalid argument's does.
 */
export function collectivePointer(collective: string, x: DeviceBuffer, rank: number): bigint {
  const s = states.get(x);
  if (!s) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${collective}: argument 'x' must be a DeviceBuffer made by ` +
      `DeviceBuffer.alloc, fromHost or wrap; received ${describeValue(x)} that was not`, rank);
  }
  if (s.freed) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${collective}: argument 'x' must be a DeviceBuffer that has not been freed; ` +
      `received ${describeBuffer(x)}`, rank);
  }
  return s.pointer;
}

/** @internal A new owned buffer with x's elements, on x's device and stream. */
export function deviceCopy(collective: string, x: DeviceBuffer): DeviceBuffer {
  return castInto(collective, x, collectivePointer(collective, x, -1), x.dtype);
}

/** @internal Zero-filled owned memory on `device`, ordered on `stream`. */
export function deviceAlloc(collective: string, dtype: DType, count: number, device: number, stream: bigint): DeviceBuffer {
  return allocOn(collective, dtype, count, device, stream);
}

/** @internal Device memory the engine allocated (a device allgather's result), now owned by a buffer. */
export function adoptDevicePointer(pointer: bigint, dtype: DType, count: number, device: number, stream: bigint): DeviceBuffer {
  return new DeviceBuffer(CONSTRUCT, pointer, dtype, count, device, stream, true);
}

/** @internal Marks a buffer as pointed into by an outstanding collective until the returned function is called. */
export function lend(b: DeviceBuffer): () => void {
  const s = states.get(b) as State;
  s.lent++;
  let returned = false;
  return () => {
    if (!returned) {
      returned = true;
      s.lent--;
    }
  };
}

/** @internal The DType name of a NativeDType. */
export function dtypeName(d: NativeDType): DType {
  return DTYPE_NAMES[d];
}
