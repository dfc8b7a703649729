/**
 * Why a DistributedOptimizer step's buckets failed with ERR_MISMATCH, in words (optimizer.ts): every rank
 * saw the same bucket fail, so every rank gathers every rank's bucket contents (names, counts, shapes) and
 * the message says what differs, most telling first: a variable's shape (the ranks built different
 * models), variables some ranks have no gradient for, else the packing itself.
 */
import * as hora from '../../ts/index';
import { HoraError } from '../../ts/internal';
import type { BucketedStep, SentVariable } from './buckets';
import type { Entry } from './gradient-arrays';

/** The error for failed buckets; a mismatch is explained by the variables (and shapes) each rank sent. */
export function explainFailure(errors: unknown[], step: BucketedStep, entries: Entry[]): unknown {
  const mismatch = errors.find((e) => e instanceof HoraError && e.code === 'ERR_MISMATCH') as HoraError | undefined;
  if (!mismatch) return errors[0];
  try {
    const shapes = new Map(entries.map((e) => [e.name, e.tensor ? e.tensor.shape : null]));
    const layout = step.sentLayout().map((bucket) => bucket.map((v) => ({ ...v, shape: shapes.get(v.name) ?? [v.count] })));
    return new HoraError('ERR_MISMATCH', `DistributedOptimizer: ${describeDifference(gatherLayouts(layout))}. Engine: ${mismatch.message}`, mismatch.rank, mismatch.peer);
  } catch {
    return mismatch;
  }
}

/** A variable as a bucket carried it, with its gradient's shape. */
type SentShape = SentVariable & { shape: number[] };

/**
 * Every rank's bucket contents, for an error message: two allgathers (lengths, then the layouts as JSON
 * padded to the longest), which every rank runs because every rank saw the same bucket fail.
 */
function gatherLayouts(mine: SentShape[][]): SentShape[][][] {
  const bytes = new TextEncoder().encode(JSON.stringify(mine));
  const lengths = hora.allgather(Int32Array.of(bytes.length), { name: 'tfjs gradient names: lengths' }).wait();
  const longest = Math.max(...lengths);
  const padded = new Uint8Array(longest);
  padded.set(bytes);
  const all = hora.allgather(padded, { name: 'tfjs gradient names' }).wait();
  const decoder = new TextDecoder();
  return Array.from(lengths, (n, r) => JSON.parse(decoder.decode(all.subarray(r * longest, r * longest + n))) as SentShape[][]);
}

/**
 * What differs between the ranks' buckets, most telling first: a variable whose shape differs (the ranks
 * built different models), then variables some ranks have no gradient for, else the packing itself.
 */
function describeDifference(perRank: SentShape[][][]): string {
  const byRank = perRank.map((buckets) => new Map(buckets.flat().map((v) => [v.name, v])));
  const names = [...new Set(perRank.flatMap((buckets) => buckets.flat().map((v) => v.name)))];
  const shapeText = (v: SentShape) => `${JSON.stringify(v.shape)} (${v.count} values)`;
  for (const name of names) {
    const seen = new Map<string, number[]>(); // shape text -> ranks
    byRank.forEach((vars, r) => {
      const v = vars.get(name);
      if (v) seen.set(shapeText(v), [...(seen.get(shapeText(v)) ?? []), r]);
    });
    if (seen.size > 1) {
      const sides = [...seen].map(([shape, ranks]) => `${shape} on rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')}`);
      const others = names.filter((n) => n !== name && new Set(byRank.filter((m) => m.has(n)).map((m) => shapeText(m.get(n) as SentShape))).size > 1);
      return `the ranks' variables differ in shape: '${name}' is ${sides.join(' and ')}` +
        (others.length > 0 ? ` (and ${others.length} more: ${others.join(', ')})` : '') +
        ', so no bucket was averaged. Every rank must build the same model, with the same layer sizes';
    }
  }
  const lacks: string[] = [];
  byRank.forEach((vars, r) => {
    const missing = names.filter((n) => !vars.has(n));
    if (missing.length > 0) lacks.push(`rank ${r} has no gradient for ${missing.join(', ')}`);
  });
  const advice = 'Every rank must compute a gradient for every variable it trains, every step (a branch that ' +
    "some ranks' loss does not use gives those ranks no gradient for its variables)";
  if (lacks.length > 0) {
    return `the ranks computed gradients for different variables, so no bucket was averaged: ${lacks.join('; ')} (which other ranks have). ${advice}`;
  }
  const listed = perRank.map((b, r) => `rank ${r}: ${JSON.stringify(b.map((bucket) => bucket.map((v) => v.name)))}`).join('; ');
  return `the ranks computed gradients for the same variables, packed differently, so no bucket was averaged: ${listed}. ${advice}`;
}
