// The table of hora's environment variables: every HORA_* variable once, with the group `hora env` lists
// it under, its default and its help text, and the value sets some of them take. The readers are in
// config.ts (settings, single variables, run exports) and config-launch.ts (who this process is in the
// job); config.ts re-exports this table and is the module the rest of hora imports.

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
    name: 'HORA_SHM_SINGLE_COPY',
    group: 'performance',
    default: '1',
    help: 'alltoall and scatter between ranks of one host: 1 reads each block of 16 KiB or more straight from the sender\'s memory (one copy, process_vm_readv), falling back to the shared-memory rings for a pair whose kernel refuses it; 0 always uses the rings; for tests and measurement.',
  },
  {
    name: 'HORA_NCCL',
    group: 'performance',
    help: 'CUDA builds: 0 keeps NCCL unloaded, so device collectives take the CUDA IPC or staged path. Default: libnccl.so.2 is loaded when found.',
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
    name: 'HORA_TFJS_SKIP_ALLREDUCE',
    group: 'build',
    help: 'Measurement only: 1 makes hora/tfjs\'s DistributedOptimizer skip the allreduce (the ranks drift apart); bench/scaling.sh uses it to time a step without communication.',
  },
];
