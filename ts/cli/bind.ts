// `hora run --bind-to core [--map-by core|socket]`: which CPUs each local rank of a host is bound to.
//
// A core is what Open MPI binds to: every hardware thread of one physical core, found in sysfs
// (topology/core_id within topology/physical_package_id). Only the CPUs this process may run on count
// (its affinity, which a cgroup cpuset, a batch system or a taskset around the launcher narrowed), so
// a job never binds a rank where the launcher itself could not run. Ranks take cores in order (map-by
// core) or one from each socket in turn (map-by socket); with more local ranks than cores they wrap
// round-robin, and the launcher says so once per host.
//
// readCores and bindingFor run on the launcher's machine for its own ranks, and inside the ssh wrapper on
// every remote host for that host's ranks (ssh.ts sends their source text): so they use nothing from any
// module, and take what they need with require() inside.

/** One physical core: its socket and its hardware threads (CPU numbers as taskset -c takes them). */
export interface Core {
  socket: number;
  cpus: number[];
}

export type MapBy = 'core' | 'socket';

/** What a spawner needs to bind one worker: its place among the ranks of its host. */
export interface BindRequest {
  mapBy: MapBy;
  localRank: number;
  localSize: number;
}

/**
 * The cores this process may run on, ordered by socket and then by their first CPU; null where the
 * system does not say (no /proc/self/status: not Linux).
 */
export function readCores(): Core[] | null {
  const fs: typeof import('node:fs') = require('node:fs');
  let status: string;
  try {
    status = fs.readFileSync('/proc/self/status', 'utf8');
  } catch {
    return null;
  }
  const line = /^Cpus_allowed_list:\s*(\S+)/m.exec(status);
  if (!line) return null;
  const allowed: number[] = [];
  for (const part of line[1].split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) return null;
    for (let c = Number(m[1]); c <= Number(m[2] ?? m[1]); c++) allowed.push(c);
  }
  const topology = (cpu: number, name: string): number | undefined => {
    try {
      const n = Number(fs.readFileSync(`/sys/devices/system/cpu/cpu${cpu}/topology/${name}`, 'utf8').trim());
      return Number.isInteger(n) && n >= 0 ? n : undefined;
    } catch {
      return undefined;
    }
  };
  const byKey = new Map<string, { socket: number; cpus: number[] }>();
  for (const cpu of allowed) {
    const socket = topology(cpu, 'physical_package_id') ?? 0;
    // Without a core id, every CPU is a core of its own.
    const core = topology(cpu, 'core_id');
    const key = core === undefined ? `cpu${cpu}` : `${socket}:${core}`;
    const entry = byKey.get(key);
    if (entry) entry.cpus.push(cpu);
    else byKey.set(key, { socket, cpus: [cpu] });
  }
  return [...byKey.values()].sort((a, b) => a.socket - b.socket || a.cpus[0] - b.cpus[0]);
}

/**
 * The CPUs of local rank `localRank`: map-by core takes the cores in order, map-by socket one core from
 * each socket in turn. Past the last core it wraps round-robin. cores must not be empty.
 */
export function bindingFor(cores: Core[], localRank: number, mapBy: MapBy): number[] {
  if (mapBy === 'core') return cores[localRank % cores.length].cpus;
  const sockets = [...new Set(cores.map((c) => c.socket))];
  const socket = sockets[localRank % sockets.length];
  const own = cores.filter((c) => c.socket === socket);
  return own[Math.floor(localRank / sockets.length) % own.length].cpus;
}

/** CPU numbers as taskset -c and Cpus_allowed_list write them: "0-3,8". */
export function cpuList(cpus: number[]): string {
  const sorted = [...cpus].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    parts.push(j > i ? `${sorted[i]}-${sorted[j]}` : String(sorted[i]));
    i = j + 1;
  }
  return parts.join(',');
}

/** The note a host gets once when its ranks outnumber its cores; undefined when they do not. */
export function wrapNote(localSize: number, cores: number, host: string): string | undefined {
  if (localSize <= cores) return undefined;
  return `--bind-to core: ${localSize} ranks on ${host}, which has ${cores} core(s) for them: ` +
    `binding round-robin, up to ${Math.ceil(localSize / cores)} ranks on a core`;
}
