// init(): option validation, and a world of one when no launcher variables are set.
const t = require('tap');

for (const name of Object.keys(process.env)) {
  if (/^(HORA_|OMPI_|PMI_|SLURM_)/.test(name) || ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'].includes(name)) {
    delete process.env[name];
  }
}
const hora = require('../dist/ts/index.js');

t.test('bad init options are rejected, naming the option and the value', async (t) => {
  const cases = [
    [{ timeoutSeconds: -1 }, /option 'timeoutSeconds' must be a positive number of seconds; received number -1/],
    [{ timeoutSeconds: '5' }, /option 'timeoutSeconds'.*received the string "5"/],
    [{ fusionMB: -2 }, /option 'fusionMB' must be a number of MiB >= 0; received number -2/],
    [{ algorithm: 'tree' }, /option 'algorithm' must be one of auto, ring, recursive_doubling, hierarchical, multidim; received the string "tree"/],
    [{ transport: 'rdma' }, /option 'transport' must be 'auto', 'tcp' or 'shm'; received the string "rdma"/],
    ['fast', /argument 'options' must be an object; received the string "fast"/],
  ];
  for (const [options, message] of cases) {
    await t.rejects(hora.init(options), { name: 'HoraError', code: 'ERR_INVALID_ARGUMENT', message }, JSON.stringify(options));
  }
  t.equal(hora.isInitialized(), false, 'a rejected init leaves hora uninitialized');
});

t.test('a bad HORA_* variable is named in the error', async (t) => {
  process.env.HORA_TIMEOUT_S = 'soon';
  await t.rejects(hora.init(), { code: 'ERR_INVALID_ARGUMENT', message: /HORA_TIMEOUT_S/ });
  delete process.env.HORA_TIMEOUT_S;
});

t.test('with no launcher variables init() makes a world of one', async (t) => {
  await hora.init({ timeoutSeconds: 10 });
  t.equal(hora.size(), 1);
  t.equal(hora.rank(), 0);
  t.same([hora.localRank(), hora.localSize(), hora.crossRank(), hora.crossSize()], [0, 1, 0, 1]);
  const x = new Float32Array([1, 2, 3]);
  const y = await hora.allreduce(x);
  t.not(y, x, 'a new array by default');
  t.same(Array.from(y), [1, 2, 3]);
  await hora.init();
  t.equal(hora.size(), 1, 'a second init() is harmless');
  await hora.shutdown();
  t.equal(hora.isInitialized(), false);
});

t.test('torchrun-style, rank 1 never started: rank 0 says while it waits who is missing, and when it gives up', async (t) => {
  const { runProcess, freePort, cleanEnv } = require('./support/hora-job');
  const port = await freePort();
  const script = `require(${JSON.stringify(require.resolve('../dist/ts/index.js'))}).init()` +
    '.catch((e) => { console.error(`${e.code}: ${e.message}`); process.exit(3); });';
  const env = cleanEnv({ RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), HORA_TIMEOUT_S: '3', HORA_STALL_WARN_S: '0.5' });
  const r = await runProcess(['-e', script], env, 20000);
  t.equal(r.code, 3, 'init fails', { stderr: r.stderr });
  const warnings = r.stderr.split('\n').filter((l) => /hora rendezvous WARN: still waiting/.test(l));
  t.ok(warnings.length >= 3, `warned every 0.5 s while waiting (${warnings.length} warnings in 3 s)`, { stderr: r.stderr });
  t.match(warnings[0], /1 of 2 ranks registered \(rank 0 from \S+, pid \d+\); missing: rank 1\. Giving up in \d s \(HORA_TIMEOUT_S\)/);
  t.match(warnings[0], new RegExp(`reach 127\\.0\\.0\\.1:${port}\\?`), 'names the address rank 1 must reach');
  t.match(r.stderr, /ERR_TIMEOUT: hora\.init on rank 0: .*This rank's rendezvous server: 1 of 2 ranks registered .*missing: rank 1/, 'the error names the missing rank');
});
