/**
 * Buckets: gradients packed, in the order they become final, into allreduces of about `bucketBytes`
 * each, so that communication starts during the backward pass without one collective per variable.
 *
 * The first step has no plan: every gradient goes into one bucket after the pass, and the order they
 * became final is recorded. That order, cut into buckets, is the plan for every later step (DDP's bucket
 * rebuild). A bucket goes out as soon as all of its variables are in and every bucket before it has
 * gone, so every rank issues the same collectives in the same order. The last bucket always waits for
 * the end of the pass and also carries whatever the plan did not foresee (a variable new since the first
 * step, one the hooks could not follow, a gradient replaced before applyGradients): with those at the
 * end, every step issues the plan's number of collectives whatever its gradients.
 *
 * The order inside a bucket is the same on every rank whatever order the gradients were handed over in:
 * the plan's order, then the extras sorted by name. A bucket's collective name holds a hash of its
 * variables' names and sizes, and every bucket is submitted as a batch of its own, so the engine's agreement
 * compares that name bucket by bucket (never only the total of a fused run): ranks with different sets of
 * gradients (a branch one rank's loss did not use) or different shapes fail that bucket with ERR_MISMATCH
 * before any data moves, and nothing is averaged with the wrong tensor.
 *
 * A step may carry one number more (`carries`): a float after the last bucket's gradients, reduced with
 * them (DistributedOptimizer's sample count, see optimizer.ts), so that it costs no collective of its own.
 * The last bucket's name then says so, and a rank that carries it against one that does not fails that
 * bucket with ERR_MISMATCH.
 */

/**
 * Starts one allreduce of `data` named `name`; the returned function waits and gives the result. tail:
 * data's last element is the carried number, not a gradient; counts: the sizes of the variables data
 * concatenates (a reduceScatter cuts each of them, zero.ts).
 */
export type Submit = (data: Float32Array, name: string, tail: boolean, counts: readonly number[]) => () => Float32Array;

export interface PlannedBucket {
  names: string[];
  counts: number[];
  offsets: number[];
  total: number;
}

/** Cuts the variables, in the order their gradients became final, into buckets of at least `bucketBytes`. */
export function planBuckets(order: Array<{ name: string; count: number }>, bucketBytes: number): PlannedBucket[] {
  const buckets: PlannedBucket[] = [];
  let cur: PlannedBucket = { names: [], counts: [], offsets: [], total: 0 };
  for (const { name, count } of order) {
    cur.names.push(name);
    cur.counts.push(count);
    cur.offsets.push(cur.total);
    cur.total += count;
    if (cur.total * 4 >= bucketBytes) {
      buckets.push(cur);
      cur = { names: [], counts: [], offsets: [], total: 0 };
    }
  }
  if (cur.names.length > 0 || buckets.length === 0) buckets.push(cur);
  return buckets;
}

/**
 * FNV-1a, 32 bits, as 8 hex digits: a short name that changes with the variable list and their shapes
 * (their sizes where no shape is known), so [2, 3] on one rank against [3, 2] on another differs too.
 */
function hashLayout(names: string[], counts: number[], shapeOf: ShapeOf): string {
  let h = 0x811c9dc5;
  const mix = (text: string) => {
    for (let i = 0; i < text.length; i++) {
      h ^= text.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    h ^= 0x0a;
    h = Math.imul(h, 0x01000193) >>> 0;
  };
  names.forEach((name, i) => {
    mix(name);
    mix(String(shapeOf(name) ?? counts[i]));
  });
  return h.toString(16).padStart(8, '0');
}

/** A variable and its size, as a bucket carried it. */
export interface SentVariable {
  name: string;
  count: number;
}

interface Sent {
  names: string[];
  counts: number[];
  offsets: number[];
  finish: () => Float32Array;
  /** The data's last element is the carried number. */
  tail: boolean;
}

/** A variable's shape by its name, where known. */
export type ShapeOf = (name: string) => readonly number[] | undefined;

/** One communicating backward pass: collects final gradients into the plan's buckets and sends them. */
export class BucketedStep {
  /** Bucket index of each planned variable. */
  private readonly bucketOf = new Map<string, number>();
  private readonly buffers: Array<Float32Array | null>;
  private readonly present: Array<Set<string>>;
  private readonly extras: Array<{ name: string; values: Float32Array }> = [];
  private readonly sent: Sent[] = [];
  /** Every variable in the order it became final (the next plan, on the first step). */
  readonly arrivals: Array<{ name: string; count: number }> = [];
  /** performance.now() when the first bucket went out, or null. */
  firstSentAt: number | null = null;
  private next = 0;
  /** The number the last bucket carries (complete()). */
  private carry = 0;

  /** carries: the last bucket carries one number after its gradients (complete(carry)). */
  constructor(private readonly plan: PlannedBucket[], private readonly submit: Submit, private readonly flush: () => void,
    private readonly shapeOf: ShapeOf = () => undefined, readonly carries = false) {
    plan.forEach((b, i) => b.names.forEach((n) => this.bucketOf.set(n, i)));
    this.buffers = plan.map(() => null);
    this.present = plan.map(() => new Set<string>());
  }

  /** How many buckets have gone out so far. */
  get submitted(): number {
    return this.sent.length;
  }

  /** A variable's final gradient; copied, so `values` may be reused after the call. */
  add(name: string, values: Float32Array): void {
    this.arrivals.push({ name, count: values.length });
    const b = this.bucketOf.get(name);
    if (b === undefined || b < this.next || this.present[b].has(name)) {
      this.extras.push({ name, values: values.slice() });
      return;
    }
    const bucket = this.plan[b];
    const k = bucket.names.indexOf(name);
    if (bucket.counts[k] !== values.length) {
      this.extras.push({ name, values: values.slice() });
      return;
    }
    let buffer = this.buffers[b];
    if (!buffer) buffer = this.buffers[b] = new Float32Array(bucket.total + this.tailOf(b));
    buffer.set(values, bucket.offsets[k]);
    this.present[b].add(name);
    const last = this.plan.length - 1;
    let any = false;
    while (this.next < last && this.present[this.next].size === this.plan[this.next].names.length) {
      this.send(this.next++);
      any = true;
    }
    // The JS thread stays in the backward pass: hand the bucket to the communication thread now.
    if (any) this.flush();
  }

  /**
   * Sends every bucket not yet sent (the last one with the extras, and `carry` when the step carries), each
   * as a batch of its own, and waits for all of them. carried: the carried number, reduced.
   */
  complete(carry = 0): { results: Map<string, Float32Array>; errors: unknown[]; carried: number | undefined } {
    this.carry = carry;
    let carried: number | undefined;
    while (this.next < this.plan.length) {
      this.send(this.next++);
      this.flush();
    }
    const results = new Map<string, Float32Array>();
    const errors: unknown[] = [];
    for (const s of this.sent) {
      let data: Float32Array;
      try {
        data = s.finish();
      } catch (e) {
        errors.push(e);
        continue;
      }
      s.names.forEach((n, i) => results.set(n, data.subarray(s.offsets[i], s.offsets[i] + s.counts[i])));
      if (s.tail) carried = data[data.length - 1];
    }
    return { results, errors, carried };
  }

  /** 1 for the bucket that carries the number (the last, when the step carries), else 0. */
  private tailOf(b: number): number {
    return this.carries && b === this.plan.length - 1 ? 1 : 0;
  }

  /** The variables each bucket carried, in order (for explaining a mismatch). */
  sentLayout(): SentVariable[][] {
    return this.sent.map((s) => s.names.map((name, i) => ({ name, count: s.counts[i] })));
  }

  private send(b: number): void {
    const bucket = this.plan[b];
    const isLast = b === this.plan.length - 1;
    const present = this.present[b];
    // Sorted by name (stably: a gradient replaced after the hooks sent it follows the one it replaces).
    const extras = isLast ? this.extras.slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)) : [];
    const tail = this.tailOf(b);
    let names: string[], counts: number[], offsets: number[], data: Float32Array;
    if (present.size === bucket.names.length && extras.length === 0) {
      ({ names, counts, offsets } = bucket);
      data = this.buffers[b] ?? new Float32Array(bucket.total + tail);
    } else {
      // Some planned gradient is missing this step, or there are extras: pack what there is.
      names = [];
      counts = [];
      offsets = [];
      let total = 0;
      bucket.names.forEach((n, i) => {
        if (!present.has(n)) return;
        names.push(n);
        counts.push(bucket.counts[i]);
        offsets.push(total);
        total += bucket.counts[i];
      });
      for (const e of extras) {
        names.push(e.name);
        counts.push(e.values.length);
        offsets.push(total);
        total += e.values.length;
      }
      data = new Float32Array(total + tail);
      const buffer = this.buffers[b];
      let at = 0;
      bucket.names.forEach((n, i) => {
        if (!present.has(n)) return;
        data.set((buffer as Float32Array).subarray(bucket.offsets[i], bucket.offsets[i] + bucket.counts[i]), at);
        at += bucket.counts[i];
      });
      for (const e of extras) {
        data.set(e.values, at);
        at += e.values.length;
      }
    }
    if (tail) data[data.length - 1] = this.carry;
    const name = `tfjs bucket ${b + 1}/${this.plan.length} (${names.length} tensors, #${hashLayout(names, counts, this.shapeOf)})${tail ? ' +1' : ''}`;
    if (this.firstSentAt === null) this.firstSentAt = performance.now();
    this.sent.push({ names, counts, offsets, finish: this.submit(data, name, tail === 1, counts), tail: tail === 1 });
  }
}
