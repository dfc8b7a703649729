'use strict';
// resolveLaunch() under cluster managers other than `hora run`: each one's variables -> rank, size, local
// and cross values, where to meet (address, port, which rank hosts it and on what it binds) and the secret.
// The Open MPI and MPICH environments are the ones Open MPI 4.1.4 and MPICH 4.0.2 (Hydra) really set.
// Ends with two jobs of real processes joining through init() with a cluster manager's variables.
const t = require('tap');
const os = require('node:os');
const dns = require('node:dns');
const path = require('node:path');
const { spawn } = require('node:child_process');
const config = require('../dist/ts/config.js');

const { resolveLaunch, HoraConfigError } = config;

// What one rank of `mpirun -np 4 -H a:2,b:2` sees (values from Open MPI 4.1.4).
function ompiEnv(rank, extra = {}) {
  return {
    OMPI_COMM_WORLD_RANK: String(rank), OMPI_COMM_WORLD_SIZE: '4',
    OMPI_COMM_WORLD_LOCAL_RANK: String(rank % 2), OMPI_COMM_WORLD_LOCAL_SIZE: '2', OMPI_COMM_WORLD_NODE_RANK: String(rank % 2),
    OMPI_MCA_ess_base_jobid: '1332805633', PMIX_NAMESPACE: '1332805633', PMIX_RANK: String(rank),
    OMPI_MCA_orte_precondition_transports: '76d6708f52f2b4bb-25ef58ad91a09b95',
    ...extra,
  };
}

// What one rank of `mpiexec -n 4` (MPICH Hydra, two hosts of two) sees: no job id at all.
function hydraEnv(rank, extra = {}) {
  return {
    PMI_RANK: String(rank), PMI_SIZE: '4', PMI_FD: '6', MPI_LOCALRANKID: String(rank % 2), MPI_LOCALNRANKS: '2',
    MPIR_CVAR_CH3_INTERFACE_HOSTNAME: rank < 2 ? 'a' : 'b', ...extra,
  };
}

// What task `rank` of `srun -N2 -n4` inside `sbatch` sees: nodes gpu07 and gpu08, two tasks each.
function slurmEnv(rank, extra = {}) {
  const node = Math.floor(rank / 2);
  return {
    SLURM_PROCID: String(rank), SLURM_NTASKS: '4', SLURM_LOCALID: String(rank % 2), SLURM_NODEID: String(node),
    SLURM_NNODES: '2', SLURM_STEP_NUM_NODES: '2', SLURM_STEP_NUM_TASKS: '4', SLURM_TASKS_PER_NODE: '2(x2)', SLURM_STEP_TASKS_PER_NODE: '2(x2)',
    SLURM_JOB_ID: '4242', SLURM_STEP_ID: '0', SLURM_JOB_NODELIST: 'gpu[07-08]', SLURM_STEP_NODELIST: 'gpu[07-08]',
    SLURM_LAUNCH_NODE_IPADDR: '10.0.0.7', SLURMD_NODENAME: `gpu0${7 + node}`, ...extra,
  };
}

// Index `i` of a 4-completion Indexed Job whose manifest sets the size and index 0's name.
function indexedJobEnv(i, extra = {}) {
  return { JOB_COMPLETION_INDEX: String(i), HORA_SIZE: '4', HORA_RENDEZVOUS_ADDR: 'train-0.train', ...extra };
}

function expectConfigError(t, env, variable, value, message) {
  let err;
  try {
    resolveLaunch(env);
  } catch (e) {
    err = e;
  }
  t.ok(err instanceof HoraConfigError, `${variable}: a HoraConfigError (got ${err})`);
  if (!err) return;
  t.equal(err.variable, variable);
  t.equal(err.code, 'ERR_INVALID_ARGUMENT');
  t.match(err.message, value === undefined ? `${variable}=(unset)` : `${variable}=${JSON.stringify(value)}`);
  if (message) t.match(err.message, message);
}

t.test('Open MPI: layout from OMPI_COMM_WORLD_*, cross values left to the host ids', async (t) => {
  const r3 = resolveLaunch(ompiEnv(3, { HORA_RENDEZVOUS_ADDR: '10.77.0.1' }));
  t.match(r3, { source: 'ompi', rank: 3, size: 4, localRank: 1, localSize: 2, isRendezvousHost: false, rendezvousAddr: '10.77.0.1' });
  t.equal(r3.crossRank, undefined, 'OMPI_COMM_WORLD_NODE_RANK is not a node index');
  t.equal(r3.crossSize, undefined);
});

t.test('Open MPI on one host: loopback, a port from the job id, the secret from mpirun\'s random key', async (t) => {
  const one = (rank) => ompiEnv(rank, { OMPI_COMM_WORLD_SIZE: '3', OMPI_COMM_WORLD_LOCAL_RANK: String(rank), OMPI_COMM_WORLD_LOCAL_SIZE: '3' });
  const [r0, r2] = [resolveLaunch(one(0)), resolveLaunch(one(2))];
  t.match(r0, { rendezvousAddr: '127.0.0.1', rendezvousBindAddr: '127.0.0.1', isRendezvousHost: true, secretDerived: false });
  t.match(r2, { rendezvousAddr: '127.0.0.1', isRendezvousHost: false, rendezvousBindAddr: undefined });
  t.equal(r0.rendezvousPort, r2.rendezvousPort, 'every rank derives the same port');
  t.equal(r0.secret, r2.secret, 'and the same secret');
  const otherJob = resolveLaunch({ ...one(0), OMPI_MCA_orte_precondition_transports: '0000000000000001-0000000000000002' });
  t.not(otherJob.secret, r0.secret, 'another mpirun, another secret');
  t.not(r0.secret, config.deriveSecret('OMPI_MCA_ess_base_jobid=1332805633'), 'not the secret anyone can compute from the job id');
  const noKey = { ...one(0) };
  delete noKey.OMPI_MCA_orte_precondition_transports;
  t.match(resolveLaunch(noKey), { secretDerived: true }, 'without the key: derived from the job id, and flagged as such');
  t.match(resolveLaunch({ ...one(0), HORA_SECRET: 'given' }), { secret: 'given', secretDerived: false });
});

t.test('Open MPI across hosts: rank 0\'s address must be given; a name makes rank 0 bind every interface', async (t) => {
  expectConfigError(t, ompiEnv(1), 'HORA_RENDEZVOUS_ADDR', undefined, /OMPI_COMM_WORLD_LOCAL_SIZE=2 < OMPI_COMM_WORLD_SIZE=4.*mpirun -x HORA_RENDEZVOUS_ADDR/);
  t.match(resolveLaunch(ompiEnv(0, { HORA_RENDEZVOUS_ADDR: '10.77.0.1' })), { rendezvousAddr: '10.77.0.1', rendezvousBindAddr: '10.77.0.1' });
  // Kubeflow MPIJob: mpirun -x HORA_RENDEZVOUS_ADDR=<job>-worker-0.<job>-worker
  const mpiJob = resolveLaunch(ompiEnv(0, { HORA_RENDEZVOUS_ADDR: 'train-worker-0.train-worker' }));
  t.match(mpiJob, { rendezvousAddr: 'train-worker-0.train-worker', rendezvousBindAddr: '0.0.0.0', isRendezvousHost: true });
  t.match(resolveLaunch(ompiEnv(0, { MASTER_ADDR: '10.0.0.9', MASTER_PORT: '29400' })), { rendezvousAddr: '10.0.0.9', rendezvousPort: 29400 });
  // mpirun inside a Slurm allocation: rank 0 is on the allocation's first node. The daemons were started
  // by srun, so the ranks also carry SLURM_* of their daemon; OMPI_* decide.
  const inSlurm = resolveLaunch(ompiEnv(2, { SLURM_JOB_NODELIST: 'cn[012-013]', SLURM_PROCID: '0', SLURM_NTASKS: '1', SLURM_JOB_ID: '9' }));
  t.match(inSlurm, { source: 'ompi', rank: 2, rendezvousAddr: 'cn012' });
});

t.test('Open MPI: bad values name the variable and the value', async (t) => {
  expectConfigError(t, ompiEnv(0, { OMPI_COMM_WORLD_LOCAL_RANK: '2' }), 'OMPI_COMM_WORLD_LOCAL_RANK', '2', /local size 2/);
  expectConfigError(t, ompiEnv(0, { OMPI_COMM_WORLD_LOCAL_SIZE: 'two' }), 'OMPI_COMM_WORLD_LOCAL_SIZE', 'two');
  expectConfigError(t, ompiEnv(4), 'OMPI_COMM_WORLD_RANK', '4');
  expectConfigError(t, ompiEnv(0, { HORA_RENDEZVOUS_ADDR: 'a', HORA_RENDEZVOUS_PORT: '0' }), 'HORA_RENDEZVOUS_PORT', '0');
});

t.test('MPICH (Hydra): PMI_* and MPI_LOCAL*; no job id, so the port must be given', async (t) => {
  const one = (rank, extra) => hydraEnv(rank, { MPI_LOCALRANKID: String(rank), MPI_LOCALNRANKS: '4', ...extra });
  expectConfigError(t, one(1), 'HORA_RENDEZVOUS_PORT', undefined, /mpiexec -genv HORA_RENDEZVOUS_PORT/);
  const [r0, r3] = [resolveLaunch(one(0, { HORA_RENDEZVOUS_PORT: '29500' })), resolveLaunch(one(3, { HORA_RENDEZVOUS_PORT: '29500' }))];
  t.match(r0, { source: 'pmi', rank: 0, size: 4, localRank: 0, localSize: 4, rendezvousAddr: '127.0.0.1', rendezvousPort: 29500, isRendezvousHost: true, secretDerived: true });
  t.match(r3, { rank: 3, localRank: 3, isRendezvousHost: false });
  t.equal(r0.secret, r3.secret, 'every rank derives the same secret from the rendezvous address');
  expectConfigError(t, hydraEnv(2, { HORA_RENDEZVOUS_PORT: '29500' }), 'HORA_RENDEZVOUS_ADDR', undefined, /MPI_LOCALNRANKS=2 < PMI_SIZE=4/);
  t.match(resolveLaunch(hydraEnv(2, { HORA_RENDEZVOUS_PORT: '29500', HORA_RENDEZVOUS_ADDR: 'a' })), { localRank: 0, localSize: 2, rendezvousAddr: 'a' });
  expectConfigError(t, hydraEnv(1, { MPI_LOCALRANKID: '2', HORA_RENDEZVOUS_PORT: '1' }), 'MPI_LOCALRANKID', '2');
  expectConfigError(t, hydraEnv(1, { PMI_SIZE: '-4' }), 'PMI_SIZE', '-4');
});

t.test('PMI launched by srun (--mpi=pmi2) is read as Slurm; Hydra inside an allocation stays PMI', async (t) => {
  const srunPmi = resolveLaunch(slurmEnv(1, { PMI_RANK: '1', PMI_SIZE: '4', PMI_FD: '5' }));
  t.match(srunPmi, { source: 'slurm', rank: 1, rendezvousAddr: 'gpu07' });
  t.match(resolveLaunch(slurmEnv(1, { PMI_RANK: '1' })), { source: 'slurm' }, 'also when the plugin sets no PMI_SIZE');
  // Hydra's proxies are srun tasks (one per node); the ranks inherit the proxy's SLURM_PROCID.
  const hydraInSlurm = resolveLaunch(hydraEnv(3, { SLURM_PROCID: '1', SLURM_NTASKS: '2', SLURM_JOB_ID: '77', SLURM_JOB_NODELIST: 'gpu[07-08]' }));
  t.match(hydraInSlurm, { source: 'pmi', rank: 3, localRank: 1, rendezvousAddr: 'gpu07' });
  t.ok(hydraInSlurm.rendezvousPort >= 20000, 'the port comes from the Slurm job id');
});

t.test('Slurm: srun tasks across two nodes meet at the first node of the step', async (t) => {
  const ranks = [0, 1, 2, 3].map((r) => resolveLaunch(slurmEnv(r)));
  ranks.forEach((l, r) => {
    t.match(l, {
      source: 'slurm', rank: r, size: 4, localRank: r % 2, localSize: 2, crossRank: Math.floor(r / 2), crossSize: 2,
      rendezvousAddr: 'gpu07', isRendezvousHost: r === 0, secretDerived: true,
    }, `task ${r}`);
    t.equal(l.rendezvousPort, ranks[0].rendezvousPort);
    t.equal(l.secret, ranks[0].secret);
    t.equal(l.jobId, ranks[0].jobId);
  });
  t.equal(ranks[0].rendezvousBindAddr, '0.0.0.0', 'a node name: rank 0 listens on every interface');
  const step1 = resolveLaunch(slurmEnv(0, { SLURM_STEP_ID: '1' }));
  t.not(step1.secret, ranks[0].secret, 'each job step is its own hora job');
  const withSecret = (secret) => resolveLaunch(slurmEnv(2, { HORA_SECRET: secret })).jobId;
  t.equal(withSecret('a'), resolveLaunch(slurmEnv(0, { HORA_SECRET: 'a' })).jobId, 'the ranks agree on the job id');
  t.not(withSecret('a'), withSecret('b'), 'which mixes in the secret: the public job id does not give it away');
  t.match(resolveLaunch(slurmEnv(3, { HORA_RENDEZVOUS_ADDR: '10.1.0.7', HORA_SECRET: 's' })), { rendezvousAddr: '10.1.0.7', secret: 's', secretDerived: false });
});

t.test('Slurm: local size from the tasks-per-node list, hostlists, one node, and rank 0 elsewhere', async (t) => {
  const uneven = (rank, node) => slurmEnv(rank, { SLURM_NODEID: String(node), SLURM_STEP_TASKS_PER_NODE: '3,1', SLURM_LOCALID: String(node === 0 ? rank : 0) });
  t.match(resolveLaunch(uneven(2, 0)), { localRank: 2, localSize: 3, crossRank: 0 });
  t.match(resolveLaunch(uneven(3, 1)), { localRank: 0, localSize: 1, crossRank: 1 });
  t.match(resolveLaunch(slurmEnv(0, { SLURM_STEP_NODELIST: 'node[001-004,007],gpu12', SLURMD_NODENAME: 'node001' })), { rendezvousAddr: 'node001' });
  t.match(resolveLaunch(slurmEnv(0, { SLURM_STEP_NODELIST: 'login1,node[1-2]', SLURMD_NODENAME: 'login1' })), { rendezvousAddr: 'login1' });
  t.match(resolveLaunch(slurmEnv(1, { SLURM_STEP_NODELIST: 'r[1-2]n[07-09]' })), { rendezvousAddr: 'r1n07' });
  t.match(resolveLaunch(slurmEnv(1, { SLURM_STEP_NODELIST: '', SLURM_JOB_NODELIST: 'big[100-200]' })), { rendezvousAddr: 'big100' });
  const oneNode = { SLURM_STEP_NUM_NODES: '1', SLURM_NNODES: '1', SLURM_STEP_TASKS_PER_NODE: '4', SLURM_NODEID: '0', SLURM_LOCALID: '3', SLURM_STEP_NODELIST: 'gpu07' };
  t.match(resolveLaunch(slurmEnv(3, oneNode)), { localSize: 4, crossSize: 1, rendezvousAddr: '127.0.0.1' });
  // srun --distribution=arbitrary (or a hand-made nodelist) can put rank 0 elsewhere: rank 0 says so at once.
  expectConfigError(t, slurmEnv(0, { SLURMD_NODENAME: 'gpu08' }), 'HORA_RENDEZVOUS_ADDR', undefined, /gpu07, the first node of SLURM_STEP_NODELIST.*SLURMD_NODENAME=gpu08/);
  const bare = slurmEnv(1);
  for (const v of ['SLURM_STEP_NODELIST', 'SLURM_JOB_NODELIST']) delete bare[v];
  expectConfigError(t, bare, 'HORA_RENDEZVOUS_ADDR', undefined, /SLURM_STEP_NUM_NODES=2/);
});

t.test('Slurm: bad values name the variable and the value', async (t) => {
  expectConfigError(t, slurmEnv(1, { SLURM_STEP_NODELIST: 'gpu[07-08' }), 'SLURM_STEP_NODELIST', 'gpu[07-08');
  expectConfigError(t, slurmEnv(1, { SLURM_STEP_NODELIST: 'gpu[x]' }), 'SLURM_STEP_NODELIST', 'gpu[x]');
  expectConfigError(t, slurmEnv(1, { SLURM_STEP_TASKS_PER_NODE: '2(x' }), 'SLURM_STEP_TASKS_PER_NODE', '2(x');
  expectConfigError(t, slurmEnv(1, { SLURM_STEP_TASKS_PER_NODE: '0(x2)' }), 'SLURM_STEP_TASKS_PER_NODE', '0(x2)');
  expectConfigError(t, slurmEnv(1, { SLURM_LOCALID: '2' }), 'SLURM_LOCALID', '2', /local size 2/);
  expectConfigError(t, slurmEnv(3, { SLURM_NODEID: '2' }), 'SLURM_NODEID', '2', /cross size 2/);
  expectConfigError(t, slurmEnv(3, { SLURM_STEP_NUM_NODES: 'many' }), 'SLURM_STEP_NUM_NODES', 'many');
  expectConfigError(t, slurmEnv(3, { SLURM_NTASKS: '3' }), 'SLURM_PROCID', '3');
});

t.test('what Slurm 22.05.8 really set (test/slurm.test.js\'s cluster): task 2 of srun -N2 -n3, and the batch job of sbatch -N2 -n3', async (t) => {
  // Every SLURM_* variable of that task but the paths and ports of that run.
  const task2 = {
    SLURMD_NODENAME: 'hslurmc1', SLURM_CLUSTER_NAME: 'hslurmc', SLURM_CPUS_ON_NODE: '1', SLURM_GTIDS: '2', SLURM_JOBID: '1',
    SLURM_JOB_CPUS_PER_NODE: '2,1', SLURM_JOB_GID: '0', SLURM_JOB_ID: '1', SLURM_JOB_NAME: 'bash', SLURM_JOB_NODELIST: 'hslurmc[0-1]',
    SLURM_JOB_NUM_NODES: '2', SLURM_JOB_PARTITION: 'hora', SLURM_JOB_UID: '0', SLURM_JOB_USER: 'root', SLURM_LAUNCH_NODE_IPADDR: '10.77.42.1',
    SLURM_LOCALID: '0', SLURM_NNODES: '2', SLURM_NODEID: '1', SLURM_NODELIST: 'hslurmc[0-1]', SLURM_NPROCS: '3', SLURM_NTASKS: '3',
    SLURM_PRIO_PROCESS: '0', SLURM_PROCID: '2', SLURM_STEPID: '0', SLURM_STEP_ID: '0', SLURM_STEP_NODELIST: 'hslurmc[0-1]',
    SLURM_STEP_NUM_NODES: '2', SLURM_STEP_NUM_TASKS: '3', SLURM_STEP_TASKS_PER_NODE: '2,1', SLURM_SUBMIT_HOST: 'hslurmc0',
    SLURM_TASKS_PER_NODE: '2,1', SLURM_TOPOLOGY_ADDR: 'hslurmc1', SLURM_TOPOLOGY_ADDR_PATTERN: 'node', SLURM_UMASK: '0022',
  };
  t.match(resolveLaunch(task2), {
    source: 'slurm', rank: 2, size: 3, localRank: 0, localSize: 1, crossRank: 1, crossSize: 2, rendezvousAddr: 'hslurmc0',
    rendezvousPort: config.derivePort('SLURM_JOB_ID=1.0'), isRendezvousHost: false, secretDerived: true,
  });
  const { parseRunArgs } = require('../dist/ts/cli/run-args.js');
  const batch = { SLURM_JOB_ID: '2', SLURM_JOB_CPUS_PER_NODE: '2,1', SLURM_JOB_NODELIST: 'hslurmc[0-1]', SLURM_NTASKS: '3', SLURM_TASKS_PER_NODE: '2,1', SLURMD_NODENAME: 'hslurmc0' };
  t.same(parseRunArgs(['node', 'train.js'], batch).hosts, [{ host: 'hslurmc0', slots: 2, remote: false }, { host: 'hslurmc1', slots: 1, remote: true }]);
});

t.test('Slurm hostlists and task count lists, as srun and sbatch write them', async (t) => {
  const { slurmHostlist, slurmCounts } = config;
  const hosts = (v) => slurmHostlist({ L: v }, 'L');
  t.same(hosts('hslurmc[0-1]'), ['hslurmc0', 'hslurmc1'], 'what Slurm 22.05 set for two nodes');
  t.same(hosts('gpu[07-09,12],login1'), ['gpu07', 'gpu08', 'gpu09', 'gpu12', 'login1']);
  t.same(hosts('r[1-2]n[1-2]'), ['r1n1', 'r1n2', 'r2n1', 'r2n2']);
  t.same(hosts('n[8-10]-ib'), ['n8-ib', 'n9-ib', 'n10-ib']);
  t.same(hosts('node[001-002]'), ['node001', 'node002'], 'zero padding kept');
  t.equal(hosts(''), undefined);
  for (const bad of ['gpu[07-08', 'gpu[x]', 'y[3-1]', 'z]', 'a[]', `n[1-${100001}]`]) {
    t.throws(() => hosts(bad), new RegExp(`L=${JSON.stringify(bad).replace(/[[\]().*+?]/g, '\\$&')} is invalid: expected a Slurm hostlist`), bad);
  }
  const counts = (v) => slurmCounts({ C: v }, 'C');
  t.same(counts('2(x2)'), [2, 2], 'what Slurm 22.05 set for --ntasks-per-node=2 on two nodes');
  t.same(counts('2,1'), [2, 1], 'srun -N2 -n3');
  t.same(counts('2(x3),1'), [2, 2, 2, 1]);
  for (const bad of ['0', '2(x0)', '2(x', 'two', `1(x${100001})`]) t.throws(() => counts(bad), /C=.* is invalid: expected a Slurm task count list/, bad);
});

t.test('hora run inside an allocation takes its hosts from it; srun starts the remote workers', async (t) => {
  const { parseRunArgs } = require('../dist/ts/cli/run-args.js');
  const { srunArgs } = require('../dist/ts/cli/ssh.js');
  const batch = (extra = {}) => ({
    SLURM_JOB_ID: '7', SLURM_JOB_NODELIST: 'gpu[07-08]', SLURM_TASKS_PER_NODE: '2(x2)', SLURM_JOB_CPUS_PER_NODE: '4(x2)', SLURMD_NODENAME: 'gpu07', ...extra,
  });
  const hostsOf = (argv, env) => parseRunArgs([...argv, 'node', 'train.js'], env).hosts;
  t.same(hostsOf(['-np', '4'], batch()), [{ host: 'gpu07', slots: 2, remote: false }, { host: 'gpu08', slots: 2, remote: true }], 'the batch script runs on gpu07');
  t.equal(parseRunArgs(['node', 'train.js'], batch()).np, 4, 'without -np, one worker per task of the allocation');
  t.same(hostsOf([], batch({ SLURM_TASKS_PER_NODE: '' })), [{ host: 'gpu07', slots: 4, remote: false }, { host: 'gpu08', slots: 4, remote: true }], 'no task counts: the CPUs per node');
  t.same(hostsOf(['-H', 'a:1'], batch()), [{ host: 'a', slots: 1, remote: true }], '-H wins');
  t.same(hostsOf(['--standalone', '-np', '2'], batch()), [{ host: 'localhost', slots: 2, remote: false }], '--standalone: this machine only');
  t.same(hostsOf(['-np', '2'], batch({ SLURM_JOB_ID: '' })), [{ host: 'localhost', slots: 2, remote: false }], 'outside an allocation nothing changes');
  t.throws(() => parseRunArgs(['-np', '5', 'node', 'x'], batch()), /-np "5" is invalid: expected at most 4, the slots given by the Slurm allocation \(SLURM_JOB_NODELIST=gpu\[07-08\], SLURM_TASKS_PER_NODE=2\(x2\)\)/);
  t.throws(() => parseRunArgs(['node', 'x'], batch({ SLURM_TASKS_PER_NODE: '2(x3)' })), /SLURM_TASKS_PER_NODE "2\(x3\)" is invalid: expected one count per node of SLURM_JOB_NODELIST=gpu\[07-08\] \(2 nodes\)/);
  t.throws(() => parseRunArgs(['node', 'x'], batch({ SLURM_JOB_NODELIST: 'gpu[07-' })), /SLURM_JOB_NODELIST "gpu\[07-" is invalid: expected a Slurm hostlist/);
  const args = srunArgs('gpu08', '/work/dir', ['/usr/bin/node', '-e', 'wrapper', '--', 'node', 'train.js']);
  t.same(args.slice(0, 5), ['--overlap', '--nodes=1', '--ntasks=1', '--ntasks-per-node=1', '--nodelist=gpu08']);
  t.ok(args.includes('--chdir=/work/dir') && args.includes('--whole'), 'in the launcher\'s directory, with every CPU of the job on the node');
  t.same(args.slice(-6), ['/usr/bin/node', '-e', 'wrapper', '--', 'node', 'train.js'], 'the wrapper last, as srun\'s command');
});

t.test('Kubernetes Indexed Job: rank from JOB_COMPLETION_INDEX, size and address from the manifest', async (t) => {
  const jobs = [0, 1, 2, 3].map((i) => resolveLaunch(indexedJobEnv(i)));
  jobs.forEach((l, i) => {
    t.match(l, { source: 'kubernetes', rank: i, size: 4, rendezvousAddr: 'train-0.train', rendezvousPort: 29500, isRendezvousHost: i === 0, secretDerived: true });
    t.equal(l.secret, jobs[0].secret);
    t.equal(l.localSize, undefined, 'local and cross values come from the host ids');
  });
  t.equal(jobs[0].rendezvousBindAddr, '0.0.0.0', 'index 0 listens on every interface: its DNS record may not exist yet');
  const worldSize = resolveLaunch({ JOB_COMPLETION_INDEX: '1', WORLD_SIZE: '2', MASTER_ADDR: 'train-0.train', MASTER_PORT: '23456' });
  t.match(worldSize, { source: 'kubernetes', rank: 1, size: 2, rendezvousAddr: 'train-0.train', rendezvousPort: 23456 });
  t.match(resolveLaunch(indexedJobEnv(2, { HORA_SECRET: 'from-a-Secret', HORA_RENDEZVOUS_PORT: '4000' })), { secret: 'from-a-Secret', secretDerived: false, rendezvousPort: 4000 });
  t.match(resolveLaunch({ JOB_COMPLETION_INDEX: '0', HORA_SIZE: '1' }), { source: 'kubernetes', size: 1, rendezvousAddr: undefined });
  expectConfigError(t, { JOB_COMPLETION_INDEX: '1' }, 'HORA_SIZE', undefined, /completions/);
  expectConfigError(t, indexedJobEnv(1, { HORA_RENDEZVOUS_ADDR: '' }), 'HORA_RENDEZVOUS_ADDR', undefined, /headless service/);
  expectConfigError(t, indexedJobEnv(4), 'JOB_COMPLETION_INDEX', '4');
  expectConfigError(t, indexedJobEnv('x'), 'JOB_COMPLETION_INDEX', 'x');
  expectConfigError(t, indexedJobEnv(0, { HORA_SIZE: '4 pods' }), 'HORA_SIZE', '4 pods');
  t.match(resolveLaunch(indexedJobEnv(0, { HORA_RANK: '3', HORA_RENDEZVOUS_PORT: '4000', HORA_SECRET: 's' })), { source: 'hora', rank: 3 }, 'HORA_RANK still wins');
});

t.test('Kubeflow PyTorchJob: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT', async (t) => {
  const env = (rank) => ({ RANK: String(rank), WORLD_SIZE: '3', MASTER_ADDR: 'train-master-0', MASTER_PORT: '23456', PET_NNODES: '3' });
  const [m, w] = [resolveLaunch(env(0)), resolveLaunch(env(2))];
  t.match(m, { source: 'torchrun', rank: 0, size: 3, rendezvousAddr: 'train-master-0', rendezvousPort: 23456, isRendezvousHost: true, rendezvousBindAddr: '0.0.0.0' });
  t.match(w, { rank: 2, isRendezvousHost: false });
  t.equal(m.secret, w.secret);
  t.match(resolveLaunch({ ...env(0), MASTER_ADDR: 'localhost' }), { rendezvousAddr: '127.0.0.1', rendezvousBindAddr: '127.0.0.1' });
  expectConfigError(t, { ...env(0), GROUP_RANK: '1', GROUP_WORLD_SIZE: '1' }, 'GROUP_RANK', '1');
});

// ---------------------------------------------------------------------------------------------------
// Real processes: two workers on this machine joining through init() with only a cluster manager's
// variables, the way an Indexed Job's pods or a PyTorchJob's replicas would.

const WORKER = path.join(__dirname, 'workers', 'cluster-worker.js');

function cleanEnv() {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(HORA_|OMPI_|PMI_|PMIX_|SLURM_|MPI_)/.test(k) || ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'JOB_COMPLETION_INDEX', 'GROUP_RANK'].includes(k)) continue;
    env[k] = v;
  }
  return env;
}

// Starts one worker per entry of envs (through `wrap(i)`, a command prefix, when given) and resolves their
// exit status, stderr and report.
function runWorkers(envs, { wrap = () => [], timeoutMs = 30000 } = {}) {
  return Promise.all(envs.map((extra, i) => new Promise((resolve) => {
    const [command, ...args] = [...wrap(i), process.execPath, WORKER];
    const child = spawn(command, args, { env: { ...cleanEnv(), CLUSTER_WORKER_COUNT: '4099', ...extra }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const m = /^HORA_REPORT (.*)$/m.exec(stdout);
      resolve({ code, signal, stderr, report: m ? JSON.parse(m[1]) : null });
    });
  })));
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = require('node:net').createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

t.test('an Indexed Job\'s pods join with init(): rank 0 serves on every interface of a name', async (t) => {
  const name = os.hostname();
  const resolves = await dns.promises.lookup(name).then(() => true, () => false);
  if (!resolves) return t.skip(`this machine's hostname ${name} does not resolve`);
  const port = String(await freePort());
  const results = await runWorkers([0, 1].map((i) => ({ JOB_COMPLETION_INDEX: String(i), HORA_SIZE: '2', HORA_RENDEZVOUS_ADDR: name, HORA_RENDEZVOUS_PORT: port })));
  results.forEach((r, i) => {
    t.equal(r.code, 0, `index ${i} exited 0: ${r.stderr}`);
    t.match(r.report, { rank: i, size: 2, source: 'kubernetes', hostedRendezvous: i === 0, wrong: 0, max: 1, localSize: 2, crossSize: 1 });
  });
});

t.test('a launcher that counts hosts differently from the host ids gets a warning', async (t) => {
  const port = String(await freePort());
  const env = (rank) => ({ RANK: String(rank), WORLD_SIZE: '2', LOCAL_RANK: '0', LOCAL_WORLD_SIZE: '1', GROUP_RANK: String(rank), GROUP_WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: port });
  const results = await runWorkers([env(0), env(1)]);
  results.forEach((r, rank) => {
    t.equal(r.code, 0, r.stderr);
    t.match(r.report, { rank, localSize: 2, crossSize: 1, launcher: { localSize: 1, crossSize: 2 }, wrong: 0 }, 'hora goes by the host ids');
    t.match(r.stderr, /WARN: rank \d: the launcher \(torchrun\) puts 1 ranks on this host and 2 hosts in the job, but the host ids give 2 and 1/);
  });
  const agreeing = await runWorkers([0, 1].map((rank) => ({ ...env(rank), LOCAL_RANK: String(rank), LOCAL_WORLD_SIZE: '2', GROUP_RANK: '0', GROUP_WORLD_SIZE: '1' })));
  for (const r of agreeing) t.notMatch(r.stderr, /WARN/, 'no warning when they agree');
});

t.test('srun\'s variables across two simulated hosts: the tasks meet at the first node of the step', async (t) => {
  const { canRun, up } = require('./cluster/cluster.js');
  const cannot = canRun();
  if (cannot) {
    t.comment(`skipped: ${cannot}`);
    return t.skip(cannot);
  }
  const name = 'hslurm';
  const cluster = await up(2, { name, subnet: 44 }); // a subnet of its own: cluster tests run in parallel
  t.teardown(() => cluster.down());
  // Node names that are addresses, so that they resolve in every namespace: "10.77.44.[1-2]".
  const [h0, h1] = cluster.hosts;
  const nodelist = `${h0.slice(0, h0.lastIndexOf('.') + 1)}[${h0.split('.')[3]}-${h1.split('.')[3]}]`;
  const envs = [0, 1, 2, 3].map((rank) => slurmEnv(rank, {
    SLURM_JOB_ID: String(process.pid), SLURM_STEP_NODELIST: nodelist, SLURM_JOB_NODELIST: nodelist,
    SLURMD_NODENAME: cluster.hosts[Math.floor(rank / 2)],
  }));
  const results = await runWorkers(envs, {
    wrap: (i) => ['bash', path.join(__dirname, 'cluster', 'cluster.sh'), 'exec', '--name', name, String(Math.floor(i / 2))],
  });
  results.forEach((r, rank) => {
    t.equal(r.code, 0, `task ${rank} exited 0: ${r.stderr}`);
    t.match(r.report, {
      rank, size: 4, source: 'slurm', localRank: rank % 2, localSize: 2, crossRank: Math.floor(rank / 2), crossSize: 2,
      hostedRendezvous: rank === 0, wrong: 0, max: 3,
    }, `task ${rank}`);
    t.match(r.report && r.report.rendezvous, new RegExp(`^${h0.replace(/\./g, '\\.')}:\\d+$`));
    t.notMatch(r.stderr, /WARN/, 'Slurm and the host ids agree');
  });
});
