/**
 * The steps every elastic state takes to commit and to sync, whatever it holds: hora.elastic.State
 * (./state.ts) and the adapters' ElasticState (adapters/tfjs/elastic.ts, adapters/brain/elastic.ts, through
 * ts/internal.ts), which add only how to read and write their framework's tensors.
 *
 * A commit copies arrays into buffers kept from one commit to the next (keepCopy). A sync is: root tells
 * the others what it holds (broadcastHeader), every rank compares that with its own and says whether it
 * matches (ranksThatDiffer), so that all ranks fail together or none does, and then the arrays' bytes go
 * from root to all.
 */
import { HoraError } from '../errors';
import { allgather, broadcast } from '../hora';

/** An array of numbers a state keeps: a typed array of any type. */
export type KeptArray =
  | Int8Array | Uint8Array | Uint8ClampedArray | Int16Array | Uint16Array | Int32Array | Uint32Array
  | Float32Array | Float64Array | BigInt64Array | BigUint64Array;

/**
 * A copy of `values` for a commit: written into `into` when that is an array of the same type and length
 * (no allocation, so a commit costs one memory copy while the shapes stay the same), else a new array.
 */
export function keepCopy<A extends KeptArray>(values: A, into: A | undefined): A {
  if (into === undefined || into.length !== values.length || into.constructor !== values.constructor) return values.slice() as A;
  (into as unknown as { set(x: ArrayLike<unknown>): void }).set(values as ArrayLike<unknown>);
  return into;
}

/**
 * Root's header, a JSON value made by `make()` (called on root only), on every rank: its length, then
 * its bytes, as the collectives `${name} length` and `${name}`.
 */
export async function broadcastHeader<T>(make: () => T, root: number, isRoot: boolean, name: string): Promise<T> {
  let bytes = new Uint8Array(0);
  if (isRoot) bytes = new Uint8Array(Buffer.from(JSON.stringify(make()), 'utf8'));
  const length = await broadcast(new Float64Array([bytes.length]), { root, name: `${name} length` });
  if (!isRoot) bytes = new Uint8Array(length[0]);
  await broadcast(bytes, { root, inplace: true, name });
  return JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8')) as T;
}

/**
 * Every rank says whether what it holds matches root's (`matches`); resolves with the ranks that do not,
 * the same list on every rank, through the collective `name`.
 */
export async function ranksThatDiffer(matches: boolean, name: string): Promise<number[]> {
  const flags = await allgather(new Int32Array([matches ? 1 : 0]), { name });
  return [...flags].flatMap((ok, r) => (ok ? [] : [r]));
}

/** `rank 3` or `ranks 1, 4`. */
export function rankList(ranks: number[]): string {
  return `rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')}`;
}

/** The error every rank throws when ranks differ from root: "{what} of {ranks} differ(s) from root N's: why". */
export function differsFromRoot(where: string, what: string, verb: string, bad: number[], root: number, why: string, rank: number): HoraError {
  return new HoraError('ERR_MISMATCH', `${where}: the ${what} of ${rankList(bad)} ${verb} from root ${root}'s` + (why ? `: ${why}` : ''), rank);
}
