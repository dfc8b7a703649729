'use strict';
// The config module is the one reader of HORA_* variables (ARCHITECTURE invariant 10): the TypeScript side
// reads them through it, the native code not at all (values reach it as addon arguments), and `hora env`
// lists every variable it reads. The module is ts/config.ts, the one the rest of hora
// imports, and the files it re-exports, one job each (CONFIG_FILES). Needs `npm run build:ts` (dist/).
const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const { spawnAndCollect } = require('./support/spawn');

const { ROOT, tsSources, nativeSources } = require('./support/sources');
const config = require(path.join(ROOT, 'dist', 'ts', 'config.js'));
// The files of the config module: the table of variables, the parsers, launch resolution, the readers.
const CONFIG_FILES = ['ts/config.ts', 'ts/config-variables.ts', 'ts/config-parse.ts', 'ts/config-launch.ts'];


t.test('the config module is ts/config.ts and the files it re-exports', async (t) => {
  const config = fs.readFileSync(path.join(ROOT, 'ts', 'config.ts'), 'utf8');
  for (const file of CONFIG_FILES.slice(1)) {
    t.ok(fs.existsSync(path.join(ROOT, file)), `${file} exists`);
    t.match(config, `from './${path.basename(file, '.ts')}'`, `ts/config.ts imports ${file}`);
  }
  const others = tsSources('ts').filter((f) => /^ts\/config[-.]/.test(f) && !CONFIG_FILES.includes(f));
  t.same(others, [], 'no config file outside CONFIG_FILES');
});

t.test('no HORA_* variable is read from process.env outside the config module', async (t) => {
  const files = [...tsSources('ts'), ...tsSources('adapters')].filter((f) => !CONFIG_FILES.includes(f));
  t.ok(files.length > 50, `${files.length} source files`);
  const reads = [];
  for (const file of files) {
    fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n').forEach((line, i) => {
      // process.env.HORA_X, process.env?.HORA_X, process.env['HORA_X'], and any process.env[name].
      if (/process\.env\s*(\?\.|\.)\s*HORA_\w+|process\.env\s*(\?\.)?\[/.test(line)) reads.push(`${file}:${i + 1}: ${line.trim()}`);
    });
  }
  t.same(reads, [], 'read them through a reader of the config module (ts/config.ts)');
});

t.test('native code reads no HORA_* variable: the config module passes the values down', async (t) => {
  const files = [...nativeSources('native/src'), ...nativeSources('native/binding')];
  t.ok(files.length > 50, `${files.length} native source files`);
  const reads = [];
  for (const file of files) {
    fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n').forEach((line, i) => {
      // getenv("HORA_X"), secure_getenv("HORA_X"), and getenv of a name that is not a literal (it could be one).
      for (const m of line.matchAll(/\b(?:secure_)?getenv\s*\(\s*(\S?)(HORA_)?/g)) {
        if (m[1] !== '"' || m[2] !== undefined) reads.push(`${file}:${i + 1}: ${line.trim()}`);
      }
    });
  }
  t.same(reads, [], 'read them in ts/config.ts and pass them as addon arguments (communicator options, setLogLevel)');
});

// A communicator made with no logLevel option logs "data plane listening" at INFO if the native level is INFO.
const ADDON = process.env.HORA_ADDON || path.join(ROOT, 'build', 'Release', 'hora.node');
const LISTEN = `
  const [via, file] = process.argv.slice(1);
  const addon = via === 'loader' ? require(${JSON.stringify(path.join(ROOT, 'dist', 'ts', 'loader.js'))}).loadNative() : require(file);
  const comm = new addon.Communicator({ rank: 0, size: 2, timeoutMs: 1000, fusionBytes: 0, algorithm: 0, transport: 0,
    bindHost: '127.0.0.1', secret: 's', grid: [] }, () => {});
  comm.listen();
  comm.close();`;

t.test('HORA_DEBUG reaches the addon from the loader, not from a getenv of its own', { skip: fs.existsSync(ADDON) ? false : `no addon at ${ADDON} (npx node-gyp rebuild)` }, async (t) => {
  const listening = /rank 0 hora INFO data plane listening on 127\.0\.0\.1:\d+/;
  const run = (via, env) => spawnAndCollect(process.execPath, ['-e', LISTEN, via, ADDON], { env: { PATH: process.env.PATH, HORA_ADDON: ADDON, ...env } });
  const loaded = await run('loader', { HORA_DEBUG: 'info' });
  t.equal(loaded.code, 0, 'loaded through ts/loader.ts, a communicator listens', { stderr: loaded.stderr });
  t.match(loaded.stderr, listening, 'HORA_DEBUG=info: the loader set the native level to INFO before any communicator');
  const quiet = await run('loader', {});
  t.notMatch(quiet.stderr, listening, 'unset: WARN');
  const direct = await run('require', { HORA_DEBUG: 'INFO' });
  t.equal(direct.code, 0, 'required directly, a communicator listens', { stderr: direct.stderr });
  t.notMatch(direct.stderr, listening, 'HORA_DEBUG=INFO without the loader: the native code did not read it');
});

t.test('hora env lists every variable the config module reads', async (t) => {
  const text = CONFIG_FILES.map((f) => fs.readFileSync(path.join(ROOT, f), 'utf8')).join('\n');
  const read = new Set();
  for (const m of text.matchAll(/['"`](HORA_[A-Z0-9_]*[A-Z0-9])['"`]|env\??\.(HORA_[A-Z0-9_]+)/g)) read.add(m[1] ?? m[2]);
  for (const name of ['HORA_TIMEOUT_S', 'HORA_ADDON', 'HORA_TFJS_SKIP_ALLREDUCE', 'HORA_HOST_ID', 'HORA_TIMELINE', 'HORA_TOPOLOGY']) {
    t.ok(read.has(name), `found ${name} in the config module`);
  }
  const main = path.join(ROOT, 'dist', 'ts', 'cli', 'main.js');
  const env = { PATH: process.env.PATH };
  const json = await spawnAndCollect(process.execPath, [main, 'env', '--json'], { env });
  const listed = JSON.parse(json.stdout).variables.map((v) => v.name);
  const plain = (await spawnAndCollect(process.execPath, [main, 'env'], { env })).stdout;
  for (const name of [...read].sort()) {
    t.ok(listed.includes(name), `hora env --json lists ${name}`);
    t.ok(plain.includes(`\n  ${name} = `), `hora env lists ${name}`);
  }
  t.same(listed.slice().sort(), config.HORA_VARIABLES.map((v) => v.name).sort(), 'hora env --json lists the table, each once');
});

t.test('the single-variable readers keep each variable\'s meaning and default', async (t) => {
  t.equal(config.readHostId({ HORA_HOST_ID: '  ns1 ' }), 'ns1');
  t.equal(config.readHostId({ HORA_HOST_ID: '  ' }), config.defaultHostId(), 'blank: the default');
  t.equal(config.readHostId({}), config.defaultHostId());
  t.equal(config.readTimeline({ HORA_TIMELINE: ' t.json ' }), 't.json', 'trimmed, not resolved');
  t.equal(config.readTimeline({ HORA_TIMELINE: ' ' }), undefined);
  t.equal(config.readTimeline({}), undefined);
  t.equal(config.readTopologyText({ HORA_TOPOLOGY: ' 4X2 ' }), ' 4X2 ', 'as written, for messages');
  t.equal(config.readTopologyText({}), undefined);
  t.equal(config.readAddonPath({ HORA_ADDON: 'a/hora.node' }), 'a/hora.node');
  t.equal(config.readAddonPath({ HORA_ADDON: '' }), undefined, 'empty: the default places');
  t.equal(config.readTfjsSkipAllreduce({ HORA_TFJS_SKIP_ALLREDUCE: '1' }), true);
  for (const v of ['0', 'true', ' 1', undefined]) t.equal(config.readTfjsSkipAllreduce({ HORA_TFJS_SKIP_ALLREDUCE: v }), false, `${v}: only 1 skips`);
  t.equal(config.readSettings({ HORA_HOST_ID: ' h ', HORA_TIMELINE: ' f ' }).hostId, 'h', 'readSettings uses the same reader');
  t.equal(config.readSettings({ HORA_HOST_ID: ' h ', HORA_TIMELINE: ' f ' }).timeline, 'f');
  // HORA_NCCL: only exactly 0 keeps NCCL unloaded, as the addon's own check of it did before it moved here.
  t.equal(config.readNccl({ HORA_NCCL: '0' }), false);
  for (const v of ['1', ' 0', 'false', '', undefined]) t.equal(config.readNccl({ HORA_NCCL: v }), true, `${JSON.stringify(v)}: NCCL may load`);
  t.equal(config.readSettings({ HORA_NCCL: '0' }).nccl, false, 'readSettings uses the same reader');
  t.equal(config.readSettings({}).nccl, true);
  // HORA_SHM_SINGLE_COPY: on unless 0 (or false); anything else is refused at init, naming it.
  for (const [v, want] of [[undefined, true], ['', true], ['1', true], ['0', false], [' false ', false]]) {
    t.equal(config.readSettings({ HORA_SHM_SINGLE_COPY: v }).shmSingleCopy, want, `HORA_SHM_SINGLE_COPY=${JSON.stringify(v)}`);
  }
  t.throws(() => config.readSettings({ HORA_SHM_SINGLE_COPY: 'off' }), /HORA_SHM_SINGLE_COPY/, 'HORA_SHM_SINGLE_COPY=off is refused');
  // HORA_DEBUG for the addon at load and for loggers: any case, WARN when unset or invalid (init rejects invalid).
  t.equal(config.readDebugLevel({ HORA_DEBUG: ' trace ' }), 'TRACE');
  t.equal(config.readDebugLevel({ HORA_DEBUG: 'info' }), 'INFO');
  t.equal(config.readDebugLevel({ HORA_DEBUG: 'LOUD' }), 'WARN');
  t.equal(config.readDebugLevel({}), 'WARN');
});
