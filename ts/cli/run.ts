// `hora run`: start N workers as one job and supervise them.
//
// The launcher hosts the rendezvous server, gives each worker its HORA_*
// variables, prefixes their output with [rank], and ends the job as a whole:
// when one worker fails the others get an Abort at once, SIGTERM after a grace
// period and SIGKILL after another, and the launcher exits with the failed
// worker's code (128 + signal number when a signal killed it). Signals sent
// to the launcher are forwarded the same way.
//
// Workers are started through a Spawner (spawn.ts). LocalSpawner (spawn.ts)
// starts them on this machine, SshSpawner (ssh.ts) on other hosts; HostSpawner
// picks one per -H entry and binds the rendezvous server where every worker can reach it. With
// a remote host in the job, output lines are prefixed [rank@host].

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import {
  firstExternalIPv4, HoraConfigError, isLoopback, Logger, makeLogger, parseExportEntry, parseRunExport, readHostId, readSettings, readTimeline,
  resolveExports, resolveIface, DebugLevel, DEBUG_LEVELS, ExportEntry,
} from '../config';
import { RendezvousServer } from '../control/server';
import { mergeTimelines, rankTimelinePath } from '../timeline';
import { DiscoveredHost, discoverHosts, discoverHostsSync, DiscoveryError, DISCOVERY_INTERVAL_MS } from './discovery';
import { Dashboard, startDashboard } from './dashboard';
import { formatStatus, StatusLine } from './status-line';
import { ifaceSubnetWarning } from './iface-check';
import { hostPart, localAddressToward, splitShellWords, SshOptions, SshSpawner } from './ssh';
import { BindRequest, MapBy, readCores, wrapNote } from './bind';
import { HostSlots, LocalSpawner, RendezvousBinding, Spawner, WorkerHandle, WorkerSpec } from './spawn';

// ---------------------------------------------------------------------------
// Arguments.

/** A command-line mistake: printed with the usage hint, exit status 2. */
export class UsageError extends Error {
  readonly code = 'ERR_INVALID_ARGUMENT';
  readonly exitCode = 2;
  constructor(
    readonly flag: string,
    readonly value: string | undefined,
    expected: string,
  ) {
    super(value === undefined ? `${flag}: ${expected}` : `${flag} ${JSON.stringify(value)} is invalid: expected ${expected}`);
    this.name = 'UsageError';
  }
}

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

export const RUN_USAGE = `Usage: hora run [-np N] [options] [--] command [args...]

Starts N copies of command as one hora job: hosts the rendezvous server, sets
HORA_RANK, HORA_SIZE, ... in each worker, prefixes worker output with [rank]
([rank@host] when a host is remote), and stops every worker when one fails.
Exits with the failed worker's status (128 + signal number when it was killed
by a signal), 0 when all succeed.

Job layout:
  -np, -n, --np, --num-proc N
                              number of worker processes (default: all slots of -H or
                              --hostfile; without them, as mpirun, one per core of this
                              machine: the cores this process may run on)
  -H, --hosts, --host HOST:SLOTS,...
                              hosts and worker slots, filled in order (default
                              localhost:N); HOST may be user@host; SLOTS defaults to 1
  --hostfile, --machinefile FILE
                              hosts from FILE, one "host slots=N" a line (# comments)
  --nproc-per-node, --nproc_per_node N
                              torchrun's spelling: N workers on each host (this machine,
                              or every host of -H or --hostfile); N may be cpu or auto
                              (one per core); not with -np
  --nnodes M                  torchrun's host count; hora run starts the workers of every
                              host itself, so M must be the number of hosts of -H or
                              --hostfile (1 without them)
  --standalone                torchrun's one-machine job: what hora run does without -H
  --simulate-hosts            treat every local -H entry as a separate host with its own
                              HORA_HOST_ID, to exercise multi-host code on one machine
  Other launchers' flags that hora run spells differently (--master-addr, --master-port,
  --rdzv-endpoint, --rdzv-backend, --node-rank, --max-restarts, --log-dir, --redirects,
  --tee, --oversubscribe) are refused with the hora run flag to use.

CPU binding:
  --bind-to core|none         core: bind each worker to one core of its host (every
                              hardware thread of the core), with taskset of util-linux,
                              on remote hosts too; cores are those the launcher (or the
                              ssh login on a remote host) may run on. With more workers
                              than cores on a host they are bound round-robin, and hora run
                              says so once. Default none: the OS places workers
  --map-by core|socket        which core the host's local rank i is bound to: the i-th
                              (core) or one socket after another (socket); implies
                              --bind-to core. Not in an elastic job (--min-np)

Output:
  --output-filename DIR       also write each worker's stdout and stderr, as the worker
                              wrote them, to DIR/rank.N/stdout and DIR/rank.N/stderr (N
                              padded to the width of the largest rank, as horovodrun does;
                              DIR/worker.N in an elastic job); remote workers' output is
                              written here too. The terminal shows the same [rank] lines
  --tag-output                mpirun's spelling of what hora run always does: [rank] labels

Remote hosts (any host that is not this machine is reached over ssh):
  -p, --ssh-port PORT         ssh port on the remote hosts
  -i, --ssh-identity FILE     ssh private key
  --ssh-opts "OPTS"           more ssh options, split like a shell would,
                              e.g. --ssh-opts "-F ./ssh_config -o User=train"
  Remote workers run the same node binary (for command "node", this node), in the
  same working directory, with the same script path: these must exist on every
  host. ssh must log in without a prompt (keys or an agent). A failed ssh or
  remote worker stops the job.

Worker environment:
  -x NAME                     set NAME in every worker to its value here (an error if
                              it is unset here); repeatable
  -x NAME=VALUE               set NAME to VALUE in every worker; repeatable
  HORA_RUN_EXPORT="A,B=1"     the same as -x A -x B=1, read from this environment
                              (-x wins for a name in both)
  Local workers inherit this environment whole. Remote workers get what their
  login on that host gives (sshd and the shell: PATH, HOME, ...), then this
  environment's HORA_* variables, then the -x and HORA_RUN_EXPORT variables;
  nothing else is forwarded. Values travel over the ssh connection, never on a
  command line; but -x NAME=VALUE puts VALUE on hora run's own command line:
  pass a secret as -x NAME from the environment.

Network:
  --iface NAME|ADDR           HORA_IFACE: interface or address the rendezvous server
                              binds to and workers use for the data plane. Without it,
                              a job with remote hosts binds the address that routes to
                              the first of them. An address applies to this machine
                              only; an interface name is passed to remote workers too.
                              hora run warns at once when that address is on a subnet
                              none of the remote hosts is on.
  Workers that cannot reach the rendezvous server warn every 10 s (address, OS error,
  what chose the address) and fail after HORA_CONNECT_TIMEOUT_S (default 30).

Timeouts and shutdown:
  --timeout S                 seconds, from the first registration, for all workers to
                              register (default HORA_TIMEOUT_S, 300)
  --grace S                   seconds between Abort, SIGTERM and SIGKILL when the job
                              ends early (default 5)

Elastic training (the training function runs in hora.elastic.run, see docs/elastic.md):
  --min-np A                  go on with at least A workers when workers are lost: the
                              survivors roll back to their last commit, re-form the world
                              with new ranks and go on (without it, a lost worker ends the
                              job); A <= -np
  --max-np B                  most workers in one world (default -np). A failed worker's
                              slot is refilled with a new worker, which joins at the
                              ranks' next commit
  --elastic-timeout S         seconds the job may wait with fewer than A workers before
                              it fails (default 600)
  --host-discovery-script S   instead of -H: the executable S prints the hosts that may run
                              workers now, one "host[:slots]" a line; it runs once before
                              the start (a failure or a bad line is an error) and then every
                              second: new hosts and slots get workers up to --max-np, which
                              join at the next commit; a host that leaves the list has its
                              workers stopped; a failed run is retried and its stderr shown
  A host where a worker fails is blacklisted: no new worker starts there (in a -H job this
  machine's own entries are exempt unless --simulate-hosts is given).
  HORA_ELASTIC_SETTLE_S (default 10) gives the survivors of a loss that long to
  re-register; one that has not (a stopped process) is killed and left out. A worker
  that fails before it enters hora.elastic.run (a syntax error) still ends the job.

Tuning (passed to workers as HORA_* variables, see \`hora env\`):
  --fusion-mb MB              HORA_FUSION_MB, fusion buffer size
  --algo NAME                 HORA_ALGO, allreduce algorithm
  --transport T               HORA_TRANSPORT: auto, tcp or shm
  --topology GRID             HORA_TOPOLOGY, grid of the multi-dimensional allreduce,
                              fastest dimension first, e.g. 4x8x2

Logging and timeline:
  --debug LEVEL               HORA_DEBUG for launcher and workers: WARN, INFO, TRACE
  --timeline FILE             HORA_TIMELINE, write a Chrome trace of every collective;
                              the ranks' files are merged into FILE when the job ends

Monitoring:
  --dashboard [PORT]          serve a live page of the job on http://127.0.0.1:PORT/
                              (default: a free port; the URL is printed at start):
                              collectives/s and bytes/s per rank, busbw per kind,
                              compute/communication split of steps, stalled ranks
  On a terminal a status line (ranks up, collectives/s, bytes/s) stays below the
  workers' output. HORA_STALL_WARN_S (default 60) sets when ranks that have not
  submitted a collective the others wait in are named.

  -h, --help                  show this help

Examples:
  hora run -np 4 node train.js --epochs 3
  hora run --bind-to core --output-filename logs node train.js
  hora run -H node1:4,node2:4 node train.js
  hora run --hostfile hosts.txt -i ~/.ssh/cluster_key node train.js
`;

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
  const command = argv[i];
  const args = argv.slice(i + 1);

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
  const hostsFlag = discovery !== undefined ? `the hosts that --host-discovery-script ${discovery} lists` : hostfile !== undefined ? `--hostfile ${hostfile}` : `-H ${hostsText}`;

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

  let timeoutS: number;
  const timeoutText = values.get('--timeout');
  if (timeoutText !== undefined) timeoutS = positiveNumber('--timeout', timeoutText, false);
  else {
    timeoutS = readSettingsSubset(env, 'HORA_TIMEOUT_S', 'HORA_TIMEOUT_S').timeoutS;
  }
  const graceText = values.get('--grace');
  const graceS = graceText === undefined ? 5 : positiveNumber('--grace', graceText, true);
  const stallWarnS = readSettingsSubset(env, 'HORA_STALL_WARN_S', 'HORA_STALL_WARN_S').stallWarnS;

  const workerEnv: Record<string, string> = {};
  for (const [flag, variable] of Object.entries(TUNING_FLAGS)) {
    const v = values.get(flag);
    if (v === undefined) continue;
    readSettingsSubset({ [variable]: v }, variable, flag);
    workerEnv[variable] = v;
  }
  const exportEnv = usageFrom('HORA_RUN_EXPORT', () => resolveExports(parseRunExport(env), env, 'HORA_RUN_EXPORT', env.HORA_RUN_EXPORT));
  for (const entry of exports) Object.assign(exportEnv, usageFrom('-x', () => resolveExports([entry], env, '-x')));

  let debug: DebugLevel = 'WARN';
  const debugText = workerEnv.HORA_DEBUG ?? env.HORA_DEBUG;
  const level = debugText?.trim().toUpperCase();
  if (level && (DEBUG_LEVELS as readonly string[]).includes(level)) debug = level as DebugLevel;

  let iface = values.get('--iface')?.trim();
  let ifaceFrom: RunOptions['ifaceFrom'] = iface === undefined ? undefined : '--iface';
  if (iface === undefined && env.HORA_IFACE !== undefined && env.HORA_IFACE.trim() !== '') {
    iface = env.HORA_IFACE.trim();
    ifaceFrom = 'HORA_IFACE';
    readSettingsSubset({ HORA_IFACE: iface }, 'HORA_IFACE', 'HORA_IFACE');
  }

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

/** The whole number >= 1 given for `flag` (a count of processes), undefined when not given. Throws UsageError. */
export function countFlag(values: Map<string, string>, flag: string): number | undefined {
  const text = values.get(flag);
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text.trim()) || Number(text) < 1 || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(flag, text, 'a whole number of processes >= 1');
  }
  return Number(text);
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

// [user@]host: letters, digits, dots, dashes, underscores. No leading dash
// (ssh would read an option) and nothing a shell or ssh would interpret.
const HOST_PATTERN = /^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9_][A-Za-z0-9._-]*$/;

/** -H text: host[:slots],... */
export function parseHosts(text: string): HostSlots[] {
  const out: HostSlots[] = [];
  for (const entry of text.split(',')) {
    const trimmed = entry.trim();
    const m = /^(.+?)(?::(\d+))?$/.exec(trimmed);
    if (!m || trimmed === '') throw new UsageError('-H', text, 'host[:slots][,host[:slots]...], e.g. localhost:4');
    if (!HOST_PATTERN.test(m[1])) {
      throw new UsageError('-H', text, `host names of letters, digits, ".", "-", "_" (optionally user@host); ${JSON.stringify(m[1])} is not one (IPv6 addresses are not supported)`);
    }
    const slots = m[2] === undefined ? 1 : Number(m[2]);
    if (slots < 1) throw new UsageError('-H', text, `at least 1 slot for ${m[1]}`);
    out.push({ host: m[1], slots, remote: !isLocalHost(m[1]) });
  }
  return out;
}

/**
 * Hostfile text: one "host [slots=N]" a line; "#" starts a comment; blank
 * lines are skipped. Errors name the file, the line number and the line.
 */
export function parseHostfile(text: string, file: string): HostSlots[] {
  const out: HostSlots[] = [];
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') return;
    const m = /^(\S+)(?:\s+slots\s*=\s*(\d+))?$/.exec(line);
    const bad = (expected: string) => new UsageError(`--hostfile ${file} line ${index + 1}`, raw.trim(), expected);
    if (!m) throw bad('"host slots=N", e.g. "node1 slots=4"');
    if (!HOST_PATTERN.test(m[1])) throw bad(`a host name of letters, digits, ".", "-", "_" (optionally user@host), then slots=N`);
    const slots = m[2] === undefined ? 1 : Number(m[2]);
    if (slots < 1) throw bad(`at least 1 slot for ${m[1]}`);
    out.push({ host: m[1], slots, remote: !isLocalHost(m[1]) });
  });
  if (out.length === 0) throw new UsageError('--hostfile', file, 'at least one "host slots=N" line');
  return out;
}

function readHostfile(file: string): HostSlots[] {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new UsageError('--hostfile', file, `a readable file (${(e as Error).message})`);
  }
  return parseHostfile(text, file);
}

function isLocalHost(userHost: string): boolean {
  const host = hostPart(userHost);
  if (isLoopback(host) || host === os.hostname()) return true;
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) if (a.address === host) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// Spawning.

/** A launch that cannot start (no address for the rendezvous server): message, exit status 1. */
export class LaunchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LaunchError';
  }
}

/**
 * Workers on this machine through LocalSpawner, on remote hosts over ssh. The
 * rendezvous server binds to --iface if given; else, with a remote host in the
 * job, to the local address that routes to it (never loopback, which remote
 * workers cannot reach); else to 127.0.0.1.
 */
export class HostSpawner implements Spawner {
  private readonly local = new LocalSpawner();
  private readonly ssh: SshSpawner;

  constructor(
    ssh: SshOptions,
    private readonly iface: string | undefined,
    private readonly log: Logger,
    private readonly ifaceFrom: RunOptions['ifaceFrom'] = '--iface',
  ) {
    this.ssh = new SshSpawner(ssh);
  }

  async rendezvousBindAddress(hosts: HostSlots[]): Promise<RendezvousBinding> {
    const remote = hosts.filter((h) => h.remote);
    if (this.iface !== undefined) {
      const flag = this.ifaceFrom === 'HORA_IFACE' ? `HORA_IFACE=${this.iface}` : `--iface ${this.iface}`;
      const addr = resolveIface(this.iface);
      const warning = await ifaceSubnetWarning(this.iface, flag, remote.map((h) => h.host));
      if (warning !== undefined) this.log('WARN', warning);
      return { addr, source: this.ifaceFrom === 'HORA_IFACE' ? `HORA_IFACE=${this.iface} in the launcher's environment` : flag };
    }
    if (remote.length === 0) return this.local.rendezvousBindAddress();
    const reasons: string[] = [];
    for (const h of remote) {
      try {
        const addr = await localAddressToward(h.host);
        if (!isLoopback(addr)) return { addr, source: `the launcher's route toward ${h.host} (no --iface given)` };
        reasons.push(`${h.host}: routed over loopback (${addr})`);
      } catch (e) {
        reasons.push(`${h.host}: ${(e as Error).message}`);
      }
    }
    // ssh will report the bad host itself; bind where it has the best chance.
    const fallback = firstExternalIPv4();
    if (fallback === undefined) {
      throw new LaunchError(`no address of this machine reaches the remote hosts (${reasons.join('; ')}); name one with --iface`);
    }
    this.log('WARN', `no route to any remote host (${reasons.join('; ')}); binding the rendezvous server to ${fallback}`);
    return { addr: fallback, source: 'the launcher\'s first non-loopback address, as no route toward the hosts was found (no --iface given)' };
  }

  spawn(spec: WorkerSpec): WorkerHandle {
    return spec.remote ? this.ssh.spawn(spec) : this.local.spawn(spec);
  }
}

// ---------------------------------------------------------------------------
// Output.

const MAX_PENDING_LINE = 64 * 1024;

/**
 * Copies a worker stream to dest with `prefix` before every line. Only whole
 * lines are written (so ranks never interleave mid-line); a very long line is
 * cut at 64 KiB; the last partial line is written, newline added, at end.
 */
export function prefixLines(src: Readable, dest: Writable, prefix: string): Promise<void> {
  const prefixBytes = Buffer.from(prefix);
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const write = (buf: Buffer) => {
    // Output nobody reads any more (closed pipe) is dropped, so that workers never block on it.
    if (dest.destroyed || dest.writableEnded) return;
    if (!dest.write(buf)) {
      src.pause();
      const resume = () => {
        dest.off('drain', resume);
        dest.off('close', resume);
        dest.off('error', resume);
        src.resume();
      };
      dest.on('drain', resume);
      dest.on('close', resume);
      dest.on('error', resume);
    }
  };
  return new Promise((resolve) => {
    src.on('data', (chunk: Buffer) => {
      const out: Buffer[] = [];
      let start = 0;
      for (;;) {
        const nl = chunk.indexOf(0x0a, start);
        if (nl < 0) break;
        out.push(prefixBytes, ...pending, chunk.subarray(start, nl + 1));
        pending = [];
        pendingBytes = 0;
        start = nl + 1;
      }
      if (start < chunk.length) {
        pending.push(chunk.subarray(start));
        pendingBytes += chunk.length - start;
        if (pendingBytes >= MAX_PENDING_LINE) {
          out.push(prefixBytes, ...pending, Buffer.from('\n'));
          pending = [];
          pendingBytes = 0;
        }
      }
      if (out.length > 0) write(Buffer.concat(out));
    });
    const finish = () => {
      if (pendingBytes > 0) write(Buffer.concat([prefixBytes, ...pending, Buffer.from('\n')]));
      pending = [];
      pendingBytes = 0;
      resolve();
    };
    src.once('end', finish);
    src.once('close', finish);
    src.once('error', finish);
  });
}

/**
 * Copies a worker stream's bytes, as they come, to `file` (created, or emptied), beside whatever else
 * reads the stream; resolves once all are written. A file that cannot be written is given up, with one
 * call of onError: the job and the terminal output go on.
 */
export function copyToFile(src: Readable, file: string, onError: (err: Error) => void): Promise<void> {
  return new Promise((resolve) => {
    const out = fs.createWriteStream(file);
    let state: 'open' | 'ending' | 'failed' = 'open';
    out.on('error', (err) => {
      if (state === 'failed') return;
      state = 'failed';
      onError(err);
      resolve();
    });
    src.on('data', (chunk: Buffer) => {
      if (state === 'open') out.write(chunk);
    });
    const finish = () => {
      if (state !== 'open') return;
      state = 'ending';
      out.end(() => resolve());
    };
    src.once('end', finish);
    src.once('close', finish);
    src.once('error', finish);
  });
}

/** A worker's folder under --output-filename: rank.N with N padded to the width of the largest rank, as horovodrun does. */
export function outputFolder(dir: string, rank: number, np: number, elasticWorker?: number): string {
  if (elasticWorker !== undefined) return path.join(dir, `worker.${elasticWorker}`);
  return path.join(dir, `rank.${String(rank).padStart(String(Math.max(np - 1, 0)).length, '0')}`);
}

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
function checkLocalBinding(placement: Omit<WorkerSpec, 'command' | 'args'>[], log: (message: string) => void): void {
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

// ---------------------------------------------------------------------------
// Supervision.

/** 128 + signal number, as shells report a death by signal. */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (os.constants.signals[signal] ?? 0);
}

interface Failure {
  rank: number;
  exitCode: number;
  description: string;
}

/** Runs the job to completion; resolves with the launcher's exit status. */
export async function launch(opts: RunOptions, spawner?: Spawner): Promise<number> {
  // On a terminal, one status line below the output; launcher messages go above it too.
  const status = process.stdout.isTTY ? new StatusLine(process.stdout, () => formatStatus(server.snapshot())) : undefined;
  const printLog: Logger = makeLogger('run', opts.debug);
  const shown = (level: DebugLevel) => DEBUG_LEVELS.indexOf(level) <= DEBUG_LEVELS.indexOf(opts.debug);
  const log: Logger = status ? (level, message) => (shown(level) ? status.around(() => printLog(level, message)) : undefined) : printLog;
  spawner ??= new HostSpawner(opts.ssh, opts.iface, log, opts.ifaceFrom);
  const jobId = crypto.randomBytes(8).toString('hex');
  const secret = crypto.randomBytes(32).toString('hex');
  const baseHostId = readHostId();
  const multiHost = opts.hosts.some((h) => h.remote);

  const binding = await spawner.rendezvousBindAddress(opts.hosts);
  const server = new RendezvousServer({
    size: opts.np,
    secret,
    host: binding.addr,
    port: 0,
    timeoutMs: opts.timeoutS * 1000,
    jobId,
    log,
    stallWarnMs: opts.stallWarnS * 1000,
    elastic: opts.elastic && {
      minSize: opts.elastic.minNp, maxSize: opts.elastic.maxNp, settleMs: opts.elastic.settleS * 1000, waitMs: opts.elastic.timeoutS * 1000,
    },
  });
  const { host: rvAddr, port: rvPort } = await server.listen();
  let dashboard: Dashboard | undefined;
  if (opts.dashboard !== undefined) {
    try {
      dashboard = await startDashboard(() => server.snapshot(), opts.dashboard);
    } catch (e) {
      await server.close();
      throw new LaunchError(`--dashboard ${opts.dashboard}: cannot listen on 127.0.0.1:${opts.dashboard}: ${(e as Error).message}`);
    }
    process.stderr.write(`hora run: dashboard on ${dashboard.url}\n`);
  }
  status?.start();

  // `hora run ... | head` closes our stdout early: keep supervising the job rather than crash on EPIPE.
  const ignoreOutputError = () => undefined;
  process.stdout.on('error', ignoreOutputError);
  process.stderr.on('error', ignoreOutputError);

  // --timeline or HORA_TIMELINE: every rank writes its own file next to FILE; they are merged at the end.
  const timelineText = opts.workerEnv.HORA_TIMELINE !== undefined ? readTimeline(opts.workerEnv) : readTimeline();
  const timeline = timelineText ? path.resolve(timelineText) : undefined;
  // (An elastic job's files are named by worker id; each is removed as its worker starts.)
  if (timeline) for (let r = 0; r < opts.np; r++) fs.rmSync(rankTimelinePath(timeline, r), { force: true });

  const placement = place(opts, baseHostId);
  try {
    if (opts.bindTo === 'core') checkLocalBinding(placement, (message) => process.stderr.write(`hora run: ${message}\n`));
    if (opts.outputDir !== undefined) fs.mkdirSync(opts.outputDir, { recursive: true });
  } catch (e) {
    await server.close();
    await dashboard?.close();
    status?.stop();
    if (e instanceof LaunchError) throw e;
    throw new LaunchError(`--output-filename ${opts.outputDir}: cannot make the folder: ${(e as Error).message}`);
  }
  const workers: WorkerHandle[] = [];
  const outputs: Promise<void>[] = [];
  let failure: Failure | undefined;
  let interrupted: NodeJS.Signals | undefined;
  const timers: NodeJS.Timeout[] = [];
  let stopping = false;

  const running = new Set<WorkerHandle>();
  const killAll = (signal: NodeJS.Signals) => {
    for (const w of workers) if (running.has(w)) w.kill(signal);
  };
  // Abort now, SIGTERM after one grace period, SIGKILL after another.
  const stopJob = (reason: string, rank: number, code: string, firstSignal: NodeJS.Signals | undefined) => {
    if (stopping) return;
    stopping = true;
    server.abort(reason, rank, code);
    const graceMs = opts.graceS * 1000;
    if (firstSignal) killAll(firstSignal);
    else timers.push(setTimeout(() => killAll('SIGTERM'), graceMs));
    timers.push(setTimeout(() => killAll('SIGKILL'), firstSignal ? graceMs : 2 * graceMs));
  };

  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) {
      log('WARN', `second ${signal}: killing all workers`);
      killAll('SIGKILL');
      return;
    }
    interrupted = signal;
    process.stderr.write(`hora run: received ${signal}, stopping ${running.size} worker(s) (send it again to kill them at once)\n`);
    stopJob(`launcher received ${signal}`, -1, 'ERR_SHUTDOWN', signal);
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  for (const s of signals) process.on(s, onSignal);

  const elastic = opts.elastic;
  let nextWorkerId = 0;
  let refillsLeft = elastic ? 2 * elastic.maxNp : 0;
  const byWorkerId = new Map<number, WorkerHandle>();
  let resolveAll: () => void = () => undefined;
  const allDone = new Promise<void>((resolve) => {
    resolveAll = resolve;
  });
  let remaining = 0;
  let lostWorkers = 0;
  // Where an elastic job may place workers: the -H entries, or the discovery script's last good answer.
  let hostList: HostSlots[] = opts.hosts;
  const hostOf = new Map<WorkerHandle, string>();
  const blacklist = new Set<string>();
  // Workers stopped because the discovery script no longer lists their host (not a fault of the host).
  const delisted = new Set<WorkerHandle>();
  // Workers the launcher itself left out and stopped, with why: how such a worker ends says how it was
  // stopped, not how the job went, so it never decides the exit code.
  const leftOut = new Map<WorkerHandle, string>();
  // Elastic: every worker that ended outside the world that went on, with why, for the last line.
  const notInLastWorld: string[] = [];
  const discovery = elastic?.discoveryScript;
  // A host is blacklisted after a failure there, unless it is the launcher's own machine in a -H job
  // (a crashed process says nothing about the machine, and its slot is refilled in place).
  const blacklistable = (h: HostSlots) => discovery !== undefined || h.remote || opts.simulateHosts;
  const runningOn = (host: string) => [...running].filter((w) => hostOf.get(w) === host).length;
  const freeHost = () => hostList.find((h) => !blacklist.has(h.host) && runningOn(h.host) < h.slots);
  const refusesNewWorkers = () => stopping || failure !== undefined || interrupted !== undefined || server.elastic?.isFinishing === true;
  const startWorker = (spec: Omit<WorkerSpec, 'command' | 'args'>) => {
    const workerId = nextWorkerId++;
    const env: Record<string, string> = {
      ...opts.exportEnv,
      ...opts.workerEnv,
      ...(timeline ? { HORA_TIMELINE: timeline } : {}),
      ...spec.env,
      HORA_RENDEZVOUS_ADDR: rvAddr,
      HORA_RENDEZVOUS_ADDR_SOURCE: binding.source,
      HORA_RENDEZVOUS_PORT: String(rvPort),
      HORA_SECRET: secret,
      HORA_JOB_ID: jobId,
      ...(elastic ? { HORA_ELASTIC: '1', HORA_WORKER_ID: String(workerId) } : {}),
    };
    // Local workers of a multi-host job must advertise an address the remote hosts reach, not loopback.
    if (multiHost && !spec.remote && opts.iface === undefined) env.HORA_IFACE = rvAddr;
    if (timeline && elastic) fs.rmSync(rankTimelinePath(timeline, workerId), { force: true });
    const bind: BindRequest | undefined = opts.bindTo === 'core'
      ? { mapBy: opts.mapBy, localRank: Number(spec.env.HORA_LOCAL_RANK), localSize: Number(spec.env.HORA_LOCAL_SIZE) }
      : undefined;
    const w = spawner.spawn({ ...spec, env, bind, command: opts.command, args: opts.args });
    remaining++;
    workers.push(w);
    running.add(w);
    hostOf.set(w, spec.host);
    byWorkerId.set(workerId, w);
    // In an elastic job ranks change as the world re-forms: output is labelled with the worker id.
    const label = elastic ? workerId : w.rank;
    const prefix = multiHost ? `[${label}@${spec.host}] ` : `[${label}] `;
    outputs.push(prefixLines(w.stdout, status ? status.streamTo(process.stdout) : process.stdout, prefix));
    outputs.push(prefixLines(w.stderr, status ? status.streamTo(process.stderr) : process.stderr, prefix));
    if (opts.outputDir !== undefined) {
      // The worker's own bytes, unprefixed, as Open MPI and horovodrun write them (remote output arrives through ssh).
      const folder = outputFolder(opts.outputDir, w.rank, opts.np, elastic ? workerId : undefined);
      const failed = (err: Error) => log('WARN', `--output-filename: cannot write ${folder}: ${err.message}; that output goes to the terminal only`);
      try {
        fs.mkdirSync(folder, { recursive: true });
        outputs.push(copyToFile(w.stdout, path.join(folder, 'stdout'), failed));
        outputs.push(copyToFile(w.stderr, path.join(folder, 'stderr'), failed));
      } catch (e) {
        failed(e as Error);
      }
    }
    w.onExit((code, signal) => {
      running.delete(w);
      const wasDelisted = delisted.delete(w);
      const stoppedBecause = leftOut.get(w);
      if ((code === 0 && signal === null) || failure || interrupted) return;
      const exitCode = signal ? signalExitCode(signal) : (code ?? 1);
      const who = elastic ? `worker ${workerId}` : multiHost ? `rank ${w.rank} on ${spec.host}` : `rank ${w.rank}`;
      const cause = w.describeFailure?.(code, signal);
      const description = cause ?? (signal ? `was killed by ${signal}` : `exited with code ${code}`);
      const what = cause ? `${who}: ${cause}` : `${who} ${description}`;
      const membership = server.elastic;
      const entered = membership?.hasEntered(workerId) === true;
      // A worker started after the job began (a refill or a discovered slot) that fails before it joins,
      // or one stopped because its host left the discovery script's list, costs the job nothing.
      const late = (workerId >= opts.np || wasDelisted) && !entered;
      if (elastic && membership && (entered || late || stoppedBecause !== undefined) && !membership.isFinishing) {
        // A worker lost inside hora.elastic.run: the others re-form the world without it.
        if (entered) lostWorkers++;
        const why = late ? ' before it joined' : '';
        // One the launcher left out was announced then, before the world re-formed without it.
        if (stoppedBecause !== undefined) log('INFO', `${what} (left out: ${stoppedBecause})`);
        else {
          process.stderr.write(`hora run: ${what}${why}; the job goes on without it\n`);
          notInLastWorld.push(`${what}${why}`);
        }
        membership.workerExited(workerId, description);
        const h = hostList.find((x) => x.host === spec.host) ?? { host: spec.host, slots: 1, remote: spec.remote };
        if (wasDelisted) {
          // Its host left the discovery script's list: nothing to blacklist or refill.
        } else if (blacklistable(h) && !blacklist.has(h.host)) {
          blacklist.add(h.host);
          process.stderr.write(`hora run: host ${h.host} is blacklisted after worker ${workerId}'s failure: no new worker starts there\n`);
        }
        if (discovery !== undefined) reconcileHosts();
        else if (entered) refill(workerId, spec);
        return;
      }
      // The training has finished in a world without this worker: how it ended changes nothing.
      const outsideLastWorld = elastic !== undefined && membership !== undefined && membership.isFinishing && !membership.inWorld(workerId);
      if (stoppedBecause !== undefined || outsideLastWorld) {
        log('INFO', `${what} (${stoppedBecause !== undefined ? `left out: ${stoppedBecause}` : 'not in the world that finished'}); it does not decide the job's status`);
        if (stoppedBecause === undefined) notInLastWorld.push(what);
        return;
      }
      failure = { rank: w.rank, exitCode, description };
      process.stderr.write(`hora run: ${what}; stopping the other workers\n`);
      stopJob(what, w.rank, 'ERR_PEER_LOST', undefined);
    });
    w.onDone(() => {
      if (--remaining === 0) resolveAll();
    });
  };
  // The slot of a lost worker gets a new worker (it joins at the ranks' next commit): on the same host,
  // or, when that host is blacklisted, on another with a free slot.
  const refill = (lostId: number, spec: Omit<WorkerSpec, 'command' | 'args'>) => {
    if (!elastic || running.size >= opts.np || running.size >= elastic.maxNp || refusesNewWorkers()) return;
    if (refillsLeft <= 0) {
      log('WARN', `not refilling worker ${lostId}'s slot: ${2 * elastic.maxNp} workers were already started in place of lost ones`);
      return;
    }
    const other = blacklist.has(spec.host) ? freeHost() : undefined;
    if (blacklist.has(spec.host) && other === undefined) {
      process.stderr.write(`hora run: no free slot on a host that is not blacklisted; the job goes on with ${running.size} worker(s)\n`);
      return;
    }
    refillsLeft--;
    const below = running.size < elastic.minNp ? `, fewer than --min-np ${elastic.minNp}` : '';
    const where = other ? ` on ${other.host}` : '';
    process.stderr.write(`hora run: ${running.size} worker(s) left${below}: starting worker ${nextWorkerId} in the slot of worker ${lostId}${where}\n`);
    startWorker(other ? elasticSpec(opts, other, baseHostId, running.size) : spec);
  };

  // Discovery jobs: workers follow the script's list. A host that leaves it has its workers stopped (the
  // others roll back to their last commit, as for any loss); free slots on listed hosts that are not
  // blacklisted get new workers, up to --max-np, and these join at the ranks' next commit.
  const reconcileHosts = () => {
    if (!elastic || refusesNewWorkers()) return;
    // The newest workers go first: the oldest stay, and with them rank 0.
    for (const w of [...running].reverse()) {
      const host = hostOf.get(w) as string;
      const listed = hostList.find((h) => h.host === host);
      if (delisted.has(w) || (listed && runningOn(host) - [...delisted].filter((d) => hostOf.get(d) === host).length <= listed.slots)) continue;
      delisted.add(w);
      const why = listed ? `now lists ${listed.slots} slot(s) on ${host}` : `no longer lists ${host}`;
      leftOut.set(w, `the discovery script ${why}`);
      notInLastWorld.push(`worker ${[...byWorkerId].find(([, x]) => x === w)?.[0]} (the discovery script ${why}; stopped)`);
      process.stderr.write(`hora run: the discovery script ${why}: stopping a worker there\n`);
      w.kill('SIGTERM');
    }
    const usable = hostList.filter((h) => !blacklist.has(h.host)).reduce((n, h) => n + h.slots, 0);
    const target = Math.min(elastic.maxNp, usable);
    while (running.size - delisted.size < target) {
      const h = freeHost();
      if (h === undefined) break;
      process.stderr.write(`hora run: starting worker ${nextWorkerId} on ${h.host} (a free slot the discovery script lists)\n`);
      startWorker(elasticSpec(opts, h, baseHostId, running.size));
    }
  };
  let discoveryTimer: NodeJS.Timeout | undefined;
  if (discovery !== undefined) {
    let failures = 0;
    let busy = false;
    const poll = async () => {
      if (busy || refusesNewWorkers()) return;
      busy = true;
      try {
        const found: DiscoveredHost[] = await discoverHosts(discovery);
        if (failures > 0) process.stderr.write(`hora run: --host-discovery-script ${discovery} works again after ${failures} failed run(s)\n`);
        failures = 0;
        const next = found.map((h) => ({ ...h, remote: !isLocalHost(h.host) }));
        // A blacklisted host that leaves the list and comes back is taken as a new machine (a replaced
        // instance, a pod restarted under the same name).
        for (const host of blacklist) {
          if (next.some((h) => h.host === host)) continue;
          blacklist.delete(host);
          process.stderr.write(`hora run: blacklisted host ${host} left the discovery script's list; if it comes back it gets workers again\n`);
        }
        for (const h of next) {
          const before = hostList.find((x) => x.host === h.host);
          if (!before) log('INFO', `the discovery script lists a new host ${h.host} (${h.slots} slot(s))${blacklist.has(h.host) ? ', blacklisted' : ''}`);
        }
        hostList = next;
        reconcileHosts();
      } catch (e) {
        failures++;
        // Warn at the first failure and then every 30th, with what the script said; the job keeps its hosts.
        if (failures === 1 || failures % 30 === 0) {
          const text = e instanceof DiscoveryError ? e.message : String(e);
          process.stderr.write(`hora run: ${text} (failed ${failures} time(s) in a row; retrying every ${DISCOVERY_INTERVAL_MS / 1000} s, keeping the hosts it listed last)\n`);
        }
      } finally {
        busy = false;
      }
    };
    discoveryTimer = setInterval(() => void poll(), DISCOVERY_INTERVAL_MS);
  }
  if (elastic) {
    server.on('evict', (workerId: number, _pid: number, reason: string) => {
      process.stderr.write(`hora run: ${reason}: killing it\n`);
      const w = byWorkerId.get(workerId);
      if (w === undefined) return;
      leftOut.set(w, `did not re-register within ${elastic.settleS} s (HORA_ELASTIC_SETTLE_S)`);
      notInLastWorld.push(`worker ${workerId} (did not re-register within ${elastic.settleS} s; killed)`);
      w.kill('SIGKILL');
    });
    server.on('elastic-timeout', (message: string) => {
      if (failure || interrupted) return;
      failure = { rank: -1, exitCode: 1, description: message };
      process.stderr.write(`hora run: ${message}; stopping the job\n`);
      stopJob(message, -1, 'ERR_TIMEOUT', undefined);
    });
    server.on('formed', (generation: number, size: number) => {
      if (generation > 0) process.stderr.write(`hora run: the world re-formed with ${size} rank(s)\n`);
    });
  }
  for (const spec of placement) startWorker(spec);

  await allDone;
  if (discoveryTimer) clearInterval(discoveryTimer);
  await Promise.all(outputs);
  status?.stop();
  await dashboard?.close();
  for (const t of timers) clearTimeout(t);
  for (const s of signals) process.off(s, onSignal);
  process.stdout.off('error', ignoreOutputError);
  process.stderr.off('error', ignoreOutputError);
  await server.close();
  removeSharedMemory(jobId, log);
  if (timeline) await finishTimeline(timeline, opts.elastic ? nextWorkerId : opts.np, opts.elastic ? 'worker' : 'rank');

  if (failure) return failure.exitCode;
  if (interrupted) return signalExitCode(interrupted);
  if (lostWorkers > 0 && !server.elastic?.isFinishing) {
    // Every worker ended, some of them lost, and no training function returned: the training did not finish.
    process.stderr.write(`hora run: the job ended before any worker's training function returned (${lostWorkers} worker(s) lost)\n`);
    return 1;
  }
  if (notInLastWorld.length > 0) {
    process.stderr.write(`hora run: the training finished in a world of ${server.elastic?.worldSize ?? '?'}; left out on the way: ${notInLastWorld.join('; ')}\n`);
  }
  return 0;
}

/** Merges the ranks' timeline files into `file`, whether the job succeeded or not, and says what it did. */
async function finishTimeline(file: string, np: number, who: 'rank' | 'worker'): Promise<void> {
  try {
    const m = await mergeTimelines(file, np);
    if (m.merged.length === 0) {
      process.stderr.write(`hora run: no ${who} wrote a timeline file (looked for ${rankTimelinePath(file, 0)} and the like)\n`);
      return;
    }
    const missing = m.missing.length === 0 ? ''
      : `; no file from ${who}(s) ${m.missing.join(', ')} here (a ${who} on another host writes ${rankTimelinePath(file, m.missing[0])} there)`;
    process.stderr.write(`hora run: timeline of ${m.merged.length} ${who}(s), ${m.events} events, written to ${file}${missing}\n`);
  } catch (e) {
    process.stderr.write(`hora run: could not merge the timeline into ${file}: ${(e as Error).message}; ` +
      `the rank files (${rankTimelinePath(file, 0)} ...) are left as they are\n`);
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
function elasticSpec(opts: RunOptions, h: HostSlots, baseHostId: string, index: number): Omit<WorkerSpec, 'command' | 'args'> {
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
function place(opts: RunOptions, baseHostId: string): Omit<WorkerSpec, 'command' | 'args'>[] {
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

/** Removes /dev/shm/hora-<jobId>* left behind by workers that died before cleaning up. */
export function removeSharedMemory(jobId: string, log: Logger, dir = '/dev/shm'): void {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return; // no /dev/shm on this system
  }
  for (const name of names) {
    if (!name.startsWith(`hora-${jobId}`)) continue;
    try {
      fs.unlinkSync(`${dir}/${name}`);
      log('INFO', `removed leftover shared memory ${dir}/${name}`);
    } catch (e) {
      log('WARN', `could not remove ${dir}/${name}: ${(e as Error).message}`);
    }
  }
}

/** `hora run ...`: parses argv (after "run") and runs the job; resolves with the exit status. */
export async function runMain(argv: string[]): Promise<number> {
  const opts = parseCommand('run', RUN_USAGE, () => parseRunArgs(argv));
  if (typeof opts === 'number') return opts;
  try {
    return await launch(opts);
  } catch (e) {
    if (e instanceof LaunchError || e instanceof HoraConfigError) {
      process.stderr.write(`hora run: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}

/**
 * The options of `hora <command>` from parse(); or, having written the help or the usage error, the exit
 * status (0 for --help, 2 for a UsageError).
 */
export function parseCommand<T>(command: string, usage: string, parse: () => T | 'help'): T | number {
  let opts: T | 'help';
  try {
    opts = parse();
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`hora ${command}: ${e.message}\nRun 'hora ${command} --help' for usage.\n`);
      return 2;
    }
    throw e;
  }
  if (opts === 'help') {
    process.stdout.write(usage);
    return 0;
  }
  return opts;
}
