'use strict';
// A worker that cannot reach the rendezvous server: it warns within seconds, naming the address, the OS
// error and what chose the address, repeats that now and then, and gives up at HORA_CONNECT_TIMEOUT_S.
// Every connection goes to a loopback port where nothing listens (or a silent listener of this test).
const t = require('tap');
const net = require('node:net');
const path = require('node:path');

const dist = path.join(__dirname, '..', 'dist', 'ts');
const { register } = require(path.join(dist, 'control', 'client.js'));
const config = require(path.join(dist, 'config.js'));
const { HORA, NODE, ROOT, freePort, spawnAndCollect } = require('./support/hora-job');

// A loopback port where nothing listens: bound by the kernel, then closed.
const closedPort = freePort;

const esc = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

// Without launcher variables of the test's own environment leaking in.
function cleanEnv(extra) {
  const env = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (/^(HORA_|OMPI_|PMI_|SLURM_|PMIX_)/.test(name) || ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'].includes(name)) continue;
    env[name] = value;
  }
  return { ...env, ...extra };
}

// Runs hora.init() in a child with env; resolves its stderr lines with the milliseconds since init() was
// called (node's own start-up is not counted), and how init ended.
async function initIn(env, killAfterMs = 60000) {
  const script = `
    const t0 = Date.now();
    const lines = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = (chunk, ...rest) => {
      for (const line of String(chunk).split('\\n')) if (line) lines.push({ ms: Date.now() - t0, line });
      return write(chunk, ...rest);
    };
    require(${JSON.stringify(path.join(dist, 'index.js'))}).init().then(
      () => ({ ok: true }),
      (e) => ({ ok: false, code: e.code, message: e.message }),
    ).then((outcome) => {
      process.stdout.write(JSON.stringify({ ...outcome, ms: Date.now() - t0, lines }));
      process.exit(0);
    });`;
  const { code, signal, stdout, stderr } = await spawnAndCollect(NODE, ['-e', script], { env, timeoutMs: killAfterMs });
  try {
    return JSON.parse(stdout);
  } catch {
    return { ok: false, code: `no result (exit ${code ?? signal})`, message: stderr, lines: [], ms: NaN };
  }
}

t.test('hora run worker, nothing listening: WARN within 5 s, ERR_PEER_LOST at HORA_CONNECT_TIMEOUT_S', async (t) => {
  const port = await closedPort();
  const r = await initIn(cleanEnv({
    HORA_RANK: '1', HORA_SIZE: '2', HORA_JOB_ID: 'unreachable-test', HORA_SECRET: 's',
    HORA_RENDEZVOUS_ADDR: '127.0.0.1', HORA_RENDEZVOUS_PORT: String(port), HORA_RENDEZVOUS_ADDR_SOURCE: '--iface lo',
    HORA_CONNECT_TIMEOUT_S: '6',
  }));
  const warnings = r.lines.filter((l) => / WARN: /.test(l.line));
  t.ok(warnings.length >= 1, 'a warning was logged', { lines: r.lines });
  const first = warnings[0] ?? { ms: Infinity, line: '' };
  t.ok(first.ms <= 5000, `first warning ${first.ms} ms after init() began (the first attempt fails at once)`);
  t.match(first.line, /^hora init WARN: rank 1: cannot reach the rendezvous server/, 'through hora\'s logger');
  t.match(first.line, new RegExp(`127\\.0\\.0\\.1:${port}\\b`), 'names address and port');
  t.match(first.line, /ECONNREFUSED/, 'names the OS error');
  t.match(first.line, /hora run \(--iface lo\)/, 'names what chose the address');
  t.equal(warnings.length, 1, 'no warning per attempt (the next one is due 10 s later, after the deadline)');

  t.equal(r.ok, false, 'init failed');
  t.equal(r.code, 'ERR_PEER_LOST');
  t.ok(r.ms >= 5500 && r.ms < 20000, `gave up after ${r.ms} ms, at the 6 s deadline`);
  t.match(r.message, new RegExp(`127\\.0\\.0\\.1:${port}\\b`));
  t.match(r.message, /ECONNREFUSED/);
  t.match(r.message, /hora run \(--iface lo\)/);
  t.match(r.message, /HORA_CONNECT_TIMEOUT_S/);
  t.match(r.message, /--iface naming the launcher's interface/, 'says what to try');
  t.match(r.message, /firewall/);
});

t.test('torchrun-style worker: the warning and the error name MASTER_ADDR and what to set', async (t) => {
  const port = await closedPort();
  const r = await initIn(cleanEnv({
    RANK: '1', WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), HORA_CONNECT_TIMEOUT_S: '3',
  }));
  const warning = r.lines.find((l) => / WARN: /.test(l.line));
  t.ok(warning, 'a warning was logged', { lines: r.lines });
  t.match(warning?.line, /MASTER_ADDR, set in this worker's environment/);
  t.equal(r.code, 'ERR_PEER_LOST');
  t.match(r.message, /Set HORA_RENDEZVOUS_ADDR \(or MASTER_ADDR\) to an address of rank 0's host/);
  t.ok(r.ms < 15000, `gave up after ${r.ms} ms (deadline 3 s)`);
});

t.test('warnings repeat every 10 s while attempts fail, not on every attempt', async (t) => {
  const port = await closedPort();
  const logged = [];
  const started = Date.now();
  await t.rejects(register({
    addr: '127.0.0.1', port, secret: 's', rank: 2, hostId: 'h', dataAddr: '', dataPort: 0, timeoutMs: 60000,
    // The first warning comes about 2.7 s in, the second 10 s later: the deadline leaves that one 1.8 s of room
    // (13 s, once, left it 0.3 s, and the attempt that would have warned came after the deadline).
    connectTimeoutMs: 14500, addrSource: 'a test', log: (level, message) => logged.push({ level, message, ms: Date.now() - started }),
  }), { code: 'ERR_PEER_LOST', message: /gave up after 1\d(\.\d)? s and \d+ attempts/ });
  const warns = logged.filter((l) => l.level === 'WARN');
  const attempts = logged.filter((l) => l.level === 'TRACE').length + warns.length + 1;
  t.equal(warns.length, 2, `two warnings in 14.5 s (${attempts} attempts)`, { warns });
  t.ok(attempts > 5, 'attempts went on between them');
  if (warns.length === 2) t.ok(warns[1].ms - warns[0].ms >= 9500, `spaced ${warns[1].ms - warns[0].ms} ms apart`);
  t.match(warns[0]?.message, /the address comes from a test; still trying, giving up in/);
});

t.test('a listener that never sends the Challenge is given up at the connect deadline too', async (t) => {
  const silent = net.createServer(() => undefined);
  await new Promise((r) => silent.listen(0, '127.0.0.1', r));
  t.teardown(() => silent.close());
  const sockets = [];
  silent.on('connection', (s) => sockets.push(s));
  t.teardown(() => sockets.forEach((s) => s.destroy()));
  const started = Date.now();
  await t.rejects(register({
    addr: '127.0.0.1', port: silent.address().port, secret: 's', rank: 0, hostId: 'h', dataAddr: '', dataPort: 0, timeoutMs: 60000,
    connectTimeoutMs: 1500,
  }), { code: 'ERR_PEER_LOST', message: /no Challenge came: is a hora rendezvous server on that port\?/ });
  t.ok(Date.now() - started < 10000, 'well before the overall timeout');
});

t.test('without a connect deadline of its own the overall timeout still ends it, with ERR_TIMEOUT', async (t) => {
  const port = await closedPort();
  await t.rejects(register({
    addr: '127.0.0.1', port, secret: 's', rank: 1, hostId: 'h', dataAddr: '', dataPort: 0, timeoutMs: 800, addrSource: 'MASTER_ADDR',
  }), { code: 'ERR_TIMEOUT', message: /ECONNREFUSED.*the address comes from MASTER_ADDR/ });
});

t.test('HORA_CONNECT_TIMEOUT_S: parsed, defaulted by launcher, and a bad value is named', async (t) => {
  for (const bad of ['soon', '0', '-3', '1e999']) {
    t.throws(() => config.readSettings({ HORA_CONNECT_TIMEOUT_S: bad, HORA_HOST_ID: 'h' }),
      { code: 'ERR_INVALID_ARGUMENT', message: `HORA_CONNECT_TIMEOUT_S=${JSON.stringify(bad)} is invalid: expected a number > 0` }, bad);
  }
  t.equal(config.readSettings({ HORA_CONNECT_TIMEOUT_S: '2.5', HORA_HOST_ID: 'h' }).connectTimeoutS, 2.5);
  t.equal(config.readSettings({ HORA_HOST_ID: 'h' }).connectTimeoutS, undefined);

  const settings = (env) => config.readSettings({ HORA_HOST_ID: 'h', ...env });
  const horaRun = config.resolveLaunch({ HORA_RANK: '1', HORA_SIZE: '2', HORA_JOB_ID: 'j', HORA_SECRET: 's', HORA_RENDEZVOUS_ADDR: '10.0.0.1', HORA_RENDEZVOUS_PORT: '4000' });
  const torchrun = config.resolveLaunch({ RANK: '1', WORLD_SIZE: '2', MASTER_ADDR: 'node0', MASTER_PORT: '4000' });
  t.equal(config.connectTimeoutS(settings({}), horaRun, 300), 30, 'hora run: 30 s');
  t.equal(config.connectTimeoutS(settings({}), torchrun, 300), 300, 'rank 0 hosts the server: HORA_TIMEOUT_S');
  t.equal(config.connectTimeoutS(settings({ HORA_CONNECT_TIMEOUT_S: '7' }), torchrun, 300), 7, 'the variable wins');
  t.equal(config.connectTimeoutS(settings({ HORA_CONNECT_TIMEOUT_S: '700' }), horaRun, 300), 300, 'never past HORA_TIMEOUT_S');
  t.equal(config.connectTimeoutS(settings({}), horaRun, 10), 10);

  const hora = require(path.join(dist, 'index.js'));
  const saved = process.env.HORA_CONNECT_TIMEOUT_S;
  process.env.HORA_CONNECT_TIMEOUT_S = 'soon';
  t.teardown(() => {
    if (saved === undefined) delete process.env.HORA_CONNECT_TIMEOUT_S;
    else process.env.HORA_CONNECT_TIMEOUT_S = saved;
  });
  await t.rejects(hora.init(), { code: 'ERR_INVALID_ARGUMENT', message: /HORA_CONNECT_TIMEOUT_S="soon" is invalid/ }, 'init rejects it');
});

t.test('what chose the rendezvous address, under each launcher', async (t) => {
  const source = (env) => config.resolveLaunch(env).rendezvousAddrSource;
  const hora = { HORA_RANK: '1', HORA_SIZE: '2', HORA_SECRET: 's', HORA_RENDEZVOUS_PORT: '4000' };
  t.equal(source({ ...hora, HORA_JOB_ID: 'j', HORA_RENDEZVOUS_ADDR: '10.0.0.1', HORA_RENDEZVOUS_ADDR_SOURCE: "the launcher's route toward b" }),
    "hora run (the launcher's route toward b)");
  t.equal(source({ ...hora, HORA_JOB_ID: 'j', HORA_RENDEZVOUS_ADDR: '10.0.0.1' }), 'hora run (the address its rendezvous server listens on)');
  t.match(source({ ...hora, HORA_RENDEZVOUS_ADDR: '10.0.0.1' }), /^HORA_RENDEZVOUS_ADDR, set in this worker's environment by the user/);
  t.match(source({ OMPI_COMM_WORLD_RANK: '1', OMPI_COMM_WORLD_SIZE: '2', HORA_RENDEZVOUS_ADDR: 'n0', HORA_RENDEZVOUS_PORT: '4000' }), /^HORA_RENDEZVOUS_ADDR, set/);
  t.match(source({ RANK: '1', WORLD_SIZE: '2', MASTER_ADDR: 'n0', MASTER_PORT: '4000' }), /^MASTER_ADDR, set/);
  t.match(source({ SLURM_PROCID: '1', SLURM_NTASKS: '2', SLURM_NODEID: '1', SLURM_NNODES: '2', SLURM_STEP_NODELIST: 'gpu[07-08]', SLURM_JOB_ID: '5' }),
    /^the first node of SLURM_STEP_NODELIST/);
  t.match(source({ RANK: '1', WORLD_SIZE: '2', MASTER_PORT: '4000' }), /^the default for a job on one host/);
});

t.test('hora env documents HORA_CONNECT_TIMEOUT_S', async (t) => {
  const { stdout: out } = await spawnAndCollect(NODE, [HORA, 'env'], { cwd: ROOT, env: cleanEnv({}), stderr: 'inherit' });
  t.match(out, /HORA_CONNECT_TIMEOUT_S/);
  t.match(out, new RegExp(esc('Seconds a worker keeps trying to reach the rendezvous server')));
});
