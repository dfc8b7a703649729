'use strict';
// hora linked into an application that has its own copy of the frameworks (issue 38 item 1): the adapters
// must work with the application's copy, the one its models come from, whatever the install layout.
//
// Two layouts, made by hand in a scratch folder (no registry):
//   linked     app/node_modules/hora -> this checkout (npm link, npm install ../hora): hora's own
//              node_modules hold TensorFlow.js too, so the process can reach two copies.
//   workspace  an npm workspaces root: packages/app and packages/hora, the application's packages hoisted
//              to the root's node_modules, node_modules/hora -> packages/hora, and packages/hora with its
//              own node_modules/@tensorflow/* beside them.
// The application's frameworks are hard-linked copies of this checkout's: other paths, so Node loads them as
// other packages, without copying their bytes. The README's fit.mjs and the pipeline example run there on
// 2 ranks; a preload (NODE_OPTIONS) reports which copies of tfjs each rank loaded. docs/brain.md's xor.mjs
// and hora/onnxruntime's loader must take the application's brain.js and onnxruntime-web the same way, and
// hora/tfjs's types must still check against the application's tfjs.
// Needs `npm run build:ts` (dist/) and the native addon (build/Release).
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { runJob, runProcess, tail, cleanEnv, ROOT, HORA, NODE } = require('./support/hora-job');

const MODULES = path.join(ROOT, 'node_modules');
const TFJS = ['tfjs', 'tfjs-core', 'tfjs-layers', 'tfjs-backend-cpu', 'tfjs-backend-webgl', 'tfjs-converter', 'tfjs-data'].map((p) => `@tensorflow/${p}`);
const FRAMEWORKS = [...TFJS, 'brain.js', 'onnxruntime-web'];

const missing = ['dist/adapters/tfjs/index.js', 'build/Release/hora.node'].filter((f) => !fs.existsSync(path.join(ROOT, f)));
const lacking = FRAMEWORKS.filter((p) => !fs.existsSync(path.join(MODULES, p, 'package.json')));
const skip = missing.length ? `${missing.join(', ')} missing: run npm run build:ts and npx node-gyp rebuild`
  : lacking.length ? `${lacking.join(', ')} not installed in this checkout` : false;

/** A copy of a folder made of hard links (a copy of each file where the file system refuses a link). */
function linkTree(from, to) {
  fs.mkdirSync(to, { recursive: true });
  for (const entry of fs.readdirSync(from, { withFileTypes: true })) {
    const src = path.join(from, entry.name);
    const dst = path.join(to, entry.name);
    const real = fs.statSync(src);
    if (real.isDirectory()) {
      linkTree(src, dst);
    } else {
      try {
        fs.linkSync(fs.realpathSync(src), dst);
      } catch {
        fs.copyFileSync(src, dst);
      }
    }
  }
}

/**
 * node_modules for an application: every package of this checkout as a link to it, except `own`, which get
 * copies of their own (hard links) and `skipNames`.
 */
function fillModules(dir, own, skipNames = []) {
  fs.mkdirSync(dir, { recursive: true });
  for (const name of fs.readdirSync(MODULES)) {
    if (name.startsWith('.') || skipNames.includes(name)) continue;
    const from = path.join(MODULES, name);
    if (name.startsWith('@')) {
      fs.mkdirSync(path.join(dir, name), { recursive: true });
      for (const sub of fs.readdirSync(from)) {
        const full = `${name}/${sub}`;
        if (own.includes(full)) linkTree(path.join(from, sub), path.join(dir, name, sub));
        else fs.symlinkSync(path.join(from, sub), path.join(dir, name, sub));
      }
    } else if (own.includes(name)) {
      linkTree(from, path.join(dir, name));
    } else {
      fs.symlinkSync(from, path.join(dir, name));
    }
  }
}

/** The ```js block of a doc whose first line is `// run: ... node NAME`. */
function docProgram(doc, name) {
  const text = fs.readFileSync(path.join(ROOT, doc), 'utf8');
  const re = /```js\n(\/\/ run: [^\n]*node ([\w.-]+)\n[\s\S]*?)```/g;
  for (let m; (m = re.exec(text));) if (m[2] === name) return m[1];
  throw new Error(`${doc} has no runnable block for ${name}`);
}

/** The application's files: the README's fit.mjs, the pipeline example (with its siblings), brain's xor.mjs. */
function writeApp(dir) {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
  fs.writeFileSync(path.join(dir, 'fit.mjs'), docProgram('README.md', 'fit.mjs'));
  fs.writeFileSync(path.join(dir, 'xor.mjs'), docProgram('docs/brain.md', 'xor.mjs'));
  for (const f of fs.readdirSync(path.join(ROOT, 'examples'))) {
    if (f.endsWith('.js')) fs.copyFileSync(path.join(ROOT, 'examples', f), path.join(dir, f));
  }
  // hora/tfjs imported before @tensorflow/tfjs: found by resolving from the application, not from what is loaded.
  const fit = fs.readFileSync(path.join(dir, 'fit.mjs'), 'utf8');
  const horaFirst = fit.split('\n').filter((l) => l.includes("from 'hora/tfjs'"));
  fs.writeFileSync(path.join(dir, 'fit-hora-first.mjs'), [...horaFirst, ...fit.split('\n').filter((l) => !horaFirst.includes(l))].join('\n'));
}

/** Reports, at exit, which copies of the frameworks this rank loaded (NODE_OPTIONS=--require this file). */
function writePreload(dir) {
  const file = path.join(dir, 'report-frameworks.js');
  fs.writeFileSync(file, `'use strict';
process.on('exit', () => {
  const out = process.env.HORA_TEST_RESULT_DIR, rank = process.env.HORA_RANK;
  if (!out || rank === undefined) return; // the launcher itself
  const files = Object.keys(require.cache);
  const of = (name) => files.filter((f) => f.includes('/node_modules/' + name + '/')).map((f) => f.slice(0, f.indexOf('/node_modules/' + name + '/')));
  const report = { tfjsCore: of('@tensorflow/tfjs-core'), tfjsLayers: of('@tensorflow/tfjs-layers'), brain: [...new Set(of('brain.js'))] };
  require('fs').writeFileSync(require('path').join(out, 'rank-' + rank + '.json'), JSON.stringify(report));
});
`);
  return file;
}

/** The linked layout; returns {appDir, appModules (where its frameworks are), cwd}. */
function linkedLayout(root) {
  const appDir = path.join(root, 'app');
  writeApp(appDir);
  fillModules(path.join(appDir, 'node_modules'), FRAMEWORKS, ['hora']);
  fs.symlinkSync(ROOT, path.join(appDir, 'node_modules', 'hora'));
  return { appDir, appModules: path.join(appDir, 'node_modules'), cwd: appDir };
}

/** The workspace layout, started from the workspace root (as `npm run -w app ...` does not, a script may). */
function workspaceLayout(root) {
  fs.writeFileSync(path.join(root, 'package.json'), JSON.stringify({ name: 'ws', private: true, workspaces: ['packages/*'] }));
  const appDir = path.join(root, 'packages', 'app');
  writeApp(appDir);
  const horaDir = path.join(root, 'packages', 'hora');
  fs.mkdirSync(horaDir, { recursive: true });
  fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(horaDir, 'package.json'));
  for (const d of ['dist', 'proto', 'build/Release']) {
    if (fs.existsSync(path.join(ROOT, d))) linkTree(path.join(ROOT, d), path.join(horaDir, d));
  }
  // hora's own dependencies, TensorFlow.js among them, where npm leaves a workspace's unhoisted packages.
  fillModules(path.join(horaDir, 'node_modules'), [], ['hora']);
  const hoisted = path.join(root, 'node_modules');
  fillModules(hoisted, FRAMEWORKS, ['hora']);
  fs.symlinkSync(path.join('..', 'packages', 'hora'), path.join(hoisted, 'hora'));
  fs.symlinkSync(path.join('..', 'packages', 'app'), path.join(hoisted, 'app'));
  return { appDir, appModules: hoisted, cwd: root };
}

/** The folder whose node_modules `dir` is, symlinks resolved: what a loaded file's path starts with. */
const owner = (dir) => path.dirname(fs.realpathSync(dir));

t.test('hora installed beside its own copy of the frameworks', { skip }, async (t) => {
  for (const [name, make] of [['linked', linkedLayout], ['workspace', workspaceLayout]]) {
    t.test(name, async (t) => {
      const root = fs.mkdtempSync(path.join(os.tmpdir(), `hora-${name}-`));
      t.teardown(() => fs.rmSync(root, { recursive: true, force: true }));
      const { appDir, appModules, cwd } = make(root);
      const appCopy = owner(appModules);
      const horaCopy = fs.realpathSync(require.resolve('@tensorflow/tfjs-core', { paths: [fs.realpathSync(path.join(appModules, 'hora'))] }));
      t.notOk(horaCopy.startsWith(appCopy + path.sep), `the layout gives hora a tfjs of its own (${horaCopy})`);
      const preload = writePreload(root);
      const env = { NODE_OPTIONS: `--require ${preload}` };
      const rel = (f) => path.relative(cwd, path.join(appDir, f));

      /** Each rank loaded tfjs-core and tfjs-layers once, from the application's node_modules. */
      const onlyTheApplications = (job, what) => {
        for (const [rank, r] of job.reports.entries()) {
          t.ok(r, `${what}: rank ${rank} reported what it loaded`, { output: tail(job) });
          if (!r) continue;
          t.same([...new Set(r.tfjsCore)], [appCopy], `${what}: rank ${rank} loaded tfjs-core from the application only`);
          t.same([...new Set(r.tfjsLayers)], [appCopy], `${what}: rank ${rank} loaded tfjs-layers from the application only`);
        }
        t.notMatch(job.stdout + job.stderr, /Platform node has already been set/, `${what}: no second tfjs registered its platform`);
      };

      for (const script of ['fit.mjs', 'fit-hora-first.mjs']) {
        const fit = await runJob(2, rel(script), { cwd, env, timeoutMs: 180000 });
        t.equal(fit.code, 0, `${script} runs on 2 ranks`, { output: tail(fit) });
        t.match(fit.stdout, /loss per epoch, mean over ranks: [\d. ]+/);
        onlyTheApplications(fit, script);
      }

      const pipe = await runJob(2, rel('tfjs-pipeline.js'), { cwd, env, args: ['--epochs', '1', '--train', '200', '--test', '100'], timeoutMs: 240000 });
      t.equal(pipe.code, 0, 'the pipeline example runs on 2 ranks', { output: tail(pipe) });
      t.match(pipe.stdout, /the whole model on 100 test digits, in plain tfjs: loss [\d.]+/);
      onlyTheApplications(pipe, 'tfjs-pipeline.js');

      const xor = await runJob(2, rel('xor.mjs'), { cwd, env, timeoutMs: 120000 });
      t.equal(xor.code, 0, "docs/brain.md's xor.mjs runs on 2 ranks", { output: tail(xor) });
      t.match(xor.stdout, /1 xor 0 = /);
      for (const [rank, r] of xor.reports.entries()) {
        t.same(r && r.brain, [appCopy], `xor.mjs: rank ${rank} loaded brain.js from the application only`);
      }

      // TypeScript users keep hora/tfjs's types, checked against the application's tfjs.
      fs.writeFileSync(path.join(appDir, 'types.ts'), `import * as tf from '@tensorflow/tfjs';
import { DistributedOptimizer, BroadcastWeightsCallback, MetricAverageCallback, shard, pipeline } from 'hora/tfjs';
const optimizer = new DistributedOptimizer(tf.train.adam(0.05), { overlap: false });
const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [4], units: 1 })] });
model.compile({ optimizer, loss: 'meanSquaredError' });
const callbacks: tf.Callback[] = [new BroadcastWeightsCallback(), new MetricAverageCallback()];
const part: tf.Tensor = shard(tf.zeros([4, 4]), tf.zeros([4, 1])).x;
const rate: number | undefined = optimizer.learningRate;
export const used = [callbacks, part, rate, pipeline];
`);
      fs.writeFileSync(path.join(appDir, 'tsconfig.json'), JSON.stringify({
        compilerOptions: { target: 'ES2020', module: 'node16', moduleResolution: 'node16', strict: true, noEmit: true, skipLibCheck: true, types: ['node'] },
        files: ['types.ts'],
      }));
      const tsc = await runProcess([path.join(MODULES, 'typescript', 'bin', 'tsc'), '-p', appDir], cleanEnv({}), 120000, appDir);
      t.equal(tsc.code, 0, "hora/tfjs's types check against the application's tfjs", { output: tail(tsc) });

      // onnxruntime-web's training build, loaded by hora/onnxruntime itself, started from elsewhere.
      const probe = path.join(appDir, 'ort-probe.js');
      fs.writeFileSync(probe, `const { loadOrtTraining } = require('hora/onnxruntime');
loadOrtTraining();
const loaded = Object.keys(require.cache).filter((f) => f.includes('/node_modules/onnxruntime-web/'));
console.log(JSON.stringify([...new Set(loaded.map((f) => f.slice(0, f.indexOf('/node_modules/onnxruntime-web/'))))]));
`);
      const ort = await runProcess([probe], cleanEnv({}), 60000, os.tmpdir());
      t.equal(ort.code, 0, 'loadOrtTraining() loads', { output: tail(ort) });
      t.same(ort.code === 0 ? JSON.parse(ort.stdout.trim().split('\n').pop()) : null, [appCopy],
        "hora/onnxruntime loaded the application's onnxruntime-web, with the working directory elsewhere");
    });
  }
});

t.test('an optimizer or model of another tfjs copy is refused, naming both', { skip }, async (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-two-tfjs-'));
  t.teardown(() => fs.rmSync(root, { recursive: true, force: true }));
  const { appModules } = linkedLayout(root);
  // A script outside the application that loads hora/tfjs (which resolves hora's copy from there) before the
  // application's tfjs: the one layout in which hora cannot find the user's copy.
  const script = path.join(root, 'two.js');
  fs.writeFileSync(script, `const hora = require(${JSON.stringify(path.join(ROOT, 'dist', 'adapters', 'tfjs', 'index.js'))});
const tf = require(${JSON.stringify(path.join(appModules, '@tensorflow', 'tfjs'))});
const out = {};
try { new hora.DistributedOptimizer(tf.train.sgd(1)); out.optimizer = 'accepted'; } catch (e) { out.optimizer = { code: e.code, message: e.message }; }
console.log(JSON.stringify(out));
`);
  const r = await runProcess([script], cleanEnv({}), 60000, root);
  t.equal(r.code, 0, 'the script ran', { output: tail(r) });
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  t.equal(out.optimizer.code, 'ERR_INVALID_ARGUMENT');
  t.match(out.optimizer.message, "DistributedOptimizer: argument 'optimizer' comes from the @tensorflow/tfjs-core at " +
    path.join(fs.realpathSync(appModules), '@tensorflow', 'tfjs-core'));
  t.match(out.optimizer.message, 'but hora/tfjs works with the one at ' + path.join(fs.realpathSync(MODULES), '@tensorflow', 'tfjs-core'));
});
