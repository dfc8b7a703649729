// Which worker goes where: the HORA_RANK, HORA_LOCAL_RANK, HORA_CROSS_RANK and HORA_HOST_ID of each
// worker as ranks fill the hosts in order (place), of a worker started later in an elastic job
// (elasticSpec), and the check that --bind-to core can work on this machine.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { readCores, wrapNote } from './bind';
import { hostPart } from './ssh';
import { HostSlots, LaunchError, WorkerSpec } from './spawn';
import type { RunOptions } from './run-args';

/** Whether `program` is an executable file in a folder of PATH. */
function onPath(program: string): boolean {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir === '') continue;
    try {
      fs.accessSync(path.join(dir, program), fs.constants.X_OK);
      return true;
    } catch {
      // not here
    }
  }
  return false;
}

/**
 * --bind-to core for the workers of this machine: taskset must be there, and the cores known. Says once
 * per host when its ranks outnumber its cores (remote hosts say it themselves, from the ssh wrapper).
 */
export function checkLocalBinding(placement: Omit<WorkerSpec, 'command' | 'args'>[], log: (message: string) => void): void {
  const local = placement.filter((p) => !p.remote);
  if (local.length === 0) return;
  if (!onPath('taskset')) throw new LaunchError('--bind-to core: taskset (util-linux) is not on PATH here; install util-linux, or leave out --bind-to/--map-by');
  const cores = readCores();
  if (cores === null || cores.length === 0) throw new LaunchError('--bind-to core: this system does not say which CPUs this process may use (no /proc/self/status); leave out --bind-to/--map-by');
  const said = new Set<string>();
  for (const p of local) {
    const key = p.env.HORA_HOST_ID;
    if (said.has(key)) continue;
    said.add(key);
    const note = wrapNote(Number(p.env.HORA_LOCAL_SIZE), cores.length, placement.some((q) => q.remote) || said.size > 1 ? p.host : 'this machine');
    if (note) log(note);
  }
}

/**
 * A host's HORA_HOST_ID. A remote host is its host name (entries naming it twice are one host). Every
 * local entry is this machine, unless --simulate-hosts makes each one a host of its own: named by its
 * -H position, or by its name when a discovery script lists the hosts.
 */
function hostIdFor(opts: RunOptions, h: HostSlots, baseHostId: string): string {
  if (h.remote) return hostPart(h.host);
  if (!opts.simulateHosts) return baseHostId;
  return opts.elastic?.discoveryScript !== undefined ? `${baseHostId}#${h.host}` : `${baseHostId}#${opts.hosts.indexOf(h)}`;
}

/**
 * The spec of a worker started on `h` after the job began (a refill on another host, a discovered slot).
 * Its HORA_RANK and sizes are placeholders: an elastic worker's rank comes from the world it joins.
 */
export function elasticSpec(opts: RunOptions, h: HostSlots, baseHostId: string, index: number): Omit<WorkerSpec, 'command' | 'args'> {
  const size = Math.max(opts.elastic?.maxNp ?? opts.np, index + 1);
  const hostId = hostIdFor(opts, h, baseHostId);
  return {
    rank: index,
    host: h.host,
    remote: h.remote,
    env: {
      HORA_RANK: String(index), HORA_SIZE: String(size), HORA_LOCAL_RANK: '0', HORA_LOCAL_SIZE: '1',
      HORA_CROSS_RANK: '0', HORA_CROSS_SIZE: '1', HORA_HOST_ID: hostId,
    },
  };
}

/** Worker specs (without rendezvous variables): ranks fill -H entries in order. */
export function place(opts: RunOptions, baseHostId: string): Omit<WorkerSpec, 'command' | 'args'>[] {
  const entries: { host: string; remote: boolean; key: string }[] = [];
  for (const h of opts.hosts) {
    for (let s = 0; s < h.slots && entries.length < opts.np; s++) entries.push({ host: h.host, remote: h.remote, key: hostIdFor(opts, h, baseHostId) });
  }
  const keys = [...new Set(entries.map((e) => e.key))];
  const localSize = new Map<string, number>();
  for (const e of entries) localSize.set(e.key, (localSize.get(e.key) ?? 0) + 1);
  const seen = new Map<string, number>();
  return entries.map((e, rank) => {
    const key = e.key;
    const localRank = seen.get(key) ?? 0;
    seen.set(key, localRank + 1);
    return {
      rank,
      host: e.host,
      remote: e.remote,
      env: {
        HORA_RANK: String(rank),
        HORA_SIZE: String(opts.np),
        HORA_LOCAL_RANK: String(localRank),
        HORA_LOCAL_SIZE: String(localSize.get(key)),
        HORA_CROSS_RANK: String(keys.indexOf(key)),
        HORA_CROSS_SIZE: String(keys.length),
        HORA_HOST_ID: key,
      },
    };
  });
}
