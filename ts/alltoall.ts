/**
 * alltoall and scatter (Horovod's alltoall with splits, torch's all_to_all_single and scatter, MPI's
 * Alltoallv and Scatterv), for the world and, through a group's Scope, for process groups (ts/group.ts).
 *
 * Each is one collective of kind Alltoall or Scatter (ts/native.ts), its per-rank counts in the item's
 * `splits`; the engine agrees on kind, dtype, root and name, learns the counts that come to each rank
 * (one exchange of counts, or the caller's recvSplits, whose consistency with every sender's splits the
 * agreement checks), and runs the pairwise exchange of native/src/algorithms/alltoall.cc. What comes in
 * is memory the engine allocated, handed back as an allgather's is (NativeResult.gathered and counts).
 *
 * Host typed arrays only: a hora.cuda.DeviceBuffer is refused with ERR_INVALID_ARGUMENT.
 */
import { dtypeOf, nameOf, optionsObject, rootOf } from './arguments';
import { DeviceBuffer } from './device-buffer';
import { HoraError, describeValue, invalidArgument, knownOptions } from './errors';
import { NativeKind, NativeOp, NativeResult, nativeItem } from './native';
import type { AlltoallOptions, AlltoallResult, ScatterOptions, Tensor } from './types';
import { Plan, submitCollective } from './collectives';
import { Scope } from './world';
import { Work } from './work';
import { Lend } from './lend';

const ALLTOALL_OPTIONS = knownOptions<AlltoallOptions>({ splits: true, recvSplits: true, out: true, name: true, dtype: true });
const SCATTER_OPTIONS = knownOptions<ScatterOptions>({ root: true, splits: true, name: true, dtype: true });

/**
 * Rank r sends splits[q] elements of x to rank q (x cut in rank order) and receives what every rank sends
 * it, concatenated in rank order: the Work resolves to {data, splits}, data a new array of x's type and
 * splits the elements received from each rank. splits omitted or empty: x cut into size() equal parts
 * (x.length must divide by size()). recvSplits, when each rank knows what comes to it, spares the exchange of
 * counts; the agreement checks them against every sender's splits (ERR_MISMATCH on every rank).
 */
export function alltoall<T extends Tensor>(x: T, options?: AlltoallOptions): Work<AlltoallResult<T>> {
  return submitCollective(null, 'alltoall', alltoall, planAlltoall as (w: Scope, a: unknown, b: unknown) => Plan<AlltoallResult<T>>, x, options);
}

/**
 * The root's x cut by splits (root's option; equal parts when omitted), part q to rank q: the Work
 * resolves on every rank to its part, a new array of x's type. Other ranks' x gives only the dtype (its
 * length and values are not read), and their splits are not read.
 */
export function scatter<T extends Tensor>(x: T, options?: ScatterOptions): Work<T> {
  return submitCollective(null, 'scatter', scatter, planScatter as (w: Scope, a: unknown, b: unknown) => Plan<T>, x, options);
}

/** @internal For process groups: the plan of an alltoall, submitted with the group's Scope. */
export function planAlltoall(w: Scope, x: Tensor, options: AlltoallOptions | undefined): Plan<AlltoallResult<Tensor>> {
  const c = w.prefix + 'alltoall';
  const o = optionsObject<AlltoallOptions>(c, options, ALLTOALL_OPTIONS, w.self);
  const dtype = hostDtypeOf(c, x, o.dtype, w.self);
  const name = nameOf(c, o.name, w.self);
  // Empty splits mean equal parts and empty recvSplits none, as Horovod's and torch's empty split lists do.
  // The item's splits: what this rank sends each rank, then (known here) what it receives from each.
  const p = w.size;
  const knowsRecv = !isEmpty(o.recvSplits) || o.out !== undefined;
  const splits = new Float64Array(knowsRecv ? 2 * p : p);
  if (isEmpty(o.splits)) equalParts(c, x.length, p, w.self, splits, 0);
  else sumsTo(c, countsInto(c, 'splits', o.splits, w.self, splits, 0, p), x.length, o.splits, w.self);
  const out = o.out === undefined ? null : outOf(c, x, o.out, w.self);
  if (!isEmpty(o.recvSplits)) {
    const sum = countsInto(c, 'recvSplits', o.recvSplits, w.self, splits, p, p);
    if (out) sumsTo(c, sum, out.length, o.recvSplits, w.self, 'options.recvSplits', 'options.out.length');
  } else if (out) {
    if (out.length % p !== 0) {
      throw invalidArgument(c, 'options.out', `an array whose length divides by the ${p} ranks when recvSplits is not given ` +
        `(it is cut into equal parts)`, out, w.self);
    }
    splits.fill(out.length / p, p);
  }
  const Ctor = x.constructor as new (buffer: ArrayBuffer) => Tensor;
  const item = nativeItem(NativeKind.Alltoall, NativeOp.Sum, dtype, 0, name, x, out);
  item.splits = splits;
  // A world of one checks its recvSplits here, as the agreement would (the plan's error rejects the Work).
  if (p === 1 && knowsRecv && splits[1] !== x.length) {
    throw new HoraError('ERR_MISMATCH', `hora.${c}: rank ${w.self} sends ${x.length} elements to rank ${w.self} (its options.splits), ` +
      `but expects ${splits[1]} from it (its options.recvSplits)`, w.self);
  }
  if (out) {
    const local = (): AlltoallResult<Tensor> => ((out as Float32Array).set(x as Float32Array), { data: out, splits: [x.length] });
    // What came is what recvSplits said (the agreement checked it), so the addon hands back plain success.
    const finish = (): AlltoallResult<Tensor> => {
      const came = new Array<number>(p);
      for (let i = 0; i < p; i++) came[i] = splits[p + i];
      return { data: out, splits: came };
    };
    return { item, finish, keep: [x, out], local, value: undefined, lends: Lend.Reads };
  }
  const local = (): AlltoallResult<Tensor> => ({ data: x.slice(), splits: [x.length] });
  const finish = (r: NativeResult): AlltoallResult<Tensor> => ({ data: new Ctor(r.gathered as ArrayBuffer), splits: r.counts ?? [] });
  return { item, finish, keep: [x], local, value: undefined, lends: Lend.Reads };
}

/** @internal For process groups: the plan of a scatter, submitted with the group's Scope. */
export function planScatter(w: Scope, x: Tensor, options: ScatterOptions | undefined): Plan<Tensor> {
  const c = w.prefix + 'scatter';
  const o = optionsObject<ScatterOptions>(c, options, SCATTER_OPTIONS, w.self);
  const dtype = hostDtypeOf(c, x, o.dtype, w.self);
  const root = rootOf(c, o.root, w.size, w.self);
  const name = nameOf(c, o.name, w.self);
  const item = nativeItem(NativeKind.Scatter, NativeOp.Sum, dtype, root, name, x, null);
  if (w.rank === root) {
    const splits = new Float64Array(w.size);
    if (isEmpty(o.splits)) equalParts(c, x.length, w.size, w.self, splits, 0);
    else sumsTo(c, countsInto(c, 'splits', o.splits, w.self, splits, 0, w.size), x.length, o.splits, w.self);
    item.splits = splits;
  }
  const Ctor = x.constructor as new (buffer: ArrayBuffer) => Tensor;
  return {
    item, finish: (r) => new Ctor(r.gathered as ArrayBuffer), keep: [x], local: () => x.slice(), value: undefined,
    lends: Lend.Reads,
  };
}

/** x's dtype; a DeviceBuffer is refused (alltoall and scatter take host memory). */
function hostDtypeOf(c: string, x: unknown, dtype: unknown, rank: number) {
  if (x instanceof DeviceBuffer) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${c}: argument 'x' must be a typed array: ${c.replace('group.', '')} takes ` +
      'host memory, not a hora.cuda.DeviceBuffer (copy it to the host with toHost() first)', rank);
  }
  return dtypeOf(c, x, dtype, rank);
}

/** options.out: an array of x's type (so of its dtype) over memory apart from x's. */
function outOf(c: string, x: Tensor, out: unknown, rank: number): Tensor {
  if (!ArrayBuffer.isView(out) || out.constructor !== x.constructor) {
    throw invalidArgument(c, 'options.out', `a ${x.constructor.name} (x's type) to receive into`, out, rank);
  }
  const o = out as Tensor;
  if (o.buffer === x.buffer && o.byteOffset < x.byteOffset + x.byteLength && x.byteOffset < o.byteOffset + o.byteLength) {
    throw invalidArgument(c, 'options.out', 'an array apart from x (what x sends would be overwritten while it is sent)', out, rank);
  }
  return o;
}

/** Splits omitted, or an empty array (or typed array). */
function isEmpty(v: unknown): boolean {
  return v === undefined || ((Array.isArray(v) || ArrayBuffer.isView(v)) && (v as ArrayLike<unknown>).length === 0);
}

/** size equal parts of n elements, written to into[at ...]. */
function equalParts(c: string, n: number, size: number, rank: number, into: Float64Array, at: number): void {
  if (n % size !== 0) {
    throw invalidArgument(c, 'options.splits', `given when x.length (${n}) does not divide by the ${size} ranks (equal parts need it to)`,
      undefined, rank);
  }
  into.fill(n / size, at, at + size);
}

/**
 * options[key]: an array (or typed array) of size counts of elements, each a non-negative integer, written
 * to into[at ...]. Returns their sum.
 */
function countsInto(c: string, key: string, v: unknown, rank: number, into: Float64Array, at: number, size: number): number {
  const arrayLike = Array.isArray(v) || (ArrayBuffer.isView(v) && !(v instanceof DataView) && !(v instanceof BigInt64Array) &&
    !(v instanceof BigUint64Array));
  if (!arrayLike || (v as ArrayLike<unknown>).length !== size) {
    throw invalidArgument(c, `options.${key}`, `an array of ${size} counts of elements, one for each rank (or empty)`, v, rank);
  }
  const a = v as ArrayLike<unknown>;
  let sum = 0;
  for (let i = 0; i < size; i++) {
    const n = a[i];
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
      throw invalidArgument(c, `options.${key}[${i}]`, 'a non-negative integer count of elements', n, rank);
    }
    into[at + i] = n;
    sum += n;
  }
  return sum;
}

function sumsTo(c: string, sum: number, n: number, given: unknown, rank: number, key = 'options.splits', length = 'x.length'): void {
  if (sum !== n) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${c}: argument '${key}' must sum to ${length} (${n}); ` +
      `received ${describeValue(given)} that sums to ${sum}`, rank);
  }
}
