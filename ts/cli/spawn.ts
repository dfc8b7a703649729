// The spawning contract of `hora run`: what a worker is asked to be (WorkerSpec), what the launcher holds
// while it runs (WorkerHandle), and the Spawner that turns one into the other. LocalSpawner starts workers
// on this machine; SshSpawner (ssh.ts) on other hosts; HostSpawner (host-spawner.ts) picks one per -H entry,
// and supervise.ts supervises what they start. The spawners depend on this file and on nothing of `hora
// run`'s arguments or supervision. LaunchError is what a spawner or the launcher throws when the job
// cannot start.

import * as child_process from 'node:child_process';
import type { Readable } from 'node:stream';
import { trackChild } from './child';
import { BindRequest, bindingFor, cpuList, readCores } from './bind';

/** A launch that cannot start (no address for the rendezvous server): message, exit status 1. */
export class LaunchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LaunchError';
  }
}

/** Where workers may run: one -H entry or hostfile line. */
export interface HostSlots {
  /** Host name or address as written in -H or the hostfile ([user@]host). */
  host: string;
  /** Workers that may run there. */
  slots: number;
  /** Not this machine: workers start over ssh. */
  remote: boolean;
}

export interface WorkerSpec {
  rank: number;
  /** The -H entry this worker runs on. */
  host: string;
  /** True when host is not this machine. */
  remote: boolean;
  /** Variables added to the launcher's environment. */
  env: Record<string, string>;
  /** --bind-to core: the worker's place among its host's ranks; the spawner binds it there. */
  bind?: BindRequest;
  command: string;
  args: string[];
}

export interface WorkerHandle {
  readonly rank: number;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Signals the worker and everything it started; no-op once it has exited. */
  kill(signal: NodeJS.Signals): void;
  /** Called once, when the worker has exited and its output is drained. code 127 = could not start. */
  onDone(cb: (code: number | null, signal: NodeJS.Signals | null) => void): void;
  /** Called once, as soon as the worker exits (output may still be in flight). */
  onExit(cb: (code: number | null, signal: NodeJS.Signals | null) => void): void;
  /** Why it failed when the worker itself never ran (e.g. "ssh to h failed ..."); undefined otherwise. */
  describeFailure?(code: number | null, signal: NodeJS.Signals | null): string | undefined;
}

/** Where the rendezvous server binds, and why there. */
export interface RendezvousBinding {
  addr: string;
  /** What chose addr, in words; workers get it as HORA_RENDEZVOUS_ADDR_SOURCE and name it when they cannot connect. */
  source: string;
}

export interface Spawner {
  /** Address to bind the rendezvous server to: one every worker can reach. */
  rendezvousBindAddress(hosts: HostSlots[]): RendezvousBinding | Promise<RendezvousBinding>;
  spawn(spec: WorkerSpec): WorkerHandle;
}

/** Runs workers on this machine, each in its own process group so that kill() reaches its children too. */
export class LocalSpawner implements Spawner {
  rendezvousBindAddress(): RendezvousBinding {
    return { addr: '127.0.0.1', source: 'loopback, as every worker runs on the launcher\'s machine' };
  }

  spawn(spec: WorkerSpec): WorkerHandle {
    let command = spec.command;
    let args = spec.args;
    if (spec.bind) {
      // taskset sets the affinity and execs the worker: the worker keeps the pid, and with it its signals.
      const cores = readCores() ?? [];
      if (cores.length > 0) {
        args = ['-c', cpuList(bindingFor(cores, spec.bind.localRank, spec.bind.mapBy)), command, ...args];
        command = 'taskset';
      }
    }
    const child = child_process.spawn(command, args, {
      env: { ...process.env, ...spec.env },
      // Workers get no stdin: they are in their own process group (a terminal read would stop them).
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const life = trackChild(child, (err) => {
      process.stderr.write(`hora run: cannot start ${JSON.stringify(spec.command)} for rank ${spec.rank}: ${err.message}\n`);
    });
    return {
      rank: spec.rank,
      stdout: child.stdout as Readable,
      stderr: child.stderr as Readable,
      kill(signal: NodeJS.Signals) {
        if (life.exited || child.pid === undefined) return;
        try {
          process.kill(-child.pid, signal);
          // A stopped worker (SIGSTOP, a debugger) only acts on SIGTERM once it runs again.
          if (signal === 'SIGTERM') process.kill(-child.pid, 'SIGCONT');
        } catch {
          try {
            child.kill(signal);
          } catch {
            // already gone
          }
        }
      },
      onExit: life.onExit,
      onDone: life.onDone,
    };
  }
}
