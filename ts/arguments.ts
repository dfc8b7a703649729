/**
 * The checks of a call's arguments that the collectives (ts/collectives.ts) and messages (ts/messages.ts)
 * share. Each failure is a HoraError in invalidArgument()'s one shape (ts/errors.ts): the call, the
 * argument, what it must be and what it was.
 */
import { DeviceBuffer, collectivePointer } from './device-buffer';
import { HoraError, KnownOptions, checkOptionKeys, describeValue, invalidArgument } from './errors';
import { DTYPE_OF_NAME, NativeDType, NativeOp, OP_NAMES, lookupName, valueOfName, valuesOf } from './native';
import type { AllreduceOptions, DType, ReduceOp } from './types';
import { joinedWorld } from './world';

const OPS = valueOfName(OP_NAMES) as Record<ReduceOp, NativeOp>;
const OP_LIST = valuesOf(OP_NAMES).map((op) => `'${op}'`).join(', ');

const TYPE_LIST = 'a Float32Array, Float64Array, Int32Array, BigInt64Array, Uint8Array, Int8Array, Int16Array, ' +
  "Uint16Array (with dtype 'uint16', 'float16' or 'bfloat16') or hora.cuda.DeviceBuffer";

/** x's dtype; `argument`: how errors name x (a grouped call's 'tensors[i]'). */
export function dtypeOf(collective: string, x: unknown, dtype: unknown, rank: number, argument = 'x'): NativeDType {
  // The typed arrays first: they are the usual input, and each test of an instanceof walks x's prototypes.
  let natural: NativeDType | undefined;
  if (x instanceof Float32Array) natural = NativeDType.Float32;
  else if (x instanceof Float64Array) natural = NativeDType.Float64;
  else if (x instanceof Int32Array) natural = NativeDType.Int32;
  else if (x instanceof BigInt64Array) natural = NativeDType.Int64;
  else if (x instanceof Uint8Array) natural = NativeDType.Uint8;
  else if (x instanceof Uint16Array) {
    // Never inferred: a float16 array whose dtype was forgotten must not become an integer sum.
    if (dtype === 'float16') return NativeDType.Float16;
    if (dtype === 'bfloat16') return NativeDType.BFloat16;
    if (dtype === 'uint16') return NativeDType.Uint16;
    throw invalidArgument(collective, 'options.dtype', "'uint16', 'float16' or 'bfloat16' for a Uint16Array", dtype, rank);
  } else if (x instanceof Int8Array) natural = NativeDType.Int8;
  else if (x instanceof Int16Array) natural = NativeDType.Int16; else if (x instanceof DeviceBuffer) {
    return deviceDtypeOf(collective, x, dtype, rank);
  } else {
    throw invalidArgument(collective, argument, TYPE_LIST, x, rank);
  }
  if (dtype !== undefined && DTYPE_OF_NAME[dtype as DType] !== natural) {
    throw invalidArgument(collective, 'options.dtype', `undefined or the array's own type`, dtype, rank);
  }
  const view = x as ArrayBufferView;
  if (view.byteLength === 0 && view.buffer.byteLength === 0) {
    try {
      new Uint8Array(view.buffer);
    } catch {
      throw new HoraError('ERR_INVALID_ARGUMENT',
        `hora.${collective}: argument '${argument}' must be an array whose buffer is not detached; received ${x.constructor.name} over a detached ArrayBuffer`, rank);
    }
  }
  return natural;
}

function deviceDtypeOf(collective: string, x: DeviceBuffer, dtype: unknown, rank: number): NativeDType {
  collectivePointer(collective, x, rank);
  if (dtype !== undefined && dtype !== x.dtype) {
    throw invalidArgument(collective, 'options.dtype', `undefined or the DeviceBuffer's own dtype ('${x.dtype}')`, dtype, rank);
  }
  // One GPU per rank, as in Horovod: the engine's streams, IPC and NCCL state belong to the device of
  // the first device collective.
  const w = joinedWorld();
  if (w?.dispatcher) {
    if (w.gpu === undefined) w.gpu = x.device;
    else if (x.device !== w.gpu) {
      throw invalidArgument(collective, 'x', `a DeviceBuffer on device ${w.gpu}, the GPU of this rank's earlier ` +
        'device collectives (hora runs one GPU per rank)', x, rank);
    }
  }
  return DTYPE_OF_NAME[x.dtype];
}

export function optionsObject<T extends object>(collective: string, options: unknown, known: KnownOptions, rank: number): Partial<T> {
  if (options === undefined) return {};
  if (options === null || typeof options !== 'object') throw invalidArgument(collective, 'options', 'an object', options, rank);
  checkOptionKeys(collective, options, known, rank);
  return options as Partial<T>;
}

/**
 * prescaleFactor and postscaleFactor of an allreduce or reducescatter of x (dtype): [pre, post], or
 * undefined when both are 1. Float dtypes of host memory only: the device kernels do not scale yet.
 */
export function scaleOf(collective: string, o: Partial<AllreduceOptions>, x: unknown, dtype: NativeDType, rank: number): [number, number] | undefined {
  const pre = factorOf(collective, 'prescaleFactor', o.prescaleFactor, rank);
  const post = factorOf(collective, 'postscaleFactor', o.postscaleFactor, rank);
  if (pre === 1 && post === 1) return undefined;
  const key = pre !== 1 ? 'prescaleFactor' : 'postscaleFactor';
  if (dtype !== NativeDType.Float32 && dtype !== NativeDType.Float64 && dtype !== NativeDType.Float16 && dtype !== NativeDType.BFloat16) {
    throw invalidArgument(collective, `options.${key}`, '1 or absent for an integer dtype (the factors scale float32, float64, ' +
      `float16 and bfloat16 data; x is ${describeValue(x)})`, o[key], rank);
  }
  if (!ArrayBuffer.isView(x)) {
    throw invalidArgument(collective, `options.${key}`, '1 or absent for a hora.cuda.DeviceBuffer (the device kernels do not scale yet: ' +
      'pass a host array, or scale on the device before and after)', o[key], rank);
  }
  return [pre, post];
}

/** options.root: a rank of the world or group, default 0. */
export function rootOf(collective: string, root: unknown, size: number, rank: number): number {
  if (root === undefined) return 0;
  if (typeof root !== 'number' || !Number.isInteger(root) || root < 0 || root >= size) {
    throw invalidArgument(collective, 'options.root', `an integer rank from 0 to ${size - 1}`, root, rank);
  }
  return root;
}

function factorOf(collective: string, key: string, v: unknown, rank: number): number {
  if (v === undefined) return 1;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw invalidArgument(collective, `options.${key}`, 'a finite number', v, rank);
  return v;
}

export function opOf(collective: string, op: unknown, fallback: ReduceOp, rank: number): NativeOp {
  const name = op === undefined ? fallback : op;
  const v = lookupName(OPS, name);
  if (v === undefined) throw invalidArgument(collective, 'options.op', `one of ${OP_LIST}`, op, rank);
  return v;
}

export function nameOf(collective: string, name: unknown, rank: number): string {
  if (name === undefined) return '';
  if (typeof name !== 'string') throw invalidArgument(collective, 'options.name', 'a string', name, rank);
  return name;
}

export function booleanOf(collective: string, key: string, v: unknown, rank: number): boolean {
  if (v === undefined) return false;
  if (typeof v !== 'boolean') throw invalidArgument(collective, `options.${key}`, 'a boolean', v, rank);
  return v;
}
