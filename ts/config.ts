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
//
// The config module is four files, one job each: the table of variables
// (config-variables.ts), the small parsers and HoraConfigError (config-parse.ts),
// launch resolution (config-launch.ts) and this file (settings, single-variable
// readers, run exports, addresses, the logger), which re-exports the others and is
// the one the rest of hora imports.

import * as net from 'node:net';
import * as os from 'node:os';
import type { LaunchInfo } from './config-launch';
import { HoraConfigError, isSet, parseChoice, parseFlag, parseInteger, parseNumber } from './config-parse';
import { ALGORITHMS, CALL_SITES, DEBUG_LEVELS, TRANSPORTS } from './config-variables';
import type { Algorithm, CallSites, DebugLevel, Env, Transport } from './config-variables';

// The table of variables, the launch resolution and the error type live in files of their own; this module
// is the one the rest of hora imports.
export * from './config-variables';
export * from './config-launch';
export { HoraConfigError } from './config-parse';

/**
 * How often a wait that goes on says so: a worker that cannot reach the rendezvous server
 * (control/client.ts), and the server waiting for ranks that have not registered (control/server.ts,
 * sooner with a shorter HORA_STALL_WARN_S).
 */
export const WAIT_WARN_EVERY_MS = 10_000;

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
  /** HORA_IPC_SLOTS: the CUDA IPC path's slots algorithm on one GPU too (passed to the addon at init). */
  ipcSlots: boolean;
  /** HORA_NCCL: false when it is 0, which keeps libnccl.so.2 unloaded in a CUDA build (passed to the addon at init). */
  nccl: boolean;
  /** HORA_SHM_SINGLE_COPY: false when 0, which moves alltoall's large blocks through the shared-memory rings (passed to the addon at init). */
  shmSingleCopy: boolean;
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
    nccl: readNccl(env),
    shmSingleCopy: isSet(env, 'HORA_SHM_SINGLE_COPY') ? parseFlag(env, 'HORA_SHM_SINGLE_COPY') : true,
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

/** HORA_NCCL: exactly '0' keeps NCCL unloaded (false); anything else, or unset, lets it load (true). */
export function readNccl(env: Env = process.env): boolean {
  return env.HORA_NCCL !== '0';
}

/**
 * HORA_DEBUG's level for places that must not fail on a bad value (loggers, the addon's level at load):
 * WARN when unset or invalid. readSettings() rejects an invalid value at init.
 */
export function readDebugLevel(env: Env = process.env): DebugLevel {
  try {
    return parseChoice(env, 'HORA_DEBUG', DEBUG_LEVELS, 'WARN', true);
  } catch {
    return 'WARN';
  }
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
// Settings meet launch.

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

// ---------------------------------------------------------------------------
// Logging, switched by HORA_DEBUG like NCCL_DEBUG.

export type LogLevel = DebugLevel;
export type Logger = (level: LogLevel, message: string) => void;

const LEVEL_ORDER: Record<DebugLevel, number> = { WARN: 0, INFO: 1, TRACE: 2 };

/** Logger writing `hora <component> LEVEL: message` lines to stderr at or below `level`. */
export function makeLogger(component: string, level?: DebugLevel): Logger {
  const threshold: DebugLevel = level ?? readDebugLevel();
  return (lvl, message) => {
    if (LEVEL_ORDER[lvl] <= LEVEL_ORDER[threshold]) process.stderr.write(`hora ${component} ${lvl}: ${message}\n`);
  };
}
