'use strict';
// `hora rendezvous`: an elastic job whose workers someone else starts, as the pods of a Kubernetes Job are.
// Here the test plays the Job controller: it starts each "pod" (a worker process with its own host id, so
// ranks talk over TCP as pods do) and restarts one that died.
const t = require('tap');
const { freePort, startProcess } = require('./support/hora-job');
const { HORA, WORKER, NODE, expectedChecksum, workersAlive } = require('./support/elastic-job');

const STEPS = 400;
const EXPECTED = expectedChecksum(STEPS);
const SECRET = 'a-test-secret-for-the-rendezvous-service';

/** Starts `node args...` with env added to this environment (support/spawn.js's handle). */
const start = (args, env, timeoutMs = 120000) => startProcess(NODE, args, { env: { ...process.env, ...env }, timeoutMs });

const result = (stdout) => {
  const m = /^result (.*)$/m.exec(stdout);
  return m ? JSON.parse(m[1]) : undefined;
};

let jobs = 0;
/** The rendezvous service and a pod starter for one job. */
async function job(serviceArgs) {
  const port = await freePort();
  const tag = `${process.pid}-rv${++jobs}`;
  const service = start([HORA, 'rendezvous', '--port', String(port), ...serviceArgs], { HORA_SECRET: SECRET, HORA_ELASTIC_SETTLE_S: '2' });
  // Wait until it listens, as a Service's readiness probe would.
  await service.waitFor(() => /listening on/.test(service.stderr), 20000);
  const pod = (ordinal, extra = {}) => start([WORKER], {
    HORA_ELASTIC: '1', HORA_RENDEZVOUS_ADDR: '127.0.0.1', HORA_RENDEZVOUS_PORT: String(port), HORA_SECRET: SECRET,
    HORA_HOST_ID: `pod-${ordinal}`, HORA_WORKER_ID: String(ordinal), HORA_ELASTIC_SETTLE_S: '2',
    ELASTIC_STEPS: String(STEPS), ELASTIC_STEP_MS: '20', ELASTIC_TAG: tag, ...extra,
  });
  return { service, pod, tag };
}

t.test('a pod killed mid-training: the others go on, and the pod restarted by its Job rejoins at the next commit', async (t) => {
  const { service, pod, tag } = await job(['--min-np', '2', '--max-np', '3', '-np', '3']);
  if (!t.match(service.stderr, /hora rendezvous: listening on 0\.0\.0\.0:\d+; the first world waits for 3 worker\(s\) \(--min-np 2\)/)) {
    return service.kill('SIGKILL');
  }
  const pods = [0, 1, 2].map((i) => pod(i, { ELASTIC_KILL: '1:23:SIGKILL' }));
  const killed = await pods[1].done;
  t.equal(killed.signal, 'SIGKILL', 'pod 1 died at step 23');
  // The Job controller starts the pod again (restartPolicy OnFailure): a new process, the same name.
  const restarted = pod(1);
  const ends = await Promise.all([pods[0].done, pods[2].done, restarted.done]);
  const svc = await service.done;
  ends.forEach((e, i) => t.equal(e.code, 0, `pod ${[0, 2, 1][i]} exits 0\n${e.stderr.slice(-1500)}`));
  const results = ends.map((e) => result(e.stdout));
  for (const [i, r] of results.entries()) {
    if (!t.ok(r, `pod ${[0, 2, 1][i]} reported a result`)) continue;
    t.equal(r.step, STEPS, 'every step trained');
    t.equal(r.checksum, EXPECTED, 'bit-identical to a run without failures');
    t.equal(r.size, 3, 'the world grew back to 3');
  }
  t.ok(results[2] && results[2].executed < STEPS, 'the restarted pod got the state by sync');
  t.equal(svc.code, 0, `the service exits 0\n${svc.stderr.slice(-1500)}`);
  t.match(svc.stderr, /world 1 formed with 2 rank\(s\)/, 'the world re-formed without the lost pod');
  t.match(svc.stderr, /world 2 formed with 3 rank\(s\)/, 'and again with the restarted pod');
  t.match(svc.stderr, /hora rendezvous: the job finished/);
  t.same(workersAlive(tag), [], 'no worker process is left');
});

t.test('the service is a single point of failure: when it dies, every pod exits', async (t) => {
  const { service, pod, tag } = await job(['--min-np', '2']);
  if (!t.match(service.stderr, /listening on/, 'the service is up')) return service.kill('SIGKILL');
  const pods = [0, 1].map((i) => pod(i, { ELASTIC_STEPS: '100000' }));
  await pods[0].waitFor(() => /step 20 /.test(pods[0].stdout), 30000);
  t.match(pods[0].stdout, /step 20 /, 'training started');
  service.kill('SIGKILL');
  const ends = await Promise.all(pods.map((p) => p.done));
  for (const e of ends) {
    t.equal(e.code, 1, 'the pod exits with status 1');
    t.match(e.stderr, /elastic worker: lost the connection to the hora launcher/);
  }
  t.same(workersAlive(tag), [], 'no worker process is left');
});

t.test('bad options and a worker without the service address are refused, naming what is missing', async (t) => {
  const cases = [
    [['rendezvous'], { HORA_SECRET: SECRET }, /--min-np: missing/],
    [['rendezvous', '--min-np', '2'], { HORA_SECRET: '' }, /HORA_SECRET "" is invalid: expected the job's secret/],
    [['rendezvous', '--min-np', '3', '--max-np', '2'], { HORA_SECRET: SECRET }, /--max-np "2" is invalid: expected at least --min-np \(3\)/],
    [['rendezvous', '--min-np', '2', '--port', '70000'], { HORA_SECRET: SECRET }, /--port "70000" is invalid: expected a TCP port/],
    [['rendezvous', '--min-np', '2', '--elastic-timeout', '0'], { HORA_SECRET: SECRET }, /--elastic-timeout "0" is invalid/],
  ];
  for (const [args, env, pattern] of cases) {
    const r = await start([HORA, ...args], env).done;
    t.equal(r.code, 2, args.join(' '));
    t.match(r.stderr, pattern);
  }
  const w = await start([WORKER], { HORA_ELASTIC: '1', HORA_SECRET: SECRET, HORA_RENDEZVOUS_ADDR: '', HORA_WORKER_ID: '0' }).done;
  t.equal(w.code, 1);
  t.match(w.stderr, /HORA_RENDEZVOUS_ADDR.*the address of the hora rendezvous service/);
});
