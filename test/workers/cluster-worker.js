'use strict';
// One rank of a job started by a launcher other than `hora run` (mpirun, or a test that sets a cluster
// manager's variables): joins with hora.init(), checks a large and a small allreduce, and prints one
// line "HORA_REPORT {json}" with what the launcher said and what hora made of it.
//
// Env: CLUSTER_WORKER_COUNT  elements of the large allreduce (default 100003: several ring chunks)
const hora = require('../../dist/ts/index.js');
const { readSettings, resolveLaunch } = require('../../dist/ts/config.js');

async function main() {
  await hora.init({ timeoutSeconds: 30 });
  const launch = resolveLaunch(); // what init() read, for the report
  const rank = hora.rank();
  const size = hora.size();
  const count = Number(process.env.CLUSTER_WORKER_COUNT || 100003);
  // Small integers: every partial sum is exact in float32, so any wrong or missing block shows.
  const x = new Float32Array(count);
  for (let i = 0; i < count; i++) x[i] = (rank + 1) * ((i % 7) + 1);
  const sum = await hora.allreduce(x, { op: 'sum' });
  const ranksTotal = (size * (size + 1)) / 2;
  let wrong = 0;
  for (let i = 0; i < count; i++) if (sum[i] !== ranksTotal * ((i % 7) + 1)) wrong++;
  const max = await hora.allreduce(new Float64Array([rank]), { op: 'max' });
  const report = {
    rank, size, localRank: hora.localRank(), localSize: hora.localSize(), crossRank: hora.crossRank(), crossSize: hora.crossSize(),
    hostId: readSettings().hostId, source: launch.source,
    launcher: { rank: launch.rank, localRank: launch.localRank, localSize: launch.localSize, crossRank: launch.crossRank, crossSize: launch.crossSize },
    rendezvous: `${launch.rendezvousAddr}:${launch.rendezvousPort}`, hostedRendezvous: launch.isRendezvousHost, secretDerived: launch.secretDerived,
    count, wrong, max: max[0],
    // Where Slurm started it, if it did: its job, and its step and the step's nodes when srun did.
    slurm: { job: process.env.SLURM_JOB_ID, step: process.env.SLURM_STEP_ID, stepNodes: process.env.SLURM_STEP_NODELIST },
  };
  await hora.shutdown();
  process.stdout.write(`HORA_REPORT ${JSON.stringify(report)}\n`);
}

main().catch((e) => {
  process.stderr.write(`cluster-worker (pid ${process.pid}) failed: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
