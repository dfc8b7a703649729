// The Dispatcher's table of outstanding works (ts/dispatcher.ts): what has been submitted and not yet settled,
// by id. Generic in what it holds (the Dispatcher's Outstanding records); the type parameter is erased,
// so the code that runs is the one class it always was.

/**
 * The works submitted and not yet settled, by id, oldest first. Ids are handed out in increasing order and
 * works mostly settle in that order, so a ring of slots indexed by id holds them. A Map did the same, but
 * V8 re-allocates a small Map's table as it empties and refills: with one work at a time (a loop of
 * wait()), a new table on almost every call, a third of the garbage that each small collective left.
 */
export class OutstandingTable<O extends { id: number } = { id: number }> {
  private slots: Array<O | undefined> = new Array(16).fill(undefined);
  /** Every live id is in [lo, hi). */
  private lo = 0;
  private hi = 0;
  size = 0;

  /** Adds o; its id is above every id added before. */
  add(o: O): void {
    if (this.size === 0) this.lo = o.id;
    if (o.id - this.lo >= this.slots.length) this.grow(o.id - this.lo + 1);
    this.slots[o.id & (this.slots.length - 1)] = o;
    this.size++;
    this.hi = o.id + 1;
  }

  get(id: number): O | undefined {
    if (id < this.lo || id >= this.hi) return undefined;
    const o = this.slots[id & (this.slots.length - 1)];
    return o !== undefined && o.id === id ? o : undefined;
  }

  /** Removes and returns the work of this id, if it is here. */
  take(id: number): O | undefined {
    const o = this.get(id);
    if (o === undefined) return undefined;
    const mask = this.slots.length - 1;
    this.slots[id & mask] = undefined;
    this.size--;
    while (this.lo < this.hi && this.slots[this.lo & mask] === undefined) this.lo++;
    return o;
  }

  *values(): IterableIterator<O> {
    const mask = this.slots.length - 1;
    for (let id = this.lo; id < this.hi; id++) {
      const o = this.slots[id & mask];
      if (o !== undefined && o.id === id) yield o;
    }
  }

  private grow(span: number): void {
    let capacity = this.slots.length;
    while (capacity < span * 2) capacity *= 2;
    const slots: Array<O | undefined> = new Array(capacity).fill(undefined);
    for (const o of this.values()) slots[o.id & (capacity - 1)] = o;
    this.slots = slots;
  }
}
