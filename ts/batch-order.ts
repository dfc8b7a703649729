// The order of a batch's collectives across ranks (ts/dispatcher.ts, Dispatcher.flush): a batch of named
// collectives ordered by name, and the invalid placeholder that holds the place of a call that cannot run
// (a duplicate name here; a refused or failed call in the Dispatcher and in hora.failPeers), so that every
// rank fails that place and the ranks stay in step.
import { describeValue } from './errors';
import { KIND_NAMES, NativeDType, NativeKind, NativeOp, nativeItem } from './native';
import type { NativeItem } from './native';

/** The placeholder that keeps the ranks in step when a collective of this rank cannot run (see hora.failPeers). */
export function invalidItem(reason: string, group = 0, name = ''): Omit<NativeItem, 'id'> {
  const item = nativeItem(NativeKind.Invalid, NativeOp.Sum, NativeDType.Uint8, 0, name, null, null);
  return Object.assign(item, { invalidReason: reason, group });
}

/**
 * Orders a batch whose collectives are all named (sort), in place, by name (then process group): every
 * rank then submits the same named collectives in the same order, whatever order its program called them
 * in. Messages are not collectives and keep their places. The comparison is of UTF-16 code units, the same
 * on every rank whatever its locale; the sort is stable.
 *
 * Sorted or not, a name given twice in one group is refused as Horovod refuses it: the second of the two
 * (in the batch's order) becomes an invalid call at its place, so that every rank fails that place with
 * ERR_INVALID_ARGUMENT and the ranks stay in step.
 * @internal
 */
export function orderByName(items: NativeItem[], sort = true): void {
  const places: number[] = [];
  const collectives: NativeItem[] = [];
  for (let i = 0; i < items.length; i++) {
    if (items[i].kind === NativeKind.Send || items[i].kind === NativeKind.Recv) continue;
    places.push(i);
    collectives.push(items[i]);
  }
  const key = (item: NativeItem) => `${item.group ?? 0}:${item.name}`;
  const seen = sort ? null : new Set<string>();
  if (sort) collectives.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : (a.group ?? 0) - (b.group ?? 0)));
  for (let k = 0; k < collectives.length; k++) {
    let item = collectives[k];
    if (item.name !== '') {
      const before = collectives[k - 1];
      const again = seen === null ? k > 0 && before.name === item.name && (before.group ?? 0) === (item.group ?? 0) : seen.has(key(item));
      if (again) item = duplicateOf(item);
      else seen?.add(key(item));
    }
    items[places[k]] = item;
  }
}

/** The invalid call that stands at a duplicate's place (see orderByName). */
function duplicateOf(item: NativeItem): NativeItem {
  const call = (item.group ? 'group.' : '') + (item.kind !== NativeKind.Invalid ? KIND_NAMES[item.kind].api : 'collective');
  const reason = `hora.${call}: argument 'options.name' must differ from the names of the other collectives called in the ` +
    `same synchronous run of JavaScript (one batch); received ${describeValue(item.name)} a second time`;
  return { ...invalidItem(reason, item.group, item.name), id: item.id };
}
