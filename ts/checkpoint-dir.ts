/**
 * The checkpoint directory (ts/checkpoint.ts): the shared-filesystem probe, the `latest` pointer, files
 * replaced durably (temporary name, fsync, rename, fsync of the directory), and the removal of old steps (keep).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { HoraError, describeValue, ioError } from './errors';
import { dirOf, mismatch } from './checkpoint-errors';
import { MANIFEST } from './checkpoint-manifest';

export const LATEST = 'latest';

export function probePath(root: string, token: string): string {
  return path.join(root, `.probe-${token}`);
}

export async function writeProbe(root: string, token: string, rank: number): Promise<void> {
  try {
    await fs.promises.mkdir(root, { recursive: true });
    await fs.promises.writeFile(probePath(root, token), token);
  } catch (e) {
    throw ioError('checkpoint.save', 'write to the directory (argument \'dir\')', root, e, rank);
  }
}

/** The shared filesystem check: rank 0's probe, seen by this rank. */
export async function readProbe(root: string, token: string, rank: number): Promise<void> {
  let text = '';
  try {
    text = await fs.promises.readFile(probePath(root, token), 'utf8');
  } catch {
    text = '';
  }
  if (text !== token) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.checkpoint.save: argument 'dir' must be a directory on a filesystem shared by every rank, ` +
      `but rank ${rank} cannot see the file ${probePath(root, token)} that rank 0 wrote there: mount one shared filesystem (NFS, Lustre, ...) ` +
      'at the same path on every host, or pass a path on it', rank);
  }
}

/** The step `dir/latest` names, or null when there is none (this rank only: no collective). */
export async function latestStep(dir: string): Promise<number | null> {
  const root = dirOf('checkpoint.latestStep', dir, -1);
  let text: string;
  try {
    text = await fs.promises.readFile(path.join(root, LATEST), 'utf8');
  } catch {
    return null;
  }
  const m = /^step-(\d+)\s*$/.exec(text);
  return m ? Number(m[1]) : null;
}

export async function latestOf(root: string, rank: number): Promise<number> {
  const file = path.join(root, LATEST);
  let text: string;
  try {
    text = await fs.promises.readFile(file, 'utf8');
  } catch (e) {
    // No `latest`: not a checkpoint directory (the caller's argument). Any other failure is the filesystem's.
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw ioError('checkpoint.load', 'read', file, e, rank);
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.checkpoint.load: argument 'dir' must be a checkpoint directory, but rank ${rank} ` +
      `cannot read ${file} (ENOENT): no save completed there`, rank);
  }
  const m = /^step-(\d+)\s*$/.exec(text);
  if (!m) throw mismatch(`${file} must hold 'step-<n>'; it holds ${describeValue(text)}`, rank);
  return Number(m[1]);
}

export async function writeDurably(file: string, text: string): Promise<void> {
  const temp = `${file}.tmp-${process.pid}`;
  try {
    const fh = await fs.promises.open(temp, 'w');
    try {
      await fh.writeFile(text);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await fs.promises.rename(temp, file);
    await syncDir(path.dirname(file));
  } catch (e) {
    await removeQuietly(temp);
    throw ioError('checkpoint.save', 'write', file, e, 0);
  }
}

/** Removes the steps below `step` past the newest keep - 1 complete ones, and every unfinished step below it. */
export async function prune(root: string, step: number, keep: number): Promise<void> {
  const older: { n: number; dir: string; complete: boolean }[] = [];
  const names = await fs.promises.readdir(root).catch((e) => {
    throw ioError('checkpoint.save', 'list the old steps (keep) in', root, e, 0);
  });
  for (const name of names) {
    const m = /^step-(\d+)$/.exec(name);
    if (!m || Number(m[1]) >= step) continue;
    const dir = path.join(root, name);
    older.push({ n: Number(m[1]), dir, complete: fs.existsSync(path.join(dir, MANIFEST)) });
  }
  older.sort((a, b) => b.n - a.n);
  let kept = 1;
  for (const s of older) {
    if (s.complete && (keep === 0 || kept < keep)) {
      kept++;
      continue;
    }
    // The manifest first: a crash while removing leaves an unfinished step, never a corrupt complete one.
    await removeQuietly(path.join(s.dir, MANIFEST));
    await fs.promises.rm(s.dir, { recursive: true, force: true }).catch((e) => {
      throw ioError('checkpoint.save', 'remove the old step (keep)', s.dir, e, 0);
    });
  }
}

export async function syncDir(dir: string): Promise<void> {
  let fh: fs.promises.FileHandle | undefined;
  try {
    fh = await fs.promises.open(dir, 'r');
    await fh.sync();
  } catch {
    // Some filesystems refuse fsync on a directory; the rename is then as durable as they make it.
  } finally {
    await fh?.close();
  }
}

export async function removeQuietly(file: string): Promise<void> {
  await fs.promises.rm(file, { force: true }).catch(() => undefined);
}
