'use strict';
// Every collective x op x dtype x element count, at world sizes 1-5, over shared memory and TCP, checked
// element by element against a JS reference by test/workers/collectives-worker.js under `hora run`.
// Results of the exactly representable inputs must also be bit-identical whatever the transport, the
// fusion setting and the allreduce algorithm: the runs are compared through each rank's digest.
const t = require('tap');
const path = require('node:path');
const { runJob, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'collectives-worker.js');
const SIZES = [1, 2, 3, 4, 5];
const TRANSPORTS = [
  ['shm', {}],
  ['tcp', { HORA_TRANSPORT: 'tcp' }],
];

/** digests by rank, per configuration label */
const digests = new Map();

async function sweep(t, label, np, env) {
  const job = await runJob(np, WORKER, { env });
  t.comment(`${label}: ${job.seconds.toFixed(1)} s`);
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  for (let r = 0; r < np; r++) {
    const rep = job.reports[r];
    if (!t.ok(rep, `rank ${r} wrote a report`, { output: tail(job) })) continue;
    t.equal(rep.rank, r, 'report names its rank');
    t.equal(rep.size, np, `rank ${r} sees world size ${np}`);
    t.ok(rep.checks > 1000, `rank ${r} ran its checks (${rep.checks})`);
    t.equal(rep.failures, 0, `rank ${r} has no failures`, { firstFailures: rep.firstFailures });
  }
  digests.set(label, job.reports.map((rep) => (rep ? rep.digest : null)));
  return job;
}

for (const np of SIZES) {
  for (const [transport, env] of TRANSPORTS) {
    if (np === 1 && transport === 'tcp') continue; // a world of one never opens a transport
    t.test(`p=${np} ${transport}: every collective, op, dtype and count matches the reference`, (t) =>
      sweep(t, `p=${np} ${transport}`, np, env));
  }
  if (np > 1) {
    t.test(`p=${np}: shm and tcp give bit-identical results`, async (t) => {
      const shm = digests.get(`p=${np} shm`);
      const tcp = digests.get(`p=${np} tcp`);
      t.ok(shm && shm.every(Boolean), 'shm digests present');
      t.same(tcp, shm, 'per-rank digests equal');
    });
  }
}

t.test('p=3: fusion off (HORA_FUSION_MB=0) gives the same bits as fusion on', async (t) => {
  await sweep(t, 'p=3 fusion off', 3, { HORA_FUSION_MB: '0' });
  t.same(digests.get('p=3 fusion off'), digests.get('p=3 shm'), 'per-rank digests equal');
});

t.test('p=3: HORA_ALGO=ring and HORA_ALGO=recursive_doubling give the same bits', async (t) => {
  await sweep(t, 'p=3 ring', 3, { HORA_ALGO: 'ring' });
  await sweep(t, 'p=3 recursive_doubling', 3, { HORA_ALGO: 'recursive_doubling' });
  const ring = digests.get('p=3 ring');
  t.ok(ring.every(Boolean), 'ring digests present');
  t.same(digests.get('p=3 recursive_doubling'), ring, 'ring vs recursive doubling');
  t.same(ring, digests.get('p=3 shm'), 'forced ring vs auto');
});

t.test('p=4: HORA_ALGO=recursive_doubling over tcp gives the same bits as auto', async (t) => {
  await sweep(t, 'p=4 recursive_doubling tcp', 4, { HORA_ALGO: 'recursive_doubling', HORA_TRANSPORT: 'tcp' });
  t.same(digests.get('p=4 recursive_doubling tcp'), digests.get('p=4 shm'), 'per-rank digests equal');
});
