// The one place where hora reads its environment.
//
// Every HORA_* variable is declared once in HORA_VARIABLES with its default and
// help text (`hora env` prints that table). readSettings() parses the tuning
// knobs; resolveLaunch() works out who this process is in the job (rank, size,
// where the rendezvous server is, who hosts it) from whichever launcher started
// it: `hora run`, Open MPI, a PMI launcher, Slurm or torchrun. Nothing else in
// hora should look at process.env directly.

import * as crypto from 'node:crypto';
import * as net from 'node:net';
import * as os from 'node:os';

export type Env = Record<string, string | undefined>;

export type DebugLevel = 'WARN' | 'INFO' | 'TRACE';
export const DEBUG_LEVELS: readonly DebugLevel[] = ['WARN', 'INFO', 'TRACE'];

/** Allreduce algorithms HORA_ALGO accepts; the native engine owns their meaning. */
export const ALGORITHMS = ['auto', 'ring', 'recursive_doubling'] as const;
export type Algorithm = (typeof ALGORITHMS)[number];

export const TRANSPORTS = ['auto', 'tcp', 'shm'] as const;
export type Transport = (typeof TRANSPORTS)[number];

export type VariableGroup = 'launch' | 'rendezvous' | 'network' | 'performance' | 'diagnostics';

export interface HoraVariable {
  /** Exact environment variable name. */
  name: string;
  /** Section it is listed under in `hora env`. */
  group: VariableGroup;
  /** Default as the user would write it; undefined when there is none or it is computed. */
  default?: string;
  /** One or two lines for `hora env`. */
  help: string;
}

export const VARIABLE_GROUP_TITLES: Record<VariableGroup, string> = {
  launch: 'Job layout (set by `hora run` or derived from mpirun / Slurm / torchrun)',
  rendezvous: 'Rendezvous (control plane)',
  network: 'Network and host identity',
  performance: 'Performance tuning',
  diagnostics: 'Timeouts, logging and timeline',
};

export const HORA_VARIABLES: readonly HoraVariable[] = [
  { name: 'HORA_RANK', group: 'launch', help: 'Rank of this process, 0 <= rank < HORA_SIZE.' },
  { name: 'HORA_SIZE', group: 'launch', help: 'Number of processes in the job.' },
  { name: 'HORA_LOCAL_RANK', group: 'launch', help: 'Rank among the processes on this host (e.g. to pick a GPU).' },
  { name: 'HORA_LOCAL_SIZE', group: 'launch', help: 'Number of processes on this host.' },
  { name: 'HORA_CROSS_RANK', group: 'launch', help: 'Index of this host among the hosts of the job.' },
  { name: 'HORA_CROSS_SIZE', group: 'launch', help: 'Number of hosts in the job.' },
  { name: 'HORA_JOB_ID', group: 'launch', help: 'Job id chosen by the launcher; names shared-memory segments (/dev/shm/hora-<id>*).' },
  {
    name: 'HORA_RENDEZVOUS_ADDR',
    group: 'rendezvous',
    help: 'Address of the rendezvous server. Under mpirun/Slurm defaults to MASTER_ADDR, else 127.0.0.1 (single host only).',
  },
  {
    name: 'HORA_RENDEZVOUS_PORT',
    group: 'rendezvous',
    help: 'Port of the rendezvous server. Under mpirun/Slurm defaults to MASTER_PORT, else a port in 20000-60000 derived from the job id.',
  },
  {
    name: 'HORA_SECRET',
    group: 'rendezvous',
    help: 'Per-job secret that authenticates workers (HMAC-SHA256). `hora run` makes a random one; otherwise it is derived from the job id, which anyone who can see the job id can repeat: set it for untrusted networks.',
  },
  {
    name: 'HORA_IFACE',
    group: 'network',
    help: 'Network interface name (eth0) or IPv4 address to bind and advertise for the data plane.',
  },
  {
    name: 'HORA_HOST_ID',
    group: 'network',
    help: 'Host identity: processes with equal ids may use shared memory. Default: hostname/first non-internal IPv4 (127.0.0.1 when loopback only).',
  },
  { name: 'HORA_TRANSPORT', group: 'network', default: 'auto', help: 'Data transport: auto (shm within a host, tcp across), tcp, shm.' },
  {
    name: 'HORA_FUSION_MB',
    group: 'performance',
    default: '64',
    help: 'Fusion buffer size in MiB: small tensors queued together are reduced in one operation. 0 disables fusion.',
  },
  {
    name: 'HORA_ALGO',
    group: 'performance',
    default: 'auto',
    help: `Allreduce algorithm: ${ALGORITHMS.join(', ')}. auto picks by message size and topology.`,
  },
  {
    name: 'HORA_TIMEOUT_S',
    group: 'diagnostics',
    default: '300',
    help: 'Seconds any wait (rendezvous, connection, collective) may take before it fails with ERR_TIMEOUT.',
  },
  { name: 'HORA_DEBUG', group: 'diagnostics', default: 'WARN', help: 'Log level: WARN, INFO or TRACE (logs go to stderr).' },
  { name: 'HORA_TIMELINE', group: 'diagnostics', help: 'Write a Chrome-trace timeline of collectives to this file.' },
];

/** Thrown for any variable (or launcher flag) with a value hora cannot use. */
export class HoraConfigError extends Error {
  readonly code = 'ERR_INVALID_ARGUMENT';
  constructor(
    readonly variable: string,
    readonly value: string | undefined,
    /** What would have been accepted. */
    readonly expected: string,
  ) {
    super(`${variable}=${value === undefined ? '(unset)' : JSON.stringify(value)} is invalid: expected ${expected}`);
    this.name = 'HoraConfigError';
  }
}

// ---------------------------------------------------------------------------
// Small parsers. Each names the variable in its error.

function isSet(env: Env, name: string): boolean {
  const v = env[name];
  return v !== undefined && v.trim() !== '';
}

function parseInteger(env: Env, name: string, min: number): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const text = raw.trim();
  if (!/^[+-]?\d+$/.test(text)) throw new HoraConfigError(name, raw, `an integer >= ${min}`);
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < min) throw new HoraConfigError(name, raw, `an integer >= ${min}`);
  return n;
}

function parseNumber(env: Env, name: string, fallback: number, allowZero: boolean): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw.trim());
  const ok = Number.isFinite(n) && (allowZero ? n >= 0 : n > 0);
  if (!ok) throw new HoraConfigError(name, raw, allowZero ? 'a number >= 0' : 'a number > 0');
  return n;
}

function parseChoice<T extends string>(env: Env, name: string, choices: readonly T[], fallback: T, upper: boolean): T {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const text = upper ? raw.trim().toUpperCase() : raw.trim().toLowerCase();
  const found = choices.find((c) => c === text);
  if (found === undefined) throw new HoraConfigError(name, raw, `one of ${choices.join(', ')}`);
  return found;
}

function parsePort(env: Env, name: string): number | undefined {
  const port = parseInteger(env, name, 1);
  if (port !== undefined && port > 65535) throw new HoraConfigError(name, env[name], 'a TCP port 1-65535');
  return port;
}

// ---------------------------------------------------------------------------
// Tuning settings.

export interface HoraSettings {
  /** HORA_TIMEOUT_S: deadline for every wait, seconds (> 0). */
  timeoutS: number;
  /** HORA_DEBUG. */
  debug: DebugLevel;
  /** HORA_FUSION_MB: fusion buffer size in MiB (0 = off). */
  fusionMb: number;
  /** HORA_ALGO. */
  algo: Algorithm;
  /** HORA_TRANSPORT. */
  transport: Transport;
  /** HORA_IFACE resolved to an IPv4 address, if set. */
  ifaceAddr?: string;
  /** HORA_TIMELINE file path, if set. */
  timeline?: string;
  /** HORA_HOST_ID, or defaultHostId(). */
  hostId: string;
}

export function readSettings(env: Env = process.env): HoraSettings {
  const iface = env.HORA_IFACE?.trim();
  const timeline = env.HORA_TIMELINE?.trim();
  return {
    timeoutS: parseNumber(env, 'HORA_TIMEOUT_S', 300, false),
    debug: parseChoice(env, 'HORA_DEBUG', DEBUG_LEVELS, 'WARN', true),
    fusionMb: parseNumber(env, 'HORA_FUSION_MB', 64, true),
    algo: parseChoice(env, 'HORA_ALGO', ALGORITHMS, 'auto', false),
    transport: parseChoice(env, 'HORA_TRANSPORT', TRANSPORTS, 'auto', false),
    ifaceAddr: iface ? resolveIface(iface) : undefined,
    timeline: timeline ? timeline : undefined,
    hostId: isSet(env, 'HORA_HOST_ID') ? (env.HORA_HOST_ID as string).trim() : defaultHostId(),
  };
}

/** HORA_IFACE value (interface name or IP address) -> IPv4 address to bind and advertise. */
export function resolveIface(value: string): string {
  if (net.isIP(value)) return value;
  const addrs = os.networkInterfaces()[value];
  const v4 = addrs?.find((a) => a.family === 'IPv4' || (a.family as unknown) === 4);
  if (v4) return v4.address;
  const names = Object.keys(os.networkInterfaces()).join(', ');
  throw new HoraConfigError('HORA_IFACE', value, `an IP address or an interface with an IPv4 address (have: ${names})`);
}

/** First non-internal IPv4 address of this machine, or undefined when only loopback exists. */
export function firstExternalIPv4(): string | undefined {
  const ifaces = os.networkInterfaces();
  for (const name of Object.keys(ifaces).sort()) {
    for (const a of ifaces[name] ?? []) {
      if ((a.family === 'IPv4' || (a.family as unknown) === 4) && !a.internal) return a.address;
    }
  }
  return undefined;
}

/**
 * Stable identity of this machine and network namespace: processes that share
 * it can share memory. Two network namespaces on one machine differ by address.
 */
export function defaultHostId(): string {
  return `${os.hostname()}/${firstExternalIPv4() ?? '127.0.0.1'}`;
}

/**
 * Address this process advertises for its data plane: HORA_IFACE if set; the
 * loopback address when the rendezvous server is on loopback (single host);
 * otherwise the first non-internal IPv4 address.
 */
export function advertiseAddress(settings: HoraSettings, rendezvousAddr?: string): string {
  if (settings.ifaceAddr) return settings.ifaceAddr;
  if (rendezvousAddr === undefined || isLoopback(rendezvousAddr)) return '127.0.0.1';
  return firstExternalIPv4() ?? '127.0.0.1';
}

export function isLoopback(addr: string): boolean {
  return addr === 'localhost' || addr === '::1' || addr.startsWith('127.');
}

// ---------------------------------------------------------------------------
// Launch resolution.

export type LaunchSource = 'hora' | 'ompi' | 'pmi' | 'slurm' | 'torchrun' | 'single';

export interface LaunchInfo {
  /** Which launcher's variables were used. */
  source: LaunchSource;
  rank: number;
  size: number;
  /** Known when the launcher said; otherwise the rendezvous computes them from host ids. */
  localRank?: number;
  localSize?: number;
  crossRank?: number;
  crossSize?: number;
  /** Where to register; undefined only for source 'single'. */
  rendezvousAddr?: string;
  rendezvousPort?: number;
  /** HMAC key for registration; undefined only for source 'single'. */
  secret?: string;
  /** True when the secret was derived from public job ids rather than given (weaker). */
  secretDerived: boolean;
  /** True when this process must host the rendezvous server (rank 0 outside `hora run`). */
  isRendezvousHost: boolean;
  /** HORA_JOB_ID, or an id derived from the launcher's job variables. */
  jobId?: string;
}

// Variables that identify one job of an external launcher; the first set one wins.
const JOB_ID_VARIABLES = ['OMPI_MCA_ess_base_jobid', 'PMIX_NAMESPACE', 'SLURM_JOB_ID', 'TORCHELASTIC_RUN_ID'];

function externalJobKey(env: Env): string | undefined {
  for (const name of JOB_ID_VARIABLES) {
    if (isSet(env, name)) {
      // Slurm runs several steps per job; each step is its own hora job.
      const step = name === 'SLURM_JOB_ID' && isSet(env, 'SLURM_STEP_ID') ? `.${env.SLURM_STEP_ID}` : '';
      return `${name}=${(env[name] as string).trim()}${step}`;
    }
  }
  return undefined;
}

function sha256(text: string): Buffer {
  return crypto.createHash('sha256').update(text).digest();
}

/** Port in 20000-60000 that every rank of one job computes alike. */
export function derivePort(jobKey: string): number {
  return 20000 + (sha256(`hora-port\0${jobKey}`).readUInt32BE(0) % 40001);
}

/**
 * Secret that every rank of one job computes alike. Weak: anyone who knows the
 * job id can compute it too. Use HORA_SECRET on shared networks.
 */
export function deriveSecret(jobKey: string): string {
  return sha256(`hora-secret\0${jobKey}`).toString('hex');
}

interface Layout {
  source: LaunchSource;
  rankVar: string;
  sizeVar: string;
  rank: number;
  size: number;
  localRank?: number;
  localSize?: number;
  crossRank?: number;
  crossSize?: number;
}

function requireInteger(env: Env, name: string, min: number, why: string): number {
  const v = parseInteger(env, name, min);
  if (v === undefined) throw new HoraConfigError(name, undefined, `an integer >= ${min} (${why})`);
  return v;
}

function readLayout(env: Env): Layout | undefined {
  const pick = (source: LaunchSource, rankVar: string, sizeVar: string): Layout => {
    const size = requireInteger(env, sizeVar, 1, `${rankVar} is set`);
    const rank = requireInteger(env, rankVar, 0, `${sizeVar} is set`);
    return { source, rankVar, sizeVar, rank, size };
  };
  if (isSet(env, 'HORA_RANK') || isSet(env, 'HORA_SIZE')) {
    return {
      ...pick('hora', 'HORA_RANK', 'HORA_SIZE'),
      localRank: parseInteger(env, 'HORA_LOCAL_RANK', 0),
      localSize: parseInteger(env, 'HORA_LOCAL_SIZE', 1),
      crossRank: parseInteger(env, 'HORA_CROSS_RANK', 0),
      crossSize: parseInteger(env, 'HORA_CROSS_SIZE', 1),
    };
  }
  if (isSet(env, 'OMPI_COMM_WORLD_RANK') || isSet(env, 'OMPI_COMM_WORLD_SIZE')) {
    return {
      ...pick('ompi', 'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE'),
      localRank: parseInteger(env, 'OMPI_COMM_WORLD_LOCAL_RANK', 0),
      localSize: parseInteger(env, 'OMPI_COMM_WORLD_LOCAL_SIZE', 1),
    };
  }
  if (isSet(env, 'PMI_RANK') || isSet(env, 'PMI_SIZE')) {
    return pick('pmi', 'PMI_RANK', 'PMI_SIZE');
  }
  if (isSet(env, 'SLURM_PROCID') && isSet(env, 'SLURM_NTASKS')) {
    return {
      ...pick('slurm', 'SLURM_PROCID', 'SLURM_NTASKS'),
      localRank: parseInteger(env, 'SLURM_LOCALID', 0),
      crossRank: parseInteger(env, 'SLURM_NODEID', 0),
      crossSize: parseInteger(env, 'SLURM_NNODES', 1),
    };
  }
  if (isSet(env, 'RANK') || isSet(env, 'WORLD_SIZE')) {
    return {
      ...pick('torchrun', 'RANK', 'WORLD_SIZE'),
      localRank: parseInteger(env, 'LOCAL_RANK', 0),
      localSize: parseInteger(env, 'LOCAL_WORLD_SIZE', 1),
      crossRank: parseInteger(env, 'GROUP_RANK', 0),
    };
  }
  return undefined;
}

/**
 * Who is this process in the job? Reads, in order of precedence, HORA_*,
 * Open MPI, PMI, Slurm and torchrun variables; with none of them the job is a
 * single process. Throws HoraConfigError naming the variable for bad values.
 */
export function resolveLaunch(env: Env = process.env): LaunchInfo {
  const layout = readLayout(env);
  if (layout === undefined) {
    return { source: 'single', rank: 0, size: 1, localRank: 0, localSize: 1, crossRank: 0, crossSize: 1, secretDerived: false, isRendezvousHost: false };
  }
  const { source, rankVar, rank, size } = layout;
  if (rank >= size) throw new HoraConfigError(rankVar, env[rankVar], `an integer < ${layout.sizeVar}=${size}`);
  if (layout.localRank !== undefined && layout.localSize !== undefined && layout.localRank >= layout.localSize) {
    const name = source === 'hora' ? 'HORA_LOCAL_RANK' : source === 'ompi' ? 'OMPI_COMM_WORLD_LOCAL_RANK' : 'LOCAL_RANK';
    throw new HoraConfigError(name, env[name], `an integer < local size ${layout.localSize}`);
  }
  if (layout.crossRank !== undefined && layout.crossSize !== undefined && layout.crossRank >= layout.crossSize) {
    const name = source === 'hora' ? 'HORA_CROSS_RANK' : 'SLURM_NODEID';
    throw new HoraConfigError(name, env[name], `an integer < cross size ${layout.crossSize}`);
  }

  const jobKey = externalJobKey(env);
  const launchedByHora = source === 'hora' && isSet(env, 'HORA_JOB_ID');
  const jobId = isSet(env, 'HORA_JOB_ID')
    ? (env.HORA_JOB_ID as string).trim()
    : jobKey !== undefined
      ? sha256(`hora-job\0${jobKey}`).toString('hex').slice(0, 16)
      : undefined;

  const addrGiven = env.HORA_RENDEZVOUS_ADDR?.trim() || (source !== 'hora' ? env.MASTER_ADDR?.trim() : '') || '';
  const rendezvousAddr = addrGiven || '127.0.0.1';
  let rendezvousPort = parsePort(env, 'HORA_RENDEZVOUS_PORT');
  if (rendezvousPort === undefined && source !== 'hora') rendezvousPort = parsePort(env, 'MASTER_PORT');
  if (rendezvousPort === undefined && jobKey !== undefined && source !== 'torchrun') rendezvousPort = derivePort(jobKey);
  if (rendezvousPort === undefined && size > 1) {
    const name = source === 'torchrun' ? 'MASTER_PORT' : 'HORA_RENDEZVOUS_PORT';
    throw new HoraConfigError(name, undefined, `a TCP port: ${layout.sizeVar}=${size} needs a rendezvous server (start the job with \`hora run\`, or set HORA_RENDEZVOUS_ADDR and HORA_RENDEZVOUS_PORT)`);
  }

  let secret = env.HORA_SECRET?.trim() || undefined;
  let secretDerived = false;
  if (secret === undefined && size > 1) {
    const key = jobKey ?? (source === 'torchrun' ? `torchrun ${rendezvousAddr}:${rendezvousPort}` : undefined);
    if (key === undefined) {
      throw new HoraConfigError('HORA_SECRET', undefined, 'a per-job secret: no launcher job id was found to derive one from');
    }
    secret = deriveSecret(key);
    secretDerived = true;
  }

  return {
    source,
    rank,
    size,
    localRank: layout.localRank,
    localSize: layout.localSize,
    crossRank: layout.crossRank,
    crossSize: layout.crossSize,
    rendezvousAddr: size > 1 ? rendezvousAddr : undefined,
    rendezvousPort: size > 1 ? rendezvousPort : undefined,
    secret,
    secretDerived,
    // `hora run` hosts the server itself; every other launcher leaves it to rank 0.
    isRendezvousHost: size > 1 && !launchedByHora && rank === 0,
    jobId,
  };
}

// ---------------------------------------------------------------------------
// Logging, switched by HORA_DEBUG like NCCL_DEBUG.

export type LogLevel = DebugLevel;
export type Logger = (level: LogLevel, message: string) => void;

const LEVEL_ORDER: Record<DebugLevel, number> = { WARN: 0, INFO: 1, TRACE: 2 };

/** Logger writing `hora <component> LEVEL: message` lines to stderr at or below `level`. */
export function makeLogger(component: string, level?: DebugLevel): Logger {
  let threshold: DebugLevel = level ?? 'WARN';
  if (level === undefined) {
    try {
      threshold = parseChoice(process.env, 'HORA_DEBUG', DEBUG_LEVELS, 'WARN', true);
    } catch {
      threshold = 'WARN';
    }
  }
  return (lvl, message) => {
    if (LEVEL_ORDER[lvl] <= LEVEL_ORDER[threshold]) process.stderr.write(`hora ${component} ${lvl}: ${message}\n`);
  };
}
