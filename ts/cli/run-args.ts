// The command line of `hora run`: the flag table (every spelling of every flag, other launchers' flags
// refused with the hora run flag to use) and parseRunArgs(), which checks every flag and turns them into
// RunOptions. A mistake is a UsageError naming the flag and the value received. What --help prints is
// run-usage.ts: a new flag goes in both.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  HoraConfigError, parseExportEntry, parseRunExport, readSettings, resolveExports, DebugLevel, DEBUG_LEVELS, ExportEntry,
} from '../config';
import { discoverHostsSync, DiscoveryError } from './discovery';
import { countFlag, UsageError } from './flags';
import { allocationHosts, isLocalHost, parseHosts, readHostfile } from './hosts';
import { hostPart, splitShellWords, SshOptions } from './ssh';
import { MapBy, readCores } from './bind';
import type { HostSlots } from './spawn';

export interface RunOptions {
  /** Number of workers. */
  np: number;
  /** Where workers go, filled in order; default one local host with np slots. */
  hosts: HostSlots[];
  /** Treat every -H entry as its own host (own HORA_HOST_ID) although all are local. */
  simulateHosts: boolean;
  /** Seconds for all workers to register with the rendezvous server. */
  timeoutS: number;
  /** Seconds between Abort, SIGTERM and SIGKILL when the job ends early. */
  graceS: number;
  /** Extra environment for every worker (from tuning flags). */
  workerEnv: Record<string, string>;
  /** -x and HORA_RUN_EXPORT variables with their values, for every worker, local or remote. */
  exportEnv: Record<string, string>;
  /** --iface, else HORA_IFACE: where the rendezvous server binds (name or address). */
  iface?: string;
  /** Where iface came from, for messages: '--iface' (default) or 'HORA_IFACE' (the launcher's environment). */
  ifaceFrom?: '--iface' | 'HORA_IFACE';
  /** How to reach remote hosts. */
  ssh: SshOptions;
  /** Launcher log level. */
  debug: DebugLevel;
  /** --dashboard: port of the live web page (0 = any free port); undefined = no page. */
  dashboard?: number;
  /** HORA_STALL_WARN_S: seconds before the stall inspector names ranks that hold a collective up (0 = off). */
  stallWarnS: number;
  /** --min-np given: the job goes on when a worker is lost (hora.elastic.run); undefined: a lost worker ends the job. */
  elastic?: ElasticOptions;
  /** --output-filename, made absolute: each worker's stdout and stderr also go to files below it. */
  outputDir?: string;
  /** --bind-to: 'core' binds every worker to a core of its host (with taskset), 'none' leaves placement to the OS. */
  bindTo: 'core' | 'none';
  /** --map-by: which core a local rank takes, in order ('core') or one socket after another ('socket'). */
  mapBy: MapBy;
  command: string;
  args: string[];
}

export interface ElasticOptions {
  /** --min-np: fewest workers the job trains with; below it the job waits for workers. */
  minNp: number;
  /** --max-np: most workers at once, refilled slots included (default -np). */
  maxNp: number;
  /** --elastic-timeout: seconds the job may wait below minNp before it fails. */
  timeoutS: number;
  /** HORA_ELASTIC_SETTLE_S: seconds survivors have to re-register after a loss before they are killed and left out. */
  settleS: number;
  /** --host-discovery-script: run every second; its "host:slots" lines are where workers may run. */
  discoveryScript?: string;
}

// Flags that take a value, by every spelling.
const VALUE_FLAGS: Record<string, string> = {
  '-np': '-np', '-n': '-np', '--num-proc': '-np', '--np': '-np',
  '-H': '-H', '--hosts': '-H', '--host': '-H', '-host': '-H',
  '--hostfile': '--hostfile', '-hostfile': '--hostfile', '--machinefile': '--hostfile', '-machinefile': '--hostfile',
  '--nproc-per-node': '--nproc-per-node', '--nproc_per_node': '--nproc-per-node', '--nnodes': '--nnodes',
  '--output-filename': '--output-filename', '--bind-to': '--bind-to', '--map-by': '--map-by',
  '-p': '-p', '--ssh-port': '-p', '-i': '-i', '--ssh-identity': '-i', '--ssh-opts': '--ssh-opts',
  '--timeout': '--timeout', '--grace': '--grace',
  '--fusion-mb': '--fusion-mb', '--algo': '--algo', '--transport': '--transport', '--iface': '--iface',
  '--debug': '--debug', '--timeline': '--timeline', '--topology': '--topology',
  '--min-np': '--min-np', '--max-np': '--max-np', '--elastic-timeout': '--elastic-timeout',
  '--host-discovery-script': '--host-discovery-script',
};

// Flags of other launchers that hora run spells differently or does not need: what to use instead.
const RENDEZVOUS_HINT = 'hora run hosts the rendezvous itself and starts the workers of every host from one command: ' +
  'give the hosts with -H host1:N,host2:N (or --hostfile FILE); --iface NAME|ADDR chooses the address ' +
  '(for workers that something else starts, as Kubernetes pods, see hora rendezvous)';
const OUTPUT_HINT = 'hora run --output-filename DIR: each rank\'s stdout and stderr in DIR/rank.N/stdout and DIR/rank.N/stderr, ' +
  'and on the terminal as well';
const FOREIGN_FLAGS: Record<string, string> = {
  '--master-addr': RENDEZVOUS_HINT, '--master_addr': RENDEZVOUS_HINT, '--master-port': RENDEZVOUS_HINT, '--master_port': RENDEZVOUS_HINT,
  '--rdzv-endpoint': RENDEZVOUS_HINT, '--rdzv_endpoint': RENDEZVOUS_HINT, '--rdzv-backend': RENDEZVOUS_HINT, '--rdzv_backend': RENDEZVOUS_HINT,
  '--rdzv-id': RENDEZVOUS_HINT, '--rdzv_id': RENDEZVOUS_HINT, '--rdzv-conf': RENDEZVOUS_HINT, '--rdzv_conf': RENDEZVOUS_HINT,
  '--node-rank': RENDEZVOUS_HINT, '--node_rank': RENDEZVOUS_HINT,
  '--max-restarts': 'elastic training in hora: --min-np A [--max-np B] with hora.elastic.run (docs/elastic.md)',
  '--max_restarts': 'elastic training in hora: --min-np A [--max-np B] with hora.elastic.run (docs/elastic.md)',
  '--log-dir': OUTPUT_HINT, '--log_dir': OUTPUT_HINT, '--redirects': OUTPUT_HINT, '--tee': OUTPUT_HINT,
  '--no-python': 'hora run runs the command as given: hora run -np 2 node train.js',
  '--no_python': 'hora run runs the command as given: hora run -np 2 node train.js',
  '--oversubscribe': 'hora run starts at most the slots it is given: raise them (-H localhost:8)',
};

const TUNING_FLAGS: Record<string, string> = {
  '--fusion-mb': 'HORA_FUSION_MB',
  '--algo': 'HORA_ALGO',
  '--transport': 'HORA_TRANSPORT',
  '--iface': 'HORA_IFACE',
  '--debug': 'HORA_DEBUG',
  '--timeline': 'HORA_TIMELINE',
  '--topology': 'HORA_TOPOLOGY',
};

/** Returns options, or 'help'. Throws UsageError naming the flag and the value received. */
export function parseRunArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): RunOptions | 'help' {
  const scanned = scanFlags(argv);
  if (scanned === 'help') return 'help';
  const { values, exports, simulateHosts, dashboard, command, args } = scanned;
  const { np, hosts, discovery } = jobLayout(values, simulateHosts, env);
  const { timeoutS, graceS, stallWarnS } = timeouts(values, env);
  const { workerEnv, exportEnv } = workerEnvironment(values, exports, env);
  const debug = debugLevel(workerEnv.HORA_DEBUG ?? env.HORA_DEBUG);
  const { iface, ifaceFrom } = rendezvousIface(values, env);
  const ssh = sshOptions(values);

  const elastic = parseElastic(values, np, env);
  if (elastic && discovery !== undefined) elastic.discoveryScript = discovery;

  const outputText = values.get('--output-filename');
  if (outputText !== undefined && outputText.trim() === '') throw new UsageError('--output-filename', outputText, 'a directory name');
  const outputDir = outputText === undefined ? undefined : path.resolve(outputText);
  const { bindTo, mapBy } = parseBinding(values, elastic !== undefined);

  if (command === undefined || command === '') {
    throw new UsageError('command', undefined, 'missing: give the program to run after the options, e.g. hora run -np 2 node train.js');
  }
  return {
    np, hosts, simulateHosts, timeoutS, graceS, workerEnv, exportEnv, iface, ifaceFrom, ssh, debug, dashboard, stallWarnS, elastic,
    outputDir, bindTo, mapBy, command, args,
  };
}

/** The command line as given: each flag's value under its main spelling, and the command after the flags. */
interface ScannedFlags {
  values: Map<string, string>;
  /** -x entries, in order. */
  exports: ExportEntry[];
  simulateHosts: boolean;
  /** --dashboard's port (0: any free port), undefined without --dashboard. */
  dashboard: number | undefined;
  command: string | undefined;
  args: string[];
}

/** Reads the flags up to the command (or `--`); 'help' at -h or --help. Throws UsageError for an unknown or incomplete flag. */
function scanFlags(argv: string[]): ScannedFlags | 'help' {
  const values = new Map<string, string>();
  const exports: ExportEntry[] = [];
  let simulateHosts = false;
  let dashboard: number | undefined;
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--') {
      i++;
      break;
    }
    if (arg === '-h' || arg === '--help') return 'help';
    if (arg === '--simulate-hosts') {
      simulateHosts = true;
      continue;
    }
    // torchrun's --standalone (one machine, a rendezvous of its own) and mpirun's --tag-output (every
    // line labelled with its rank) are what hora run does anyway.
    if (arg === '--standalone' || arg === '--tag-output') {
      values.set(arg, '');
      continue;
    }
    if (arg === '--dashboard' || arg.startsWith('--dashboard=')) {
      // The port is optional: only a number right after the flag is taken as one.
      let text = arg.startsWith('--dashboard=') ? arg.slice('--dashboard='.length) : undefined;
      if (text === undefined && /^\d+$/.test(argv[i + 1] ?? '')) text = argv[++i];
      const port = text === undefined ? 0 : Number(text);
      if (text !== undefined && (!/^\d+$/.test(text.trim()) || port > 65535)) throw new UsageError('--dashboard', text, 'a TCP port 0-65535 (0: any free port)');
      dashboard = port;
      continue;
    }
    if (arg === '-x' || arg.startsWith('-x=')) {
      const text = arg === '-x' ? argv[++i] : arg.slice('-x='.length);
      if (text === undefined) throw new UsageError('-x', undefined, 'missing value: give NAME or NAME=VALUE');
      exports.push(usageFrom('-x', () => parseExportEntry(text, '-x')));
      continue;
    }
    if (!arg.startsWith('-') || arg === '-') break;
    const eq = arg.indexOf('=');
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const flag = VALUE_FLAGS[name];
    if (flag === undefined && FOREIGN_FLAGS[name] !== undefined) throw new UsageError(name, undefined, `not an option of hora run: ${FOREIGN_FLAGS[name]}`);
    if (flag === undefined) throw new UsageError(arg, undefined, 'unknown option (see hora run --help)');
    let value: string | undefined;
    if (eq > 0) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      if (value === undefined) throw new UsageError(name, undefined, 'missing value');
      i++;
    }
    values.set(flag, value);
  }
  return { values, exports, simulateHosts, dashboard, command: argv[i], args: argv.slice(i + 1) };
}

/**
 * How many workers and on which hosts: -np, -H or --hostfile or the discovery script (else the Slurm
 * allocation this runs in), torchrun's --nproc-per-node, --nnodes and --standalone, checked against each other.
 */
function jobLayout(values: Map<string, string>, simulateHosts: boolean, env: NodeJS.ProcessEnv): { np: number; hosts: HostSlots[]; discovery: string | undefined } {
  const given = givenHosts(values, values.has('--standalone') ? {} : env);
  const { hostsFlag, discovery } = given;
  let hosts = given.hosts;
  if (values.has('--standalone') && hosts !== undefined) {
    throw new UsageError('--standalone', undefined, `one machine only, but ${hostsFlag} names the hosts: leave out --standalone`);
  }
  const perNode = nprocPerNode(values);
  if (perNode !== undefined && values.has('-np')) {
    throw new UsageError('--nproc-per-node', values.get('--nproc-per-node'), 'either -np or --nproc-per-node, not both');
  }
  // torchrun's workers per host: every host gets that many slots.
  if (perNode !== undefined && hosts !== undefined) hosts = hosts.map((h) => ({ ...h, slots: perNode }));
  checkNnodes(values.get('--nnodes'), hosts, hostsFlag, simulateHosts);

  const npText = values.get('-np');
  let np: number;
  if (npText !== undefined) {
    if (!/^\d+$/.test(npText.trim()) || Number(npText) < 1 || !Number.isSafeInteger(Number(npText))) {
      throw new UsageError('-np', npText, 'a whole number of processes >= 1');
    }
    np = Number(npText);
  } else if (hosts !== undefined) {
    np = hosts.reduce((n, h) => n + h.slots, 0);
    // A discovery job starts with what is there, up to --max-np.
    const maxText = values.get('--max-np');
    if (discovery !== undefined && maxText !== undefined && /^\d+$/.test(maxText.trim()) && Number(maxText) >= 1) np = Math.min(np, Number(maxText));
  } else {
    // As mpirun: one worker per core of this machine (the cores this process may run on).
    np = perNode ?? coreCount();
  }
  if (hosts === undefined) hosts = [{ host: 'localhost', slots: np, remote: false }];
  const slots = hosts.reduce((n, h) => n + h.slots, 0);
  if (np > slots) throw new UsageError('-np', npText, `at most ${slots}, the slots given by ${hostsFlag}`);
  return { np, hosts, discovery };
}

/**
 * The hosts of -H, --hostfile or the discovery script's first run, else of the Slurm allocation this
 * runs in, as mpirun takes them (undefined when there are none), and how to name them in errors.
 */
function givenHosts(values: Map<string, string>, env: NodeJS.ProcessEnv): { hosts: HostSlots[] | undefined; hostsFlag: string; discovery: string | undefined } {
  let hosts: HostSlots[] | undefined;
  const hostsText = values.get('-H');
  const hostfile = values.get('--hostfile');
  if (hostsText !== undefined && hostfile !== undefined) {
    throw new UsageError('--hostfile', hostfile, 'either -H or --hostfile, not both');
  }
  if (hostsText !== undefined) hosts = parseHosts(hostsText);
  if (hostfile !== undefined) hosts = readHostfile(hostfile);
  const discovery = values.get('--host-discovery-script');
  if (discovery !== undefined) {
    const other = hostfile !== undefined ? '--hostfile' : hostsText !== undefined ? '-H' : undefined;
    if (other !== undefined) throw new UsageError('--host-discovery-script', discovery, `either ${other} or a discovery script, not both (the script lists the hosts)`);
    if (!values.has('--min-np')) throw new UsageError('--host-discovery-script', discovery, 'to come with --min-np (hosts come and go only in an elastic job)');
    hosts = usageFromDiscovery(() => discoverHostsSync(discovery)).map((h) => ({ ...h, remote: !isLocalHost(h.host) }));
  }
  if (hosts === undefined && discovery === undefined) {
    const allocated = allocationHosts(env);
    if (allocated !== undefined) {
      const countVar = env.SLURM_TASKS_PER_NODE?.trim() ? 'SLURM_TASKS_PER_NODE' : 'SLURM_JOB_CPUS_PER_NODE';
      return { hosts: allocated, hostsFlag: `the Slurm allocation (SLURM_JOB_NODELIST=${env.SLURM_JOB_NODELIST ?? env.SLURM_NODELIST}, ${countVar}=${env[countVar]})`, discovery };
    }
  }
  const hostsFlag = discovery !== undefined ? `the hosts that --host-discovery-script ${discovery} lists` : hostfile !== undefined ? `--hostfile ${hostfile}` : `-H ${hostsText}`;
  return { hosts, hostsFlag, discovery };
}

/** --timeout (else HORA_TIMEOUT_S), --grace, and HORA_STALL_WARN_S. */
function timeouts(values: Map<string, string>, env: NodeJS.ProcessEnv): { timeoutS: number; graceS: number; stallWarnS: number } {
  let timeoutS: number;
  const timeoutText = values.get('--timeout');
  if (timeoutText !== undefined) timeoutS = positiveNumber('--timeout', timeoutText, false);
  else {
    timeoutS = readSettingsSubset(env, 'HORA_TIMEOUT_S', 'HORA_TIMEOUT_S').timeoutS;
  }
  const graceText = values.get('--grace');
  const graceS = graceText === undefined ? 5 : positiveNumber('--grace', graceText, true);
  const stallWarnS = readSettingsSubset(env, 'HORA_STALL_WARN_S', 'HORA_STALL_WARN_S').stallWarnS;
  return { timeoutS, graceS, stallWarnS };
}

/** The variables of the tuning flags, each checked as its HORA_* variable, and those of HORA_RUN_EXPORT and -x (-x wins). */
function workerEnvironment(values: Map<string, string>, exports: ExportEntry[], env: NodeJS.ProcessEnv): { workerEnv: Record<string, string>; exportEnv: Record<string, string> } {
  const workerEnv: Record<string, string> = {};
  for (const [flag, variable] of Object.entries(TUNING_FLAGS)) {
    const v = values.get(flag);
    if (v === undefined) continue;
    readSettingsSubset({ [variable]: v }, variable, flag);
    workerEnv[variable] = v;
  }
  const exportEnv = usageFrom('HORA_RUN_EXPORT', () => resolveExports(parseRunExport(env), env, 'HORA_RUN_EXPORT', env.HORA_RUN_EXPORT));
  for (const entry of exports) Object.assign(exportEnv, usageFrom('-x', () => resolveExports([entry], env, '-x')));
  return { workerEnv, exportEnv };
}

/** The launcher's log level: --debug, else HORA_DEBUG; WARN when neither names a level. */
function debugLevel(debugText: string | undefined): DebugLevel {
  let debug: DebugLevel = 'WARN';
  const level = debugText?.trim().toUpperCase();
  if (level && (DEBUG_LEVELS as readonly string[]).includes(level)) debug = level as DebugLevel;
  return debug;
}

/** --iface, else HORA_IFACE of the launcher's environment, and which of them it came from. */
function rendezvousIface(values: Map<string, string>, env: NodeJS.ProcessEnv): Pick<RunOptions, 'iface' | 'ifaceFrom'> {
  let iface = values.get('--iface')?.trim();
  let ifaceFrom: RunOptions['ifaceFrom'] = iface === undefined ? undefined : '--iface';
  if (iface === undefined && env.HORA_IFACE !== undefined && env.HORA_IFACE.trim() !== '') {
    iface = env.HORA_IFACE.trim();
    ifaceFrom = 'HORA_IFACE';
    readSettingsSubset({ HORA_IFACE: iface }, 'HORA_IFACE', 'HORA_IFACE');
  }
  return { iface, ifaceFrom };
}

/** -p, -i and --ssh-opts: how to reach the remote hosts. */
function sshOptions(values: Map<string, string>): SshOptions {
  const ssh: SshOptions = { extraArgs: [] };
  const portText = values.get('-p');
  if (portText !== undefined) {
    const port = Number(portText);
    if (!/^\d+$/.test(portText.trim()) || port < 1 || port > 65535) throw new UsageError('-p', portText, 'a TCP port 1-65535');
    ssh.port = port;
  }
  const identity = values.get('-i');
  if (identity !== undefined) {
    try {
      fs.accessSync(identity, fs.constants.R_OK);
    } catch (e) {
      throw new UsageError('-i', identity, `a readable private key file (${(e as Error).message})`);
    }
    ssh.identity = identity;
  }
  const sshOpts = values.get('--ssh-opts');
  if (sshOpts !== undefined) {
    try {
      ssh.extraArgs = splitShellWords(sshOpts);
    } catch (e) {
      throw new UsageError('--ssh-opts', sshOpts, `ssh options quoted as for a shell: ${(e as Error).message}`);
    }
  }
  return ssh;
}

/** The cores of this machine that this process may run on (hardware threads where sysfs does not say). */
function coreCount(): number {
  const cores = readCores();
  return cores !== null && cores.length > 0 ? cores.length : os.availableParallelism();
}

/** torchrun's --nproc-per-node: a count, or "cpu" / "auto" for one worker per core; undefined when not given. */
function nprocPerNode(values: Map<string, string>): number | undefined {
  const text = values.get('--nproc-per-node');
  if (text === undefined) return undefined;
  if (text.trim() === 'cpu' || text.trim() === 'auto') return coreCount();
  return countFlag(values, '--nproc-per-node');
}

/**
 * torchrun's --nnodes: here a check of the number of hosts, as one hora run starts the workers of every
 * host. A MIN:MAX range is an elastic job, which hora counts in workers.
 */
function checkNnodes(text: string | undefined, hosts: HostSlots[] | undefined, hostsFlag: string, simulateHosts: boolean): void {
  if (text === undefined) return;
  if (/^\s*\d+\s*:\s*\d+\s*$/.test(text)) {
    const [min, max] = text.split(':').map((x) => Number(x));
    if (min !== max) throw new UsageError('--nnodes', text, 'a number of hosts: hora counts an elastic job in workers, give --min-np and --max-np');
    text = String(min);
  }
  if (!/^\s*\d+\s*$/.test(text) || Number(text) < 1) throw new UsageError('--nnodes', text, 'a whole number of hosts >= 1');
  // Hosts as HORA_HOST_ID counts them: every local entry is this machine, unless --simulate-hosts.
  const given = hosts === undefined ? 1 : new Set(hosts.map((h, i) => (h.remote ? hostPart(h.host) : simulateHosts ? `local#${i}` : 'local'))).size;
  if (Number(text) !== given) {
    const which = hosts === undefined ? 'this machine only, as no -H or --hostfile names others' : `the ${given} host(s) of ${hostsFlag}`;
    throw new UsageError('--nnodes', text, `${given} (hora run starts the workers of every host itself; they are ${which}: name the hosts with -H host1:N,host2:N)`);
  }
}

/** --bind-to and --map-by. --map-by alone binds to cores, as Open MPI's mpirun does with it. */
function parseBinding(values: Map<string, string>, elastic: boolean): { bindTo: 'core' | 'none'; mapBy: MapBy } {
  const bindText = values.get('--bind-to');
  const mapText = values.get('--map-by');
  if (bindText !== undefined && bindText !== 'core' && bindText !== 'none') throw new UsageError('--bind-to', bindText, 'core or none');
  if (mapText !== undefined && mapText !== 'core' && mapText !== 'socket') throw new UsageError('--map-by', mapText, 'core or socket');
  if (mapText !== undefined && bindText === 'none') throw new UsageError('--map-by', mapText, 'to come without --bind-to none (it says which core each rank is bound to)');
  const bindTo = bindText === 'core' || (bindText === undefined && mapText !== undefined) ? 'core' : 'none';
  if (bindTo === 'core' && elastic) {
    throw new UsageError(bindText !== undefined ? '--bind-to' : '--map-by', bindText ?? mapText, 'no binding in an elastic job (--min-np): workers come and go there, and hora run does not yet place them on free cores');
  }
  return { bindTo, mapBy: (mapText ?? 'core') as MapBy };
}

// --min-np, --max-np and --elastic-timeout; undefined without --min-np (the others then have no use).
function parseElastic(values: Map<string, string>, np: number, env: NodeJS.ProcessEnv): ElasticOptions | undefined {
  const count = (flag: string) => countFlag(values, flag);
  const minNp = count('--min-np');
  const maxNp = count('--max-np');
  const timeoutText = values.get('--elastic-timeout');
  if (minNp === undefined) {
    if (maxNp !== undefined) throw new UsageError('--max-np', values.get('--max-np'), 'to come with --min-np (without it a lost worker ends the job)');
    if (timeoutText !== undefined) throw new UsageError('--elastic-timeout', timeoutText, 'to come with --min-np (without it a lost worker ends the job)');
    return undefined;
  }
  if (minNp > np) throw new UsageError('--min-np', values.get('--min-np'), `at most -np (${np}): the job starts with -np workers`);
  if (maxNp !== undefined && maxNp < np) throw new UsageError('--max-np', values.get('--max-np'), `at least -np (${np}): the job starts with -np workers`);
  const timeoutS = timeoutText === undefined ? 600 : positiveNumber('--elastic-timeout', timeoutText, false);
  const settleS = readSettingsSubset(env, 'HORA_ELASTIC_SETTLE_S', 'HORA_ELASTIC_SETTLE_S').elasticSettleS;
  return { minNp, maxNp: maxNp ?? np, timeoutS, settleS };
}

// Runs parse; a HoraConfigError from it becomes a UsageError naming `flag`.
function usageFrom<T>(flag: string, parse: () => T): T {
  try {
    return parse();
  } catch (e) {
    if (e instanceof HoraConfigError) throw new UsageError(flag, e.value, e.expected);
    throw e;
  }
}

// Runs discover; a DiscoveryError from it becomes a UsageError naming the script (or its output line).
function usageFromDiscovery<T>(discover: () => T): T {
  try {
    return discover();
  } catch (e) {
    if (e instanceof DiscoveryError) throw new UsageError(e.where, e.received, e.expected);
    throw e;
  }
}

// Validates one variable through the shared config parser; errors name `flag`.
function readSettingsSubset(env: NodeJS.ProcessEnv, variable: string, flag: string) {
  try {
    return readSettings({ HORA_HOST_ID: 'unused', [variable]: env[variable] });
  } catch (e) {
    if (e instanceof HoraConfigError) throw new UsageError(flag, e.value, e.expected);
    throw e;
  }
}

function positiveNumber(flag: string, text: string, allowZero: boolean): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n) || n < 0 || (!allowZero && n === 0)) {
    throw new UsageError(flag, text, allowZero ? 'a number of seconds >= 0' : 'a number of seconds > 0');
  }
  return n;
}
