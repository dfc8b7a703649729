'use strict';
// Open MPI's mpirun (Debian's openmpi-bin) starting node workers that join with hora.init(): first on this
// machine, then across two simulated hosts (network namespaces with an sshd each, test/cluster/), the way
// docs/cluster.md tells users to run it. Every rank reports what it saw; the test checks the ranks, the
// topology hora derived from the host ids, and an allreduce.
const t = require('tap');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');

const WORKER = path.join(__dirname, 'workers', 'cluster-worker.js');
const CLUSTER_SH = path.join(__dirname, 'cluster', 'cluster.sh');
const NAME = 'hmpi'; // this test's cluster, apart from one a person may have left running
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

const mpirunMissing = spawnSync('mpirun', ['--version'], { encoding: 'utf8' }).status === 0 ? '' : 'no mpirun (apt-get install openmpi-bin)';

// The test's environment without any launcher's variables, so that only mpirun's reach the workers.
function cleanEnv() {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(HORA_|OMPI_|PMI_|PMIX_|SLURM_|MPI_)/.test(k) || ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'JOB_COMPLETION_INDEX'].includes(k)) continue;
    env[k] = v;
  }
  return env;
}

// Runs a command to completion (SIGTERM, then SIGKILL, after timeoutMs); resolves its status, output and
// the workers' reports indexed by rank.
function run(command, args, timeoutMs = 40000) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const term = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    const kill = setTimeout(() => child.kill('SIGKILL'), timeoutMs + 5000);
    child.on('close', (code, signal) => {
      clearTimeout(term);
      clearTimeout(kill);
      const reports = [];
      for (const m of stdout.matchAll(/^HORA_REPORT (.*)$/gm)) {
        const r = JSON.parse(m[1]);
        reports[r.rank] = r;
      }
      resolve({ code, signal, stdout, stderr, reports });
    });
  });
}

const rootFlag = isRoot ? ['--allow-run-as-root'] : [];

t.test('mpirun on one machine: three ranks on one host', { skip: mpirunMissing }, async (t) => {
  const r = await run('mpirun', [...rootFlag, '--oversubscribe', '-np', '3', process.execPath, WORKER]);
  t.equal(r.code, 0, `mpirun exited 0\n${r.stderr}`);
  t.equal(r.reports.filter(Boolean).length, 3, 'every rank reported');
  r.reports.forEach((rep, rank) => {
    t.match(rep, {
      rank, size: 3, localRank: rank, localSize: 3, crossRank: 0, crossSize: 1, source: 'ompi',
      hostedRendezvous: rank === 0, secretDerived: false, wrong: 0, max: 2,
    }, `rank ${rank}`);
    t.match(rep.rendezvous, /^127\.0\.0\.1:\d+$/, 'one host: the rendezvous is on loopback');
    t.equal(rep.rendezvous, r.reports[0].rendezvous, 'every rank derived the same port');
  });
});

t.test('mpirun across two hosts', async (t) => {
  if (mpirunMissing) return t.skip(mpirunMissing);
  const { canRun, up } = require('./cluster/cluster.js');
  const cannot = canRun();
  if (cannot) {
    t.comment(`skipped: ${cannot}`);
    return t.skip(cannot);
  }
  const cluster = await up(2, { name: NAME, subnet: 45 }); // a subnet of its own: cluster tests run in parallel
  t.teardown(() => cluster.down());
  const [h0, h1] = cluster.hosts;
  const mpirunArgs = (extra) => [
    ...rootFlag, '-np', '4', '-H', `${h0}:2,${h1}:2`,
    '--mca', 'plm_rsh_agent', `ssh -F ${cluster.sshConfig}`,
    '--mca', 'oob_tcp_if_include', cluster.subnet, // hora's workers never call MPI_Init: no btl options
    ...extra, process.execPath, WORKER,
  ];

  const check = (t, r) => {
    t.equal(r.code, 0, `mpirun exited 0\n${r.stderr}`);
    t.equal(r.reports.filter(Boolean).length, 4, 'every rank reported');
    r.reports.forEach((rep, rank) => {
      t.match(rep, {
        rank, size: 4, localRank: rank % 2, localSize: 2, crossRank: rank < 2 ? 0 : 1, crossSize: 2,
        source: 'ompi', launcher: { localRank: rank % 2, localSize: 2 }, hostedRendezvous: rank === 0,
        rendezvous: new RegExp(`^${h0.replace(/\./g, '\\.')}:\\d+$`), secretDerived: false, wrong: 0, max: 3,
      }, `rank ${rank}`);
    });
    const ids = r.reports.map((rep) => rep.hostId);
    t.equal(ids[0], ids[1], 'ranks 0 and 1 share a host id');
    t.equal(ids[2], ids[3], 'ranks 2 and 3 share a host id');
    t.not(ids[0], ids[2], 'the two hosts have different ids');
    t.match(ids[0], new RegExp(`/${h0.replace(/\./g, '\\.')}$`));
    t.match(ids[2], new RegExp(`/${h1.replace(/\./g, '\\.')}$`));
  };

  await t.test('mpirun on host 0, as docs/cluster.md runs it', async (t) => {
    check(t, await run('bash', [CLUSTER_SH, 'exec', '--name', NAME, '0', 'mpirun', ...mpirunArgs(['-x', `HORA_RENDEZVOUS_ADDR=${h0}`])]));
  });

  await t.test('mpirun on a machine that runs no rank', async (t) => {
    check(t, await run('mpirun', mpirunArgs(['-x', `HORA_RENDEZVOUS_ADDR=${h0}`])));
  });

  await t.test('without HORA_RENDEZVOUS_ADDR every rank stops at once, saying what to set', async (t) => {
    const started = Date.now();
    const r = await run('mpirun', mpirunArgs([]));
    t.not(r.code, 0);
    t.match(r.stderr, /HORA_RENDEZVOUS_ADDR=\(unset\) is invalid: expected the address of rank 0's host.*OMPI_COMM_WORLD_LOCAL_SIZE=2 < OMPI_COMM_WORLD_SIZE=4/);
    t.ok(Date.now() - started < 20000, 'an error, not a rendezvous timeout');
  });

  for (const i of [0, 1]) {
    const left = cluster.processes(i).filter((p) => !/sshd/.test(p.cmdline));
    t.same(left, [], `nothing but sshd is left on host ${i}`);
  }
});
