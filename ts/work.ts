/**
 * Work: the handle a collective returns. It can be awaited (it is a thenable) or waited for with wait(),
 * which blocks the JS thread; the latter is for synchronous framework hooks such as tfjs's applyGradients.
 * Until a Work settles, the arrays passed to the collective belong to the communication thread: do not read
 * or write them. The dispatcher (dispatcher.ts) hands calls to the native engine and settles their Works.
 */
import { HoraError } from './errors';
import type { NativeResult } from './native';
import { steps } from './stats';

/** @internal What turns the engine's result into a Work's value. */
export type Finish<T> = (r: NativeResult) => T;

/** @internal What a Work's first await tells its driver. */
export const enum OnAwait {
  Nothing = 0,
  /** The program awaits: collectives capture their call sites again (Dispatcher.wantsCallSite). */
  Awaited = 1,
  /** That, and a small collective is watched for a while before the event loop sleeps. */
  Spin = 2,
}

/** @internal What a Work blocks in (wait()) and tells of its first await. */
export interface WorkDriver {
  waitFor(id: number): void;
  awaited(id: number, spin: boolean): void;
}

export class Work<T = unknown> implements PromiseLike<T> {
  private state: 'pending' | 'fulfilled' | 'rejected' = 'pending';
  private value?: T;
  private error?: HoraError;
  // Made on the first listener: most works (every wait()ed one) never get one.
  private listeners: Array<() => void> | null = null;

  /**
   * @internal driver: what wait() blocks in, and what is told when the work is first awaited (or given a
   * callback with then()), which may settle the work at once (see Dispatcher.spinFor); null for a work
   * settled where it is made. id: the work's id for the driver. onAwait: what to tell it then.
   * A driver and an id rather than two closures per work: a loop of small wait()ed collectives makes
   * one Work per call, and its garbage is what sets how often the young generation is collected.
   */
  constructor(
    private readonly driver: WorkDriver | null,
    private readonly id = 0,
    private onAwait: OnAwait = OnAwait.Nothing,
  ) {}

  /** True once the collective has completed, successfully or not. */
  get done(): boolean {
    return this.state !== 'pending';
  }

  then<R1 = T, R2 = never>(
    onFulfilled?: ((value: T) => R1 | PromiseLike<R1>) | null,
    onRejected?: ((reason: any) => R2 | PromiseLike<R2>) | null,
  ): Promise<R1 | R2> {
    if (this.onAwait !== OnAwait.Nothing) {
      const what = this.onAwait;
      this.onAwait = OnAwait.Nothing;
      (this.driver as WorkDriver).awaited(this.id, what === OnAwait.Spin);
    }
    // Settled already (a small collective's spin, above, usually settles it): no executor or listener to make.
    if (this.state === 'fulfilled') return Promise.resolve(this.value as T).then(onFulfilled, onRejected);
    if (this.state === 'rejected') return Promise.reject(this.error).then(onFulfilled, onRejected);
    return new Promise<T>((resolve, reject) => {
      (this.listeners ??= []).push(() => (this.state === 'fulfilled' ? resolve(this.value as T) : reject(this.error)));
    }).then(onFulfilled, onRejected);
  }

  catch<R = never>(onRejected?: ((reason: any) => R | PromiseLike<R>) | null): Promise<T | R> {
    return this.then(undefined, onRejected);
  }

  /** Blocks the JS thread until the collective completes; returns its result or throws its HoraError. */
  wait(): T {
    if (this.state === 'pending' && this.driver !== null) {
      if (steps.open) {
        const t0 = performance.now();
        this.driver.waitFor(this.id);
        steps.waited(performance.now() - t0);
      } else {
        this.driver.waitFor(this.id);
      }
    }
    if (this.state === 'fulfilled') return this.value as T;
    if (this.state === 'rejected') throw this.error;
    throw new HoraError('ERR_INTERNAL', 'hora: wait() returned before the collective completed');
  }

  /** @internal */
  fulfil(value: T): void {
    if (this.state !== 'pending') return;
    this.state = 'fulfilled';
    this.value = value;
    this.flushListeners();
  }

  /** @internal */
  reject(error: HoraError): void {
    if (this.state !== 'pending') return;
    this.state = 'rejected';
    this.error = error;
    this.flushListeners();
  }

  /**
   * @internal Runs `fn` as soon as the work settles, either way, synchronously inside the settling call
   * (before wait() returns, before any awaiting code runs).
   */
  onSettled(fn: () => void): void {
    if (this.state !== 'pending') fn();
    else (this.listeners ??= []).push(fn);
  }

  private flushListeners(): void {
    const ls = this.listeners;
    if (ls === null) return;
    this.listeners = null;
    for (const l of ls) l();
  }
}
