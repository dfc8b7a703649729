/**
 * hora.checkpoint's errors (ts/checkpoint.ts): a rank's failure as the collectives of a save or a load share
 * it, the one error every rank throws from the shared list, and the checks of the arguments every call takes.
 */
import * as path from 'node:path';
import { HoraError, invalidArgument } from './errors';

/** A rank's failure as the object collectives carry it (an ERR_IO with its OS code and file). */
export interface ErrorInfo { code: string; message: string; osCode?: string; path?: string }

/** A HoraError from this rank's failure, for the collective that shares it. */
export function errorInfo(e: unknown): ErrorInfo {
  if (e instanceof HoraError) return e.osCode === undefined ? { code: e.code, message: e.message } : { code: e.code, message: e.message, osCode: e.osCode, path: e.path };
  return { code: 'ERR_INTERNAL', message: `hora.checkpoint: ${(e as Error)?.stack ?? String(e)}` };
}

/** The error of the lowest failed rank, thrown on every rank (each sees the same list). */
export function agreedFailure(errors: (ErrorInfo | null)[], self: number): HoraError | null {
  const failed = errors.map((e, q) => (e ? q : -1)).filter((q) => q >= 0);
  if (failed.length === 0) return null;
  const first = errors[failed[0]] as ErrorInfo;
  const also = failed.length > 1 ? ` (ranks ${failed.slice(1).join(', ')} failed too)` : '';
  const where = failed[0] === self ? '' : `rank ${failed[0]} failed: `;
  return new HoraError(first.code, `${where}${first.message}${also}`, self, failed[0] === self ? -1 : failed[0],
    first.osCode === undefined ? undefined : { osCode: first.osCode, path: first.path ?? '' });
}

export function mismatch(message: string, rank: number): HoraError {
  return new HoraError('ERR_MISMATCH', `hora.checkpoint.load: ${message}`, rank);
}

export function stepOf(c: string, key: string, v: unknown, rank: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw invalidArgument(c, key, 'an integer >= 0', v, rank);
  return v;
}

export function dirOf(c: string, dir: unknown, rank: number): string {
  if (typeof dir !== 'string' || dir === '') throw invalidArgument(c, 'dir', 'a non-empty string (a directory path)', dir, rank);
  return path.resolve(dir);
}
