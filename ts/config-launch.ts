// Launch resolution: who this process is in the job (rank, size, where the rendezvous server is, who
// hosts it), from whichever launcher started it: `hora run`, Open MPI, a PMI launcher, Slurm, torchrun or
// a Kubernetes Indexed Job. resolveLaunch() is the entry; config.ts re-exports it.

import * as crypto from 'node:crypto';
import * as net from 'node:net';
import { HoraConfigError, isSet, parseInteger, parsePort } from './config-parse';
import type { Env } from './config-variables';

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

/** Most nodes a Slurm node list or task count list is expanded to: a guard against "n[1-99999999]". */
const MAX_SLURM_NODES = 100000;

/**
 * A Slurm task (or CPU) count list, one number per node: "2(x3),1" -> [2, 2, 2, 1]. Both
 * SLURM_TASKS_PER_NODE and SLURM_JOB_CPUS_PER_NODE have this form.
 */
export function slurmCounts(env: Env, name: string): number[] {
  const raw = env[name] as string;
  const counts: number[] = [];
  for (const part of raw.trim().split(',')) {
    const m = /^(\d+)(?:\(x(\d+)\))?$/.exec(part.trim());
    const times = m === null ? 0 : m[2] === undefined ? 1 : Number(m[2]);
    if (!m || Number(m[1]) < 1 || times < 1 || counts.length + times > MAX_SLURM_NODES) {
      throw new HoraConfigError(name, raw, `a Slurm task count list such as "2(x3),1" (at most ${MAX_SLURM_NODES} nodes)`);
    }
    for (let i = 0; i < times; i++) counts.push(Number(m[1]));
  }
  return counts;
}

/**
 * The hosts of a Slurm hostlist, in order: "gpu[07-09,12],login1" -> gpu07, gpu08, gpu09, gpu12,
 * login1; "r[1-2]n[1-2]" -> r1n1, r1n2, r2n1, r2n2. A range keeps the width of its first number
 * (zero padding). undefined when the variable is unset or blank.
 */
export function slurmHostlist(env: Env, name: string): string[] | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const bad = () => new HoraConfigError(name, raw, `a Slurm hostlist such as "node[01-04],gpu7" (at most ${MAX_SLURM_NODES} hosts)`);
  const hosts: string[] = [];
  // Commas inside brackets separate ranges, outside them hosts.
  for (const entry of raw.trim().split(/,(?![^[]*\])/)) {
    let names = [''];
    for (const piece of entry.trim().split(/(\[[^\]]*\])/).filter((x) => x !== '')) {
      if (!piece.startsWith('[')) {
        if (/[[\]\s]/.test(piece)) throw bad();
        names = names.map((n) => n + piece);
        continue;
      }
      const numbers: string[] = [];
      for (const range of piece.slice(1, -1).split(',')) {
        const m = /^(\d+)(?:-(\d+))?$/.exec(range.trim());
        if (!m) throw bad();
        const [from, to] = [Number(m[1]), Number(m[2] ?? m[1])];
        if (to < from || numbers.length + to - from + 1 > MAX_SLURM_NODES) throw bad();
        for (let n = from; n <= to; n++) numbers.push(String(n).padStart(m[1].length, '0'));
      }
      names = names.flatMap((n) => numbers.map((k) => n + k));
      if (names.length > MAX_SLURM_NODES) throw bad();
    }
    if (names.length === 1 && names[0] === '') throw bad();
    hosts.push(...names);
    if (hosts.length > MAX_SLURM_NODES) throw bad();
  }
  return hosts;
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
      localSize: node !== undefined && isSet(env, tasksVar) ? slurmCounts(env, tasksVar)[node] : undefined,
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
    const host = slurmHostlist(env, nodelistVar)?.[0];
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
