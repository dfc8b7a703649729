// Elastic training with plain typed arrays, deterministic whatever the world size: every rank computes the
// same update from the step and the weights, and the ranks agree on it with an allreduce (max), so a run
// that lost workers must end bit-identical to one that did not (test/elastic.test.js checks it).
//
// ELASTIC_STEPS      steps to train (default 60); ELASTIC_COMMIT_EVERY (default 5); ELASTIC_STEP_MS pause per step (15)
// ELASTIC_KILL       "WORKER:STEP:SIGNAL[,...]": that worker sends itself SIGNAL when it reaches STEP
// ELASTIC_KILL_ON_LOSS  worker id that SIGKILLs itself 30 ms after its first lost collective (during the re-forming)
// ELASTIC_IDLE_REFILL   a worker started in a refilled slot (id >= this) never joins: it sleeps
// ELASTIC_NO_REFILL     a worker started in a refilled slot (id >= this) exits at once (the world stays smaller)
// ELASTIC_BUSY          each step computes for ELASTIC_STEP_MS without yielding to the event loop (as a tfjs
//                       step does) instead of sleeping
// Each completed step prints "step S size N t=MS"; the end prints "result {json}".
const hora = require('../../dist/ts/index.js');

const N = 1024;
const steps = Number(process.env.ELASTIC_STEPS || 60);
const commitEvery = Number(process.env.ELASTIC_COMMIT_EVERY || 5);
const stepMs = Number(process.env.ELASTIC_STEP_MS || 15);
const workerId = Number(process.env.HORA_WORKER_ID);
const kills = (process.env.ELASTIC_KILL || '').split(',').filter(Boolean).map((k) => k.split(':'))
  .filter(([w]) => Number(w) === workerId).map(([, s, sig]) => ({ step: Number(s), signal: sig }));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One training step: a function of the step and the weights only. */
function update(w, step) {
  const g = new Float64Array(w.length);
  for (let i = 0; i < w.length; i++) g[i] = (w[i] * 31 + step + i) % 1000003;
  return g;
}

(async () => {
  const idleFrom = process.env.ELASTIC_IDLE_REFILL;
  if (idleFrom !== undefined && workerId >= Number(idleFrom)) {
    await sleep(120000);
    return;
  }
  const noRefill = process.env.ELASTIC_NO_REFILL;
  if (noRefill !== undefined && workerId >= Number(noRefill)) return;
  await hora.init();
  const state = new hora.elastic.State({ step: 0, w: new Float64Array(N) });
  let executed = 0;
  let resets = 0;
  let killedOnLoss = false;
  state.onReset(() => {
    resets++;
  });
  const result = await hora.elastic.run(state, async (s) => {
    while (s.step < steps) {
      const mine = kills.find((k) => k.step === s.step);
      if (mine) {
        console.log(`signal ${mine.signal} t=${Date.now()}`);
        process.kill(process.pid, mine.signal);
        if (mine.signal === 'SIGSTOP') kills.splice(kills.indexOf(mine), 1);
      }
      let g;
      try {
        g = await hora.allreduce(update(s.w, s.step), { op: 'max', name: 'step' });
      } catch (e) {
        if (String(workerId) === process.env.ELASTIC_KILL_ON_LOSS && !killedOnLoss) {
          killedOnLoss = true;
          setTimeout(() => process.kill(process.pid, 'SIGKILL'), 30);
        }
        throw e;
      }
      s.w.set(g);
      s.step++;
      executed++;
      console.log(`step ${s.step} size ${hora.size()} t=${Date.now()}`);
      if (process.env.ELASTIC_BUSY) {
        for (const until = Date.now() + stepMs; Date.now() < until;);
      } else {
        await sleep(stepMs);
      }
      if (s.step % commitEvery === 0) await s.commit();
    }
    return { step: s.step, executed, resets, rank: hora.rank(), size: hora.size(), checksum: checksum(s.w) };
  });
  console.log(`result ${JSON.stringify({ workerId, ...result })}`);
  await hora.shutdown();
})().catch((e) => {
  console.error(`worker ${workerId} failed: ${e.code || ''} ${e.stack}`);
  process.exit(1);
});

function checksum(w) {
  const b = Buffer.from(w.buffer, w.byteOffset, w.byteLength);
  return require('node:crypto').createHash('sha256').update(b).digest('hex');
}
