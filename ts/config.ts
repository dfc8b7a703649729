// The one place where hora reads its environment.
//
// Every HORA_* variable is declared once in HORA_VARIABLES with its default and
// help text (`hora env` prints that table). readSettings() parses the tuning
// knobs; resolveLaunch() works out who this process is in the job (rank, size,
// where the rendezvous server is, who hosts it) from whichever launcher started
// it: `hora run`, Open MPI, a PMI launcher, Slurm or torchrun. The read*()
// functions after readSettings() read the variables that one place needs (the
// launcher's host id and timeline, the addon path, an adapter's switch). Nothing
// else in hora should look at process.env directly.

import * as crypto from 'node:crypto';
import * as net from 'node:net';
import * as os from 'node:os';
import { ALGORITHM_NAMES, valuesOf } from './native';
import type { AlgorithmName } from './native';

export type Env = Record<string, string | undefined>;

export type DebugLevel = 'WARN' | 'INFO' | 'TRACE';
export const DEBUG_LEVELS: readonly DebugLevel[] = ['WARN', 'INFO', 'TRACE'];

/** Allreduce algorithms HORA_ALGO accepts (ts/native.ts); the native engine owns their meaning. */
export const ALGORITHMS: readonly AlgorithmName[] = valuesOf(ALGORITHM_NAMES);
export type Algorithm = AlgorithmName;

export const TRANSPORTS = ['auto', 'tcp', 'shm'] as const;
export const CALL_SITES = ['sampled', 'all', 'off'] as const;
export type CallSites = (typeof CALL_SITES)[number];
export type Transport = (typeof TRANSPORTS)[number];

export type VariableGroup = 'launch' | 'launcher' | 'rendezvous' | 'network' | 'performance' | 'diagnostics' | 'build';

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
  launcher: 'Read by `hora run` itself',
  rendezvous: 'Rendezvous (control plane)',
  network: 'Network and host identity',
  performance: 'Performance tuning',
  diagnostics: 'Timeouts, logging and timeline',
  build: 'Addon, GPU and adapters (read where they act, not by readSettings)',
};

export const HORA_VARIABLES: readonly HoraVariable[] = [
  { name: 'HORA_RANK', group: 'launch', help: 'Rank of this process, 0 <= rank < HORA_SIZE.' },
  { name: 'HORA_SIZE', group: 'launch', help: 'Number of processes in the job. In a Kubernetes Indexed Job set it (or WORLD_SIZE) in the manifest; the rank is JOB_COMPLETION_INDEX.' },
  { name: 'HORA_LOCAL_RANK', group: 'launch', help: 'Rank among the processes on this host (e.g. to pick a GPU).' },
  { name: 'HORA_LOCAL_SIZE', group: 'launch', help: 'Number of processes on this host.' },
  { name: 'HORA_CROSS_RANK', group: 'launch', help: 'Index of this host among the hosts of the job.' },
  { name: 'HORA_CROSS_SIZE', group: 'launch', help: 'Number of hosts in the job.' },
  { name: 'HORA_JOB_ID', group: 'launch', help: 'Job id chosen by the launcher; names shared-memory segments (/dev/shm/hora-<id>*).' },
  { name: 'HORA_ELASTIC', group: 'launch', help: 'Set to 1 by `hora run --min-np`: the job goes on when a worker is lost; ranks come from the launcher at each re-forming of the world (hora.elastic.run). Set it by hand, with HORA_RENDEZVOUS_ADDR and HORA_SECRET, in workers that a `hora rendezvous` service forms into worlds (Kubernetes pods, docs/cluster.md).' },
  { name: 'HORA_WORKER_ID', group: 'launch', help: 'Set by `hora run --min-np`: the worker\'s number in start order. The oldest surviving worker becomes rank 0 when the world re-forms.' },
  {
    name: 'HORA_RUN_EXPORT',
    group: 'launcher',
    help: 'Variables `hora run` sets in every worker, local and remote, as NAME or NAME=VALUE joined by commas, e.g. "DATA_DIR,EPOCHS=3": the same as -x DATA_DIR -x EPOCHS=3 (a NAME alone takes its value from the launcher\'s environment). Values cannot hold commas: use -x for those.',
  },
  {
    name: 'HORA_ELASTIC_SETTLE_S',
    group: 'launcher',
    default: '10',
    help: 'Seconds `hora run --min-np` gives the surviving workers to re-register after a loss; one that has not (say, a stopped process) is killed with SIGKILL and left out of the next world.',
  },
  {
    name: 'HORA_RENDEZVOUS_ADDR',
    group: 'rendezvous',
    help: 'Address of the rendezvous server (rank 0\'s host outside `hora run`). Default: MASTER_ADDR; 127.0.0.1 for a job on one host; under Slurm the first node of SLURM_STEP_NODELIST. mpirun across hosts and Kubernetes Indexed Jobs must set it.',
  },
  {
    name: 'HORA_RENDEZVOUS_PORT',
    group: 'rendezvous',
    help: 'Port of the rendezvous server. Default: MASTER_PORT, else a port in 20000-60000 derived from the Open MPI / PMIx / Slurm job id, else 29500 in a Kubernetes Indexed Job.',
  },
  {
    name: 'HORA_RENDEZVOUS_ADDR_SOURCE',
    group: 'rendezvous',
    help: 'Set by `hora run` for its workers: what chose HORA_RENDEZVOUS_ADDR (--iface, the route toward a host, ...). A worker that cannot reach the rendezvous names it in its warnings.',
  },
  {
    name: 'HORA_SECRET',
    group: 'rendezvous',
    help: 'Per-job secret that authenticates workers (HMAC-SHA256). `hora run` makes a random one, and under Open MPI 4 it comes from mpirun\'s random per-job key; otherwise it is derived from the job id or rendezvous address, which anyone who can see those can repeat: set it on shared networks.',
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
  { name: 'HORA_TRANSPORT', group: 'network', default: 'auto', help: 'Data transport: auto (shared memory within a host, TCP across hosts), tcp (TCP between every pair), shm (shared memory only: init fails on every rank, naming the hosts, when the ranks are on more than one host).' },
  {
    name: 'HORA_FUSION_MB',
    group: 'performance',
    default: '64',
    help: 'Fusion buffer size in MiB: small tensors queued together are reduced in one operation. 0 disables fusion.',
  },
  {
    name: 'HORA_IPC_SLOTS',
    group: 'performance',
    default: '0',
    help: 'CUDA builds, IPC path: 1 moves device collectives through staging slots on every rank\'s GPU even when every rank shares one GPU (where by default rank 0 does the GPU work); for tests and measurement.',
  },
  {
    name: 'HORA_ALGO',
    group: 'performance',
    default: 'auto',
    help: `Allreduce algorithm: ${ALGORITHMS.join(', ')}. auto picks by message size on one host, and by a cost model of the measured links across hosts.`,
  },
  {
    name: 'HORA_TOPOLOGY',
    group: 'performance',
    help: 'Grid for the multi-dimensional allreduce, fastest dimension first, e.g. 4x8x2 (ranks per host x hosts per rack x racks); the product must be the world size.',
  },
  {
    name: 'HORA_COST_LOCAL',
    group: 'performance',
    help: 'Cost of a link between ranks on one host as ALPHA_US:GBPS (latency in microseconds, bandwidth in GB/s), e.g. 2:8; default: measured at init. Read on rank 0.',
  },
  {
    name: 'HORA_COST_CROSS',
    group: 'performance',
    help: 'Cost of a link between hosts as ALPHA_US:GBPS, e.g. 50:1.25; default: measured at init. Read on rank 0.',
  },
  {
    name: 'HORA_TIMEOUT_S',
    group: 'diagnostics',
    default: '300',
    help: 'Seconds any wait (rendezvous, connection, collective) may take before it fails with ERR_TIMEOUT.',
  },
  {
    name: 'HORA_CONNECT_TIMEOUT_S',
    group: 'diagnostics',
    help: 'Seconds a worker keeps trying to reach the rendezvous server before init fails with ERR_PEER_LOST (ERR_TIMEOUT when HORA_TIMEOUT_S ends first; a warning names the address and the error every 10 s meanwhile). Default: 30 under `hora run`, whose server listens before any worker starts; HORA_TIMEOUT_S under other launchers, where rank 0 opens the server only when its own init() runs.',
  },
  {
    name: 'HORA_STALL_WARN_S',
    group: 'diagnostics',
    default: '60',
    help: 'Seconds a collective may wait for ranks that have not submitted it before the launcher (or rank 0) logs which ranks are missing which collective; fractions allowed, 0 turns the check off. While ranks have not registered at init, the rendezvous names them every 10 s, or every HORA_STALL_WARN_S when that is shorter.',
  },
  { name: 'HORA_DEBUG', group: 'diagnostics', default: 'WARN', help: 'Log level: WARN, INFO or TRACE (logs go to stderr).' },
  {
    name: 'HORA_CALL_SITES',
    group: 'diagnostics',
    default: 'sampled',
    help: 'Which awaited collectives record the line that called them, for the stack of their errors (a record costs 2-3 µs): sampled (up to 256 at once and 4000 a second, at most 1% of a core), all, or off. Errors thrown by wait() always have the caller\'s stack.',
  },
  { name: 'HORA_TIMELINE', group: 'diagnostics', help: 'Write a Chrome trace of every collective and its phases: each rank writes FILE with .rankN before the extension (trace.rank0.json); hora run merges them into FILE.' },
  {
    name: 'HORA_ADDON',
    group: 'build',
    help: 'Path of the hora.node to load; when set, only that file is tried. Default: build/Release, build/Debug, then prebuilds/.',
  },
  {
    name: 'HORA_NCCL',
    group: 'build',
    help: 'CUDA builds: 0 keeps NCCL unloaded, so device collectives take the CUDA IPC or staged path. Default: libnccl.so.2 is loaded when found.',
  },
  {
    name: 'HORA_TFJS_SKIP_ALLREDUCE',
    group: 'build',
    help: 'Measurement only: 1 makes hora/tfjs\'s DistributedOptimizer skip the allreduce (the ranks drift apart); bench/scaling.sh uses it to time a step without communication.',
  },
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

/**
 * How often a wait that goes on says so: a worker that cannot reach the rendezvous server
 * (control/client.ts), and the server waiting for ranks that have not registered (control/server.ts,
 * sooner with a shorter HORA_STALL_WARN_S).
 */
export const WAIT_WARN_EVERY_MS = 10_000;

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

function parseFlag(env: Env, name: string): boolean {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return false;
  const text = raw.trim().toLowerCase();
  if (text === '1' || text === 'true') return true;
  if (text === '0' || text === 'false') return false;
  throw new HoraConfigError(name, raw, '1 or 0 (true or false)');
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
  /** HORA_CONNECT_TIMEOUT_S: seconds to keep trying to reach the rendezvous server (> 0); undefined: see connectTimeoutS(). */
  connectTimeoutS?: number;
  /** HORA_STALL_WARN_S: seconds before a stall is reported (>= 0; 0 = never). */
  stallWarnS: number;
  /** HORA_DEBUG. */
  debug: DebugLevel;
  /** HORA_IPC_SLOTS: the CUDA IPC path's slots algorithm on one GPU too (the addon reads it itself). */
  ipcSlots: boolean;
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
  /** HORA_CALL_SITES. */
  callSites: CallSites;
  /** HORA_HOST_ID, or defaultHostId(). */
  hostId: string;
  /** HORA_TOPOLOGY dimensions, fastest first; empty when unset. */
  topology: number[];
  /** HORA_COST_LOCAL / HORA_COST_CROSS as {alpha: s, beta: s/byte}; undefined: measure. */
  costLocal?: LinkCost;
  costCross?: LinkCost;
  /** HORA_ELASTIC: the launcher re-forms the world when a worker is lost. */
  elastic: boolean;
  /** HORA_WORKER_ID: start order of this worker in an elastic job; undefined outside one. */
  workerId?: number;
  /** HORA_ELASTIC_SETTLE_S: seconds survivors have to re-register after a loss (> 0). */
  elasticSettleS: number;
}

/** alpha-beta cost of a link: a message of n bytes takes alpha + n * beta seconds. */
export interface LinkCost {
  alpha: number;
  beta: number;
}

/** HORA_TOPOLOGY: '4x8x2' -> [4, 8, 2]. */
export function parseTopology(env: Env, name = 'HORA_TOPOLOGY'): number[] {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return [];
  const parts = raw.trim().toLowerCase().split('x');
  const dims = parts.map((p) => (/^\d+$/.test(p.trim()) ? Number(p.trim()) : NaN));
  if (dims.some((d) => !Number.isSafeInteger(d) || d < 1)) {
    throw new HoraConfigError(name, raw, 'positive integers joined by x, fastest dimension first, e.g. 4x8x2');
  }
  return dims;
}

/** HORA_COST_*: 'ALPHA_US:GBPS' -> seconds and seconds per byte. */
function parseLinkCost(env: Env, name: string): LinkCost | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const m = /^\s*([0-9.eE+-]+)\s*:\s*([0-9.eE+-]+)\s*$/.exec(raw);
  const alphaUs = m ? Number(m[1]) : NaN;
  const gbps = m ? Number(m[2]) : NaN;
  if (!(Number.isFinite(alphaUs) && alphaUs >= 0 && Number.isFinite(gbps) && gbps > 0)) {
    throw new HoraConfigError(name, raw, 'ALPHA_US:GBPS, a latency in microseconds >= 0 and a bandwidth in GB/s > 0, e.g. 50:1.25');
  }
  return { alpha: alphaUs * 1e-6, beta: 1 / (gbps * 1e9) };
}

export function readSettings(env: Env = process.env): HoraSettings {
  const iface = env.HORA_IFACE?.trim();
  return {
    timeoutS: parseNumber(env, 'HORA_TIMEOUT_S', 300, false),
    connectTimeoutS: isSet(env, 'HORA_CONNECT_TIMEOUT_S') ? parseNumber(env, 'HORA_CONNECT_TIMEOUT_S', 0, false) : undefined,
    stallWarnS: parseNumber(env, 'HORA_STALL_WARN_S', 60, true),
    debug: parseChoice(env, 'HORA_DEBUG', DEBUG_LEVELS, 'WARN', true),
    fusionMb: parseNumber(env, 'HORA_FUSION_MB', 64, true),
    ipcSlots: parseFlag(env, 'HORA_IPC_SLOTS'),
    algo: parseChoice(env, 'HORA_ALGO', ALGORITHMS, 'auto', false),
    transport: parseChoice(env, 'HORA_TRANSPORT', TRANSPORTS, 'auto', false),
    ifaceAddr: iface ? resolveIface(iface) : undefined,
    timeline: readTimeline(env),
    callSites: parseChoice(env, 'HORA_CALL_SITES', CALL_SITES, 'sampled', false),
    hostId: readHostId(env),
    topology: parseTopology(env),
    costLocal: parseLinkCost(env, 'HORA_COST_LOCAL'),
    costCross: parseLinkCost(env, 'HORA_COST_CROSS'),
    elastic: parseFlag(env, 'HORA_ELASTIC'),
    workerId: parseInteger(env, 'HORA_WORKER_ID', 0),
    elasticSettleS: parseNumber(env, 'HORA_ELASTIC_SETTLE_S', 10, false),
  };
}

/** HORA_HOST_ID trimmed, or defaultHostId() when unset or blank. */
export function readHostId(env: Env = process.env): string {
  return isSet(env, 'HORA_HOST_ID') ? (env.HORA_HOST_ID as string).trim() : defaultHostId();
}

/** HORA_TIMELINE trimmed, as written (not resolved); undefined when unset or blank. */
export function readTimeline(env: Env = process.env): string | undefined {
  const timeline = env.HORA_TIMELINE?.trim();
  return timeline ? timeline : undefined;
}

/** HORA_TOPOLOGY exactly as set, for messages that quote it (parseTopology() gives the dimensions). */
export function readTopologyText(env: Env = process.env): string | undefined {
  return env.HORA_TOPOLOGY;
}

/** HORA_ADDON, the one hora.node the loader tries; undefined when unset or empty (the default places). */
export function readAddonPath(env: Env = process.env): string | undefined {
  return env.HORA_ADDON || undefined;
}

/**
 * HORA_TFJS_SKIP_ALLREDUCE: exactly '1' makes hora/tfjs's DistributedOptimizer skip the allreduce (measurement
 * only: bench/scaling.sh times a step without communication; the ranks drift apart).
 */
export function readTfjsSkipAllreduce(env: Env = process.env): boolean {
  return env.HORA_TFJS_SKIP_ALLREDUCE === '1';
}

// ---------------------------------------------------------------------------
// Variables `hora run` sets in its workers: -x NAME[=VALUE] and HORA_RUN_EXPORT.

/** NAME (the launcher's value is passed on) or NAME=VALUE. */
export interface ExportEntry {
  name: string;
  /** undefined: the value the variable has in the launcher's environment. */
  value?: string;
}

const VARIABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * What `hora run` sets for each worker itself. Exporting one of them would be overwritten without a
 * word, so it is refused instead.
 */
export const WORKER_SET_VARIABLES: readonly string[] = [
  'HORA_RANK', 'HORA_SIZE', 'HORA_LOCAL_RANK', 'HORA_LOCAL_SIZE', 'HORA_CROSS_RANK', 'HORA_CROSS_SIZE', 'HORA_HOST_ID',
  'HORA_RENDEZVOUS_ADDR', 'HORA_RENDEZVOUS_PORT', 'HORA_SECRET', 'HORA_JOB_ID', 'HORA_ELASTIC', 'HORA_WORKER_ID',
];

/** One NAME or NAME=VALUE; errors name `variable` (the flag or variable it came from) and `raw`. */
export function parseExportEntry(text: string, variable: string, raw: string = text): ExportEntry {
  const eq = text.indexOf('=');
  const name = eq < 0 ? text : text.slice(0, eq);
  if (name === '') throw new HoraConfigError(variable, raw, 'NAME or NAME=VALUE with a variable name before the "="');
  if (!VARIABLE_NAME.test(name)) {
    throw new HoraConfigError(variable, raw, `NAME or NAME=VALUE where NAME is letters, digits and "_", not starting with a digit; ${JSON.stringify(name)} is not one`);
  }
  if (WORKER_SET_VARIABLES.includes(name)) {
    throw new HoraConfigError(variable, raw, `a variable other than ${name}, which hora run sets for each worker itself`);
  }
  return eq < 0 ? { name } : { name, value: text.slice(eq + 1) };
}

/** HORA_RUN_EXPORT: "A, B=1" -> [{name: 'A'}, {name: 'B', value: '1'}]; empty entries are skipped. */
export function parseRunExport(env: Env): ExportEntry[] {
  const raw = env.HORA_RUN_EXPORT;
  if (raw === undefined || raw.trim() === '') return [];
  return raw.split(',').map((part) => part.trim()).filter((part) => part !== '').map((part) => parseExportEntry(part, 'HORA_RUN_EXPORT', raw));
}

/**
 * The entries as variables, a NAME alone taking its value from `env` (the launcher's environment); a
 * NAME that is unset there is an error naming `variable` and `raw`, since the workers would silently
 * run without it.
 */
export function resolveExports(entries: ExportEntry[], env: Env, variable: string, raw?: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of entries) {
    const value = e.value ?? env[e.name];
    if (value === undefined) {
      throw new HoraConfigError(variable, raw ?? e.name, `a variable set in the launcher's environment: ${e.name} is unset here (give its value as ${e.name}=VALUE)`);
    }
    out[e.name] = value;
  }
  return out;
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

export type LaunchSource = 'hora' | 'ompi' | 'pmi' | 'slurm' | 'torchrun' | 'kubernetes' | 'single';

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
  /** What chose rendezvousAddr, for messages: "hora run (--iface eth1)", "MASTER_ADDR, set in this worker's environment ...". */
  rendezvousAddrSource?: string;
  /** True when the launcher (`hora run`) hosts the rendezvous server and had it listening before any worker started. */
  launcherHostsServer: boolean;
  /**
   * True for a worker of an elastic job whose rendezvous is a `hora rendezvous` service (HORA_ELASTIC=1
   * without `hora run`, e.g. a Kubernetes pod): rank and size come from the service at each world.
   */
  elasticService?: boolean;
  /** Address the rendezvous host binds: rendezvousAddr when it is an IP address, else 0.0.0.0. */
  rendezvousBindAddr?: string;
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
  /** Variables that gave the local and cross values, named in errors. */
  localRankVar?: string;
  localSizeVar?: string;
  crossRankVar?: string;
  crossSizeVar?: string;
}

function requireInteger(env: Env, name: string, min: number, why: string): number {
  const v = parseInteger(env, name, min);
  if (v === undefined) throw new HoraConfigError(name, undefined, `an integer >= ${min} (${why})`);
  return v;
}

/**
 * Tasks on node `node` from a Slurm tasks-per-node value ("2(x3),1": three
 * nodes with 2 tasks, then one with 1); undefined when the list is shorter.
 */
function slurmTasksOnNode(env: Env, name: string, node: number): number | undefined {
  const raw = env[name] as string;
  let first = 0;
  let found: number | undefined;
  for (const part of raw.trim().split(',')) {
    const m = /^(\d+)(?:\(x(\d+)\))?$/.exec(part.trim());
    if (!m || Number(m[1]) < 1) throw new HoraConfigError(name, raw, 'a Slurm task count list such as "2(x3),1"');
    const nodes = m[2] === undefined ? 1 : Number(m[2]);
    if (found === undefined && node < first + nodes) found = Number(m[1]);
    first += nodes;
  }
  return found;
}

/** First host of a Slurm hostlist: "gpu[07-09,12],login1" -> "gpu07". */
function firstSlurmHost(env: Env, name: string): string | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const text = raw.trim();
  const bad = () => new HoraConfigError(name, raw, 'a Slurm hostlist such as "node[01-04],gpu7"');
  let host = '';
  for (let i = 0; i < text.length && text[i] !== ','; ) {
    if (text[i] === '[') {
      const end = text.indexOf(']', i);
      const first = end < 0 ? null : /^\d+/.exec(text.slice(i + 1, end));
      if (first === null) throw bad();
      host += first[0];
      i = end + 1;
    } else {
      host += text[i++];
    }
  }
  if (host === '' || host.includes(']')) throw bad();
  return host;
}

/**
 * The job layout from the first launcher whose variables are set, in this
 * order: HORA_* (`hora run`, or by hand), Open MPI, PMI (MPICH's Hydra),
 * Slurm, torchrun-style (also Kubeflow's PyTorchJob), a Kubernetes Indexed
 * Job. mpirun and Hydra come before Slurm because inside an allocation they
 * start their daemons with srun, so their ranks inherit the daemons' SLURM_*.
 */
function readLayout(env: Env): Layout | undefined {
  const pick = (source: LaunchSource, rankVar: string, sizeVar: string, why = `${rankVar} is set`): Layout => {
    const size = requireInteger(env, sizeVar, 1, why);
    const rank = requireInteger(env, rankVar, 0, `${sizeVar} is set`);
    return { source, rankVar, sizeVar, rank, size };
  };
  // An Indexed Job's manifest may set HORA_SIZE or WORLD_SIZE alone; the rank is the completion index.
  const indexed = isSet(env, 'JOB_COMPLETION_INDEX');
  if (isSet(env, 'HORA_RANK') || (isSet(env, 'HORA_SIZE') && !indexed)) {
    return {
      ...pick('hora', 'HORA_RANK', 'HORA_SIZE'),
      localRank: parseInteger(env, 'HORA_LOCAL_RANK', 0),
      localSize: parseInteger(env, 'HORA_LOCAL_SIZE', 1),
      crossRank: parseInteger(env, 'HORA_CROSS_RANK', 0),
      crossSize: parseInteger(env, 'HORA_CROSS_SIZE', 1),
      localRankVar: 'HORA_LOCAL_RANK',
      localSizeVar: 'HORA_LOCAL_SIZE',
      crossRankVar: 'HORA_CROSS_RANK',
      crossSizeVar: 'HORA_CROSS_SIZE',
    };
  }
  if (isSet(env, 'OMPI_COMM_WORLD_RANK') || isSet(env, 'OMPI_COMM_WORLD_SIZE')) {
    // Open MPI gives no node index (OMPI_COMM_WORLD_NODE_RANK is this process's index among the
    // processes on its node): the cross rank comes from the host ids at the rendezvous.
    return {
      ...pick('ompi', 'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE'),
      localRank: parseInteger(env, 'OMPI_COMM_WORLD_LOCAL_RANK', 0),
      localSize: parseInteger(env, 'OMPI_COMM_WORLD_LOCAL_SIZE', 1),
      localRankVar: 'OMPI_COMM_WORLD_LOCAL_RANK',
      localSizeVar: 'OMPI_COMM_WORLD_LOCAL_SIZE',
    };
  }
  // srun with a PMI plugin sets PMI_RANK (and PMI_SIZE) equal to SLURM_PROCID (and SLURM_NTASKS): that is
  // Slurm, whose variables also say where rank 0 is.
  const srunPmi = isSet(env, 'SLURM_PROCID') && env.SLURM_PROCID?.trim() === env.PMI_RANK?.trim() &&
    (!isSet(env, 'PMI_SIZE') || env.SLURM_NTASKS?.trim() === env.PMI_SIZE?.trim());
  if ((isSet(env, 'PMI_RANK') || isSet(env, 'PMI_SIZE')) && !srunPmi) {
    // Hydra names the local values MPI_LOCAL*; Cray PALS, PMI_LOCAL_*.
    const hydra = isSet(env, 'MPI_LOCALRANKID') || isSet(env, 'MPI_LOCALNRANKS');
    const localRankVar = hydra ? 'MPI_LOCALRANKID' : 'PMI_LOCAL_RANK';
    const localSizeVar = hydra ? 'MPI_LOCALNRANKS' : 'PMI_LOCAL_SIZE';
    return {
      ...pick('pmi', 'PMI_RANK', 'PMI_SIZE'),
      localRank: parseInteger(env, localRankVar, 0),
      localSize: parseInteger(env, localSizeVar, 1),
      localRankVar,
      localSizeVar,
    };
  }
  if (isSet(env, 'SLURM_PROCID') && isSet(env, 'SLURM_NTASKS')) {
    const node = parseInteger(env, 'SLURM_NODEID', 0);
    const tasksVar = isSet(env, 'SLURM_STEP_TASKS_PER_NODE') ? 'SLURM_STEP_TASKS_PER_NODE' : 'SLURM_TASKS_PER_NODE';
    const nodesVar = isSet(env, 'SLURM_STEP_NUM_NODES') ? 'SLURM_STEP_NUM_NODES' : 'SLURM_NNODES';
    return {
      ...pick('slurm', 'SLURM_PROCID', 'SLURM_NTASKS'),
      localRank: parseInteger(env, 'SLURM_LOCALID', 0),
      localSize: node !== undefined && isSet(env, tasksVar) ? slurmTasksOnNode(env, tasksVar, node) : undefined,
      crossRank: node,
      crossSize: parseInteger(env, nodesVar, 1),
      localRankVar: 'SLURM_LOCALID',
      localSizeVar: tasksVar,
      crossRankVar: 'SLURM_NODEID',
      crossSizeVar: nodesVar,
    };
  }
  if (isSet(env, 'RANK') || (isSet(env, 'WORLD_SIZE') && !indexed)) {
    return {
      ...pick('torchrun', 'RANK', 'WORLD_SIZE'),
      localRank: parseInteger(env, 'LOCAL_RANK', 0),
      localSize: parseInteger(env, 'LOCAL_WORLD_SIZE', 1),
      crossRank: parseInteger(env, 'GROUP_RANK', 0),
      crossSize: parseInteger(env, 'GROUP_WORLD_SIZE', 1),
      localRankVar: 'LOCAL_RANK',
      localSizeVar: 'LOCAL_WORLD_SIZE',
      crossRankVar: 'GROUP_RANK',
      crossSizeVar: 'GROUP_WORLD_SIZE',
    };
  }
  if (indexed) {
    const sizeVar = isSet(env, 'HORA_SIZE') || !isSet(env, 'WORLD_SIZE') ? 'HORA_SIZE' : 'WORLD_SIZE';
    return pick('kubernetes', 'JOB_COMPLETION_INDEX', sizeVar, "JOB_COMPLETION_INDEX is set: give the Job's completions in the manifest");
  }
  return undefined;
}

/** Port rank 0 of a Kubernetes Indexed Job listens on when the manifest names none (pods do not share ports). */
const KUBERNETES_RENDEZVOUS_PORT = 29500;

/**
 * Where the ranks meet, when HORA_RENDEZVOUS_ADDR and MASTER_ADDR are unset:
 * loopback for a job on one host; under Slurm the first node of the step
 * (srun puts rank 0 there with the block, cyclic and plane distributions) or,
 * for mpirun/Hydra inside an allocation, of the job. `nodelistVar` says which.
 * A job known to span hosts with no way to find rank 0 is an error: a
 * loopback default would only time out.
 */
function defaultRendezvousAddr(env: Env, layout: Layout): { addr: string; nodelistVar?: string } {
  const { source, size, localSize, crossSize } = layout;
  if (source === 'kubernetes') {
    throw new HoraConfigError('HORA_RENDEZVOUS_ADDR', undefined,
      'the address of index 0, e.g. "<job>-0.<headless service>": an Indexed Job cannot find it by itself (set HORA_RENDEZVOUS_ADDR or MASTER_ADDR in the manifest)');
  }
  if (source !== 'slurm' && source !== 'ompi' && source !== 'pmi') return { addr: '127.0.0.1' };
  const spans = crossSize !== undefined && crossSize > 1
    ? `${layout.crossSizeVar}=${crossSize}`
    : localSize !== undefined && localSize < size ? `${layout.localSizeVar}=${localSize} < ${layout.sizeVar}=${size}` : undefined;
  if (spans === undefined) return { addr: '127.0.0.1' };
  const lists = source === 'slurm' ? ['SLURM_STEP_NODELIST', 'SLURM_JOB_NODELIST', 'SLURM_NODELIST'] : ['SLURM_JOB_NODELIST', 'SLURM_NODELIST'];
  for (const nodelistVar of lists) {
    const host = firstSlurmHost(env, nodelistVar);
    if (host !== undefined) return { addr: host, nodelistVar };
  }
  const how = source === 'ompi' ? 'mpirun -x HORA_RENDEZVOUS_ADDR=<host of rank 0>' : source === 'pmi' ? 'mpiexec -genv HORA_RENDEZVOUS_ADDR <host of rank 0>' : 'export HORA_RENDEZVOUS_ADDR=<host of rank 0>';
  throw new HoraConfigError('HORA_RENDEZVOUS_ADDR', undefined, `the address of rank 0's host, reachable from every host: the job spans hosts (${spans}); pass it with \`${how}\``);
}

/** What chose the rendezvous address, in words for a message that must tell the user what to change. */
function rendezvousAddrSourceOf(env: Env, launchedByHora: boolean, givenVar: string | undefined, nodelistVar: string | undefined): string {
  // `hora run` says how it picked the address it hands its workers.
  if (launchedByHora && givenVar === 'HORA_RENDEZVOUS_ADDR') {
    const how = env.HORA_RENDEZVOUS_ADDR_SOURCE?.trim();
    return `hora run (${how || 'the address its rendezvous server listens on'})`;
  }
  if (givenVar !== undefined) return `${givenVar}, set in this worker's environment by the user or the launch script`;
  if (nodelistVar !== undefined) return `the first node of ${nodelistVar} (no HORA_RENDEZVOUS_ADDR or MASTER_ADDR set)`;
  return 'the default for a job on one host (no HORA_RENDEZVOUS_ADDR or MASTER_ADDR set)';
}

/**
 * Seconds a worker keeps trying to reach the rendezvous server: HORA_CONNECT_TIMEOUT_S, else a default
 * that depends on who starts the server, never more than the overall timeout.
 *
 * `hora run` has its server listening before it starts any worker, so a worker that has not connected in
 * 30 s never will: the address is wrong or blocked, and waiting the whole HORA_TIMEOUT_S (300 s) only
 * hides that. 30 s still leaves room for a slow ssh login, a loaded host and a worker that imports a
 * large framework before init(). Under other launchers rank 0 opens the server in its own init(), which
 * may come long after the others' (it may load data first): refusing connections is then normal for a
 * while, so the default stays HORA_TIMEOUT_S there, with warnings meanwhile.
 */
export function connectTimeoutS(settings: HoraSettings, launch: LaunchInfo, timeoutS: number): number {
  const chosen = settings.connectTimeoutS ?? (launch.launcherHostsServer ? HORA_RUN_CONNECT_TIMEOUT_S : timeoutS);
  return Math.min(chosen, timeoutS);
}

const HORA_RUN_CONNECT_TIMEOUT_S = 30;

/** Port of `hora rendezvous` when neither side names one. */
export const ELASTIC_SERVICE_PORT = 29500;

// A worker of an elastic job whose rendezvous is a `hora rendezvous` service: it is started by others (a
// Kubernetes Job's pods), has no rank or size of its own, and must be told where the service is and the
// job's secret. Rank and size placeholders (0 of 1) stand until the service assigns the first world.
function elasticServiceLaunch(env: Env): LaunchInfo {
  const why = 'HORA_ELASTIC=1 without `hora run`: the worker of a `hora rendezvous` service';
  const addr = env.HORA_RENDEZVOUS_ADDR?.trim();
  if (!addr) throw new HoraConfigError('HORA_RENDEZVOUS_ADDR', env.HORA_RENDEZVOUS_ADDR, `the address of the hora rendezvous service (${why})`);
  const secret = env.HORA_SECRET?.trim();
  if (!secret) throw new HoraConfigError('HORA_SECRET', env.HORA_SECRET, `the job's secret, the same as the service's (${why})`);
  return {
    source: 'hora', rank: 0, size: 1, localRank: 0, localSize: 1, crossRank: 0, crossSize: 1,
    rendezvousAddr: addr === 'localhost' ? '127.0.0.1' : addr,
    rendezvousPort: parsePort(env, 'HORA_RENDEZVOUS_PORT') ?? ELASTIC_SERVICE_PORT,
    rendezvousAddrSource: 'HORA_RENDEZVOUS_ADDR, the hora rendezvous service named in this worker\'s environment',
    secret, secretDerived: false, isRendezvousHost: false, launcherHostsServer: false, elasticService: true,
  };
}

/**
 * Who is this process in the job? Reads, in order of precedence, HORA_*,
 * Open MPI, PMI, Slurm, torchrun and Kubernetes Indexed Job variables; with
 * none of them the job is a single process. Throws HoraConfigError naming the
 * variable for bad values. docs/cluster.md tells what each launcher sets.
 */
export function resolveLaunch(env: Env = process.env): LaunchInfo {
  if (env.HORA_ELASTIC?.trim() === '1' && !isSet(env, 'HORA_JOB_ID')) return elasticServiceLaunch(env);
  const layout = readLayout(env);
  if (layout === undefined) {
    return { source: 'single', rank: 0, size: 1, localRank: 0, localSize: 1, crossRank: 0, crossSize: 1, secretDerived: false, isRendezvousHost: false, launcherHostsServer: false };
  }
  const { source, rankVar, rank, size } = layout;
  if (rank >= size) throw new HoraConfigError(rankVar, env[rankVar], `an integer < ${layout.sizeVar}=${size}`);
  if (layout.localRank !== undefined && layout.localSize !== undefined && layout.localRank >= layout.localSize) {
    const name = layout.localRankVar as string;
    throw new HoraConfigError(name, env[name], `an integer < local size ${layout.localSize}`);
  }
  if (layout.crossRank !== undefined && layout.crossSize !== undefined && layout.crossRank >= layout.crossSize) {
    const name = layout.crossRankVar as string;
    throw new HoraConfigError(name, env[name], `an integer < cross size ${layout.crossSize}`);
  }

  const jobKey = externalJobKey(env);
  const launchedByHora = source === 'hora' && isSet(env, 'HORA_JOB_ID');
  const givenJobId = isSet(env, 'HORA_JOB_ID') ? (env.HORA_JOB_ID as string).trim() : undefined;
  // `hora run` hosts the server itself; every other launcher leaves it to rank 0.
  const isRendezvousHost = size > 1 && !launchedByHora && rank === 0;
  if (size === 1) {
    return {
      source, rank, size, localRank: 0, localSize: 1, crossRank: 0, crossSize: 1, secretDerived: false, isRendezvousHost,
      launcherHostsServer: launchedByHora, jobId: givenJobId,
    };
  }

  const givenVar = isSet(env, 'HORA_RENDEZVOUS_ADDR') ? 'HORA_RENDEZVOUS_ADDR' : source !== 'hora' && isSet(env, 'MASTER_ADDR') ? 'MASTER_ADDR' : undefined;
  const given = givenVar ? (env[givenVar] as string).trim() : '';
  // 'localhost' may resolve to ::1 on one side and 127.0.0.1 on the other.
  const { addr: rendezvousAddr, nodelistVar } = given ? { addr: given === 'localhost' ? '127.0.0.1' : given } : defaultRendezvousAddr(env, layout);
  const rendezvousAddrSource = rendezvousAddrSourceOf(env, launchedByHora, givenVar, nodelistVar);
  if (nodelistVar !== undefined && isRendezvousHost && isSet(env, 'SLURMD_NODENAME') && env.SLURMD_NODENAME?.trim() !== rendezvousAddr) {
    throw new HoraConfigError('HORA_RENDEZVOUS_ADDR', undefined,
      `the address of rank 0's host: it defaults to ${rendezvousAddr}, the first node of ${nodelistVar}, but rank 0 runs on SLURMD_NODENAME=${env.SLURMD_NODENAME?.trim()}`);
  }

  let rendezvousPort = parsePort(env, 'HORA_RENDEZVOUS_PORT');
  if (rendezvousPort === undefined && source !== 'hora') rendezvousPort = parsePort(env, 'MASTER_PORT');
  if (rendezvousPort === undefined && jobKey !== undefined && source !== 'torchrun') rendezvousPort = derivePort(jobKey);
  if (rendezvousPort === undefined && source === 'kubernetes') rendezvousPort = KUBERNETES_RENDEZVOUS_PORT;
  if (rendezvousPort === undefined) {
    const name = source === 'torchrun' ? 'MASTER_PORT' : 'HORA_RENDEZVOUS_PORT';
    const how = source === 'pmi' ? ' (MPICH: mpiexec -genv HORA_RENDEZVOUS_PORT <port>)' : '';
    throw new HoraConfigError(name, undefined, `a TCP port: ${layout.sizeVar}=${size} needs a rendezvous server and this launcher gives no job id to derive a port from (start the job with \`hora run\`, or set HORA_RENDEZVOUS_PORT${how})`);
  }

  // The secret: HORA_SECRET; else the 128 random bits mpirun (Open MPI 4) puts in every rank's
  // environment; else a hash of the job id or of the rendezvous address, which anyone who can see
  // those can repeat (secretDerived).
  let secret = env.HORA_SECRET?.trim() || undefined;
  let secretDerived = false;
  const ompiKey = source !== 'hora' ? env.OMPI_MCA_orte_precondition_transports?.trim() : undefined;
  if (secret === undefined && ompiKey) {
    secret = deriveSecret(`ompi-precondition-transports\0${ompiKey}`);
  } else if (secret === undefined) {
    const key = jobKey ?? (source === 'hora' ? undefined : `${source} ${rendezvousAddr}:${rendezvousPort}`);
    if (key === undefined) {
      throw new HoraConfigError('HORA_SECRET', undefined, 'a per-job secret: no launcher job id was found to derive one from');
    }
    secret = deriveSecret(key);
    secretDerived = true;
  }
  // The job id reaches only ranks that passed the rendezvous, and its hash admits data-plane connections:
  // mix the secret in, so that it is as hard to guess as the secret. No launcher job id: the server picks one.
  const jobId = givenJobId ?? (jobKey !== undefined ? sha256(`hora-job\0${jobKey}\0${secret}`).toString('hex').slice(0, 16) : undefined);

  return {
    source,
    rank,
    size,
    localRank: layout.localRank,
    localSize: layout.localSize,
    crossRank: layout.crossRank,
    crossSize: layout.crossSize,
    rendezvousAddr,
    rendezvousAddrSource,
    launcherHostsServer: launchedByHora,
    rendezvousPort,
    // A name may resolve to another address on rank 0 (Debian maps its own hostname to 127.0.1.1)
    // or not at all yet (a pod's DNS record): listen on every interface instead.
    rendezvousBindAddr: isRendezvousHost ? (net.isIP(rendezvousAddr) ? rendezvousAddr : '0.0.0.0') : undefined,
    secret,
    secretDerived,
    isRendezvousHost,
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
