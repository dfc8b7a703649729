'use strict';
// The hierarchical and multi-dimensional allreduce, and the cost model that chooses among the algorithms,
// on several "hosts" (--simulate-hosts: each -H entry gets its own host id, so ranks on different entries
// talk TCP and ranks on one entry shared memory, exactly as on separate machines). Every algorithm must
// match the reference element by element (test/workers/collectives-worker.js), be bit-identical across
// ranks, and give the same bits as the flat ring for exactly representable inputs.
const t = require('tap');
const path = require('node:path');
const { runJob, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'collectives-worker.js');
// Odd counts (blocks of unequal size at every level of the grid), and one large enough for every segment.
const COUNTS = '0,1,5,53,70001';

async function sweep(t, hosts, env) {
  const np = hosts.reduce((a, b) => a + b, 0);
  const spec = hosts.map((n) => `localhost:${n}`).join(',');
  const job = await runJob(np, WORKER, {
    env: { COLLECTIVES_COUNTS: COUNTS, ...env },
    launcherArgs: ['--simulate-hosts', '-H', spec],
  });
  t.equal(job.code, 0, "hora run exits 0", { output: tail(job, 1500) });
  for (let r = 0; r < np; r++) {
    const rep = job.reports[r];
    if (!t.ok(rep, `rank ${r} reported`)) continue;
    t.ok(rep.checks > 500, `rank ${r} ran its checks (${rep.checks})`);
    t.equal(rep.failures, 0, `rank ${r}: every result matches the reference`, { firstFailures: rep.firstFailures });
  }
  return job.reports.map((rep) => (rep ? rep.digest : null));
}

const LAYOUTS = [
  { name: '2 hosts x 2 ranks', hosts: [2, 2], grid: '2x2' },
  { name: '3 hosts x 1 rank', hosts: [1, 1, 1], grid: '1x3' },
  { name: '2 hosts x 3 ranks', hosts: [3, 3], grid: '3x2' },
];

for (const layout of LAYOUTS) {
  t.test(`${layout.name}: every algorithm matches the reference and the flat ring's bits`, async (t) => {
    const ring = await sweep(t, layout.hosts, { HORA_ALGO: 'ring' });
    t.ok(ring.every(Boolean), 'flat ring ran');
    for (const [label, env] of [
      ['hierarchical', { HORA_ALGO: 'hierarchical' }],
      [`multidim ${layout.grid}`, { HORA_ALGO: 'multidim', HORA_TOPOLOGY: layout.grid }],
      ['recursive_doubling', { HORA_ALGO: 'recursive_doubling' }],
      ['auto (cost model)', {}],
    ]) {
      const digests = await sweep(t, layout.hosts, env);
      t.same(digests, ring, `${label}: per-rank digests equal to the flat ring's`);
    }
  });
}

t.test('4 ranks on one host as a 2x2 grid (HORA_TOPOLOGY without hosts)', async (t) => {
  const grid = await sweep(t, [4], { HORA_ALGO: 'multidim', HORA_TOPOLOGY: '2x2' });
  const ring = await sweep(t, [4], { HORA_ALGO: 'ring' });
  t.same(grid, ring, 'same bits as the flat ring');
});

t.test('hosts of unequal size: auto still works, a forced hierarchical allreduce fails cleanly on every rank', async (t) => {
  await sweep(t, [2, 1, 2], {});
  const job = await runJob(5, path.join(__dirname, 'workers', 'hierarchical-worker.js'), {
    env: { HORA_ALGO: 'hierarchical' },
    launcherArgs: ['--simulate-hosts', '-H', 'localhost:2,localhost:1,localhost:2'],
  });
  t.equal(job.code, 0, "hora run exits 0", { output: tail(job, 1500) });
  for (let r = 0; r < 5; r++) {
    const rep = job.reports[r];
    if (!t.ok(rep, `rank ${r} reported`)) continue;
    t.equal(rep.code, 'ERR_INVALID_ARGUMENT', `rank ${r}: ERR_INVALID_ARGUMENT`);
    t.match(rep.message, /same number of ranks on every host; the hosts have 2, 1, 2/, `rank ${r}: says why`);
    t.equal(rep.after, 15, `rank ${r}: the communicator still works afterwards (an allgather of 1..5)`);
  }
});

t.test('HORA_TOPOLOGY whose product is not the world size: init fails naming it', async (t) => {
  const job = await runJob(2, path.join(__dirname, 'workers', 'hierarchical-worker.js'), {
    env: { HORA_TOPOLOGY: '2x2' },
  });
  t.not(job.code, 0, 'hora run fails');
  t.match(job.stderr + job.stdout, /HORA_TOPOLOGY="2x2" has 4 positions but the job has 2 ranks/, 'the error names the variable, its value and the world size');
});

t.test('HORA_COST_* overrides are validated and logged with the choice', async (t) => {
  const job = await runJob(4, path.join(__dirname, 'workers', 'hierarchical-worker.js'), {
    env: { HORA_DEBUG: 'INFO', HORA_COST_LOCAL: '1:10', HORA_COST_CROSS: '50:0.125', HORA_ALGO: 'auto', HIERARCHICAL_BYTES: String(64 << 20) },
    launcherArgs: ['--simulate-hosts', '-H', 'localhost:2,localhost:2'],
  });
  t.equal(job.code, 0, "hora run exits 0", { output: tail(job, 1500) });
  const out = job.stdout + job.stderr;
  t.match(out, /links: same host alpha 1\.0 us, 10\.000 GB\/s \(HORA_COST_LOCAL\); across hosts alpha 50\.0 us, 0\.125 GB\/s \(HORA_COST_CROSS\)/, 'rank 0 logs the link costs it uses');
  t.match(out, /allreduce of 67108864 bytes: hierarchical, the least predicted time \(ring [\d.]+ ms, recursive_doubling [\d.]+ s, hierarchical [\d.]+ ms\)/, 'the 64 MiB allreduce goes hierarchical, and the log says why');
  for (const rep of job.reports) t.equal(rep && rep.code, null, 'no error');

  const bad = await runJob(2, path.join(__dirname, 'workers', 'hierarchical-worker.js'), { env: { HORA_COST_CROSS: 'fast' } });
  t.not(bad.code, 0, 'a malformed HORA_COST_CROSS fails init');
  t.match(bad.stderr + bad.stdout, /HORA_COST_CROSS="fast" is invalid: expected ALPHA_US:GBPS/, 'naming the variable and the value');
});
