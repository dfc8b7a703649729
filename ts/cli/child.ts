/**
 * When a worker's process has exited, and when its output has drained too: the bookkeeping the local
 * and the ssh spawner share.
 */
import type { ChildProcess } from 'node:child_process';

export type ExitCallback = (code: number | null, signal: NodeJS.Signals | null) => void;

export interface ChildLifecycle {
  /** Set once the process has exited (or could not start: code 127). */
  readonly exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  /** cb once the process has exited; at once if it already has. */
  onExit(cb: ExitCallback): void;
  /** cb once the process has exited and its output is drained. */
  onDone(cb: ExitCallback): void;
}

/** onStartError runs when the process could not be started at all; it then counts as exited with 127. */
export function trackChild(child: ChildProcess, onStartError: (err: Error) => void): ChildLifecycle {
  let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  let done = false;
  const exitCbs: ExitCallback[] = [];
  const doneCbs: ExitCallback[] = [];
  const markExit = (code: number | null, signal: NodeJS.Signals | null) => {
    if (exited) return;
    exited = { code, signal };
    for (const cb of exitCbs) cb(code, signal);
    // A grandchild that inherited stdout can hold the pipe open after the worker is gone.
    setTimeout(() => {
      child.stdout?.destroy();
      child.stderr?.destroy();
    }, 2000).unref();
  };
  const markDone = () => {
    if (done || !exited) return;
    done = true;
    for (const cb of doneCbs) cb(exited.code, exited.signal);
  };
  child.on('exit', (code, signal) => markExit(code, signal));
  child.on('close', (code, signal) => {
    markExit(code, signal);
    markDone();
  });
  child.on('error', (err) => {
    if (child.pid === undefined) {
      onStartError(err);
      markExit(127, null);
      markDone();
    }
  });
  return {
    get exited() {
      return exited;
    },
    onExit(cb) {
      if (exited) cb(exited.code, exited.signal);
      else exitCbs.push(cb);
    },
    onDone(cb) {
      if (done && exited) cb(exited.code, exited.signal);
      else doneCbs.push(cb);
    },
  };
}
