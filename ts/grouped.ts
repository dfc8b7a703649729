/**
 * Grouped calls: hora.grouped.allreduce / allgather / reduceScatter ([a, b, ...], options), Horovod's
 * grouped_allreduce, grouped_allgather and grouped_reducescatter, and the same on a process group.
 *
 * A group is its collective's items, planned as the single call plans them (ts/collectives.ts), queued as
 * one piece of the batch (Dispatcher.submitGroup: the cut by size never falls inside it), and answered by
 * one Work that resolves to the results in the order given. The engine takes them as any batch: a run of
 * small allreduces of one dtype is fused and agreed on as one collective, its layout tensor by tensor
 * (native/src/engine/layout.h); other items are agreed on one by one, in order.
 *
 * Names. Horovod names the i-th of n tensors of a group called `name` `name_<i>of<n>`; so does hora, and a
 * group without a name is `grouped.<call>.<k>`, k counting the grouped calls of the world (or process
 * group) so far. The names carry the group's length: ranks whose groups differ in length, or in a
 * tensor's count, fail at the first tensor with ERR_MISMATCH, instead of pairing a tensor with the other
 * rank's next call. A named batch is ordered by name (ts/batch-order.ts), which keeps a group together.
 *
 * A bad call (options, or an element) fails the whole group on this rank, and each of its n places in the
 * order is held by the invalid placeholder (submitInvalid), so every other rank fails the same group with
 * ERR_INVALID_ARGUMENT quoting this rank's reason (`tensors[i]`), and the ranks stay in step.
 */
import { dtypeOf, nameOf, optionsObject } from './arguments';
import {
  ALLGATHER_OPTIONS, ALLREDUCE_OPTIONS, Plan, REDUCE_SCATTER_OPTIONS, allgatherPlan, allreducePlan, reduceScatterPlan, refusedWhileJoining, submitInvalid,
} from './collectives';
import { DeviceBuffer } from './device-buffer';
import { requireElasticRun } from './elastic/world';
import { CallSite, HoraError, KnownOptions, describeValue } from './errors';
import type { AllgatherOptions, AllreduceOptions, ReduceScatterOptions, Tensor } from './types';
import { OnAwait, Work } from './work';
import { Scope, current } from './world';

/** The grouped calls, as hora.grouped and a process group's `grouped` offer them. */
export interface Grouped {
  /** hora.allreduce of each array, as one group (default op 'avg'); resolves to the results in order. */
  allreduce<T extends Tensor>(tensors: readonly T[], options?: AllreduceOptions): Work<T[]>;
  /** hora.allgather of each array, as one group; resolves to the gathered arrays in order. */
  allgather<T extends Tensor>(tensors: readonly T[], options?: AllgatherOptions): Work<T[]>;
  /** hora.reduceScatter of each array, as one group (default op 'sum'); resolves to this rank's blocks in order. */
  reduceScatter<T extends Tensor>(tensors: readonly T[], options?: ReduceScatterOptions): Work<T[]>;
}

type Planner = (x: Tensor, options: object) => (w: Scope) => Plan<unknown>;

interface Call {
  name: 'allreduce' | 'allgather' | 'reduceScatter';
  known: KnownOptions;
  plan: Planner;
}

const CALLS: Record<Call['name'], Call> = {
  allreduce: { name: 'allreduce', known: ALLREDUCE_OPTIONS, plan: allreducePlan as Planner },
  allgather: { name: 'allgather', known: ALLGATHER_OPTIONS, plan: allgatherPlan as Planner },
  reduceScatter: { name: 'reduceScatter', known: REDUCE_SCATTER_OPTIONS, plan: reduceScatterPlan as Planner },
};

/** Grouped calls made so far in each world and process group (their Scope): the k of an unnamed group's name. */
const groupsCalled = new WeakMap<Scope, number>();

/** hora.grouped (scope: the world's) or a process group's (scope: the group's, checked live on each call). */
export function groupedOf(scope: (call: string) => Scope | null): Grouped {
  const grouped: Grouped = {
    allreduce: (tensors, options) => run(scope, CALLS.allreduce, grouped.allreduce, tensors, options) as Work<any>,
    allgather: (tensors, options) => run(scope, CALLS.allgather, grouped.allgather, tensors, options) as Work<any>,
    reduceScatter: (tensors, options) => run(scope, CALLS.reduceScatter, grouped.reduceScatter, tensors, options) as Work<any>,
  };
  return Object.freeze(grouped);
}

/** The world's grouped calls. */
export const grouped = groupedOf(() => null);

function run(scopeOf: (call: string) => Scope | null, call: Call, callee: Function, tensors: unknown, options: unknown): Work<unknown[]> {
  const w = scopeOf(`grouped.${call.name}`) ?? current(`grouped.${call.name}`);
  const c = `${w.prefix}grouped.${call.name}`;
  requireElasticRun(w, `grouped.${call.name}`);
  if (w.dispatcher?.joining) return refusedWhileJoining(w, `grouped.${call.name}`, callee);
  const site = w.dispatcher ? w.dispatcher.callSite(callee) : new CallSite(callee);
  const k = (groupsCalled.get(w) ?? 0) + 1;
  groupsCalled.set(w, k);
  const n = Array.isArray(tensors) ? tensors.length : 1;
  let names: string[] = [];
  let plans: Plan<unknown>[];
  try {
    const o = optionsObject<{ name?: unknown; dtype?: unknown }>(c, options, call.known, w.self);
    const base = nameOf(c, o.name, w.self) || `grouped.${call.name}.${k}`;
    names = Array.from({ length: n }, (_, i) => `${base}_${i + 1}of${n}`);
    if (!Array.isArray(tensors)) throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${c}: argument 'tensors' must be an array of typed arrays; received ${describeValue(tensors)}`, w.self);
    plans = tensors.map((x: unknown, i) => {
      const argument = `tensors[${i}]`;
      if (x instanceof DeviceBuffer) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${c}: argument '${argument}' must be a typed array: grouped calls take host ` +
          'memory, not a hora.cuda.DeviceBuffer (call the single collectives for device memory)', w.self);
      }
      dtypeOf(c, x, o.dtype, w.self, argument);
      return call.plan(x as Tensor, { ...(options as object), name: names[i] })(w);
    });
  } catch (e) {
    const err = site.attach(e instanceof HoraError ? e : new HoraError('ERR_INVALID_ARGUMENT', String(e), w.self));
    if (w.dispatcher) for (let i = 0; i < n; i++) submitInvalid(w.dispatcher, err.message, site, w.group, names[i] ?? '');
    const failed = new Work<unknown[]>(null);
    failed.reject(err);
    return failed;
  }
  if (!w.dispatcher) {
    const done = new Work<unknown[]>(null);
    done.fulfil(plans.map((p) => (p.local !== null ? p.local() : p.value)));
    return done;
  }
  if (plans.length === 0) {
    const none = new Work<unknown[]>(null);
    none.fulfil([]);
    return none;
  }
  const works = w.dispatcher.submitGroup(plans.map((p) => (w.group ? { ...p, item: { ...p.item, group: w.group } } : p)), site);
  return allOf(works, w.dispatcher);
}

/**
 * One Work for the group's: it settles once all have, with their results in order, or the first error
 * (in the order given). wait() waits for each.
 */
function allOf(works: Work<unknown>[], driver: { awaited(id: number, spin: boolean): void }): Work<unknown[]> {
  const all = new Work<unknown[]>({
    waitFor: () => {
      for (const x of works) {
        try {
          x.wait();
        } catch {
          // Settles `all` below.
        }
      }
    },
    // Awaiting the group is awaiting its works: the dispatcher captures call sites again.
    awaited: () => driver.awaited(0, false),
  }, 0, OnAwait.Awaited);
  let left = works.length;
  const settled = () => {
    if (--left > 0) return;
    const values: unknown[] = [];
    for (const x of works) {
      try {
        values.push(x.wait());
      } catch (e) {
        all.reject(e as HoraError);
        return;
      }
    }
    all.fulfil(values);
  };
  for (const x of works) x.onSettled(settled);
  return all;
}
