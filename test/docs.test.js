'use strict';
// Every code example in README.md and docs/*.md runs as written, and every name the docs give exists.
//
// The first line of every ```js block says what it is:
//   // run: COMMAND                    a whole program. It is saved under the file name COMMAND runs
//                                      (`node NAME.mjs`) in a folder of its own, COMMAND is run there, and
//                                      it must exit with status 0.
//   // run with PREREQUISITE: COMMAND  the same when PREREQUISITE is there (PREREQUISITES below says how
//                                      each is checked and provided), else a skip that names what is missing.
//   // fragment: WHAT IT SHOWS         part of a program, not meant to run on its own.
// Any other first line fails.
//
// Those folders sit in a scratch folder laid out like a user's project: node_modules/hora is a link to this
// checkout (so its package.json "exports" decide what `hora`, `hora/tfjs`, ... load) and every other package
// is a link into this checkout's node_modules. `hora` (and `npx hora`) in a command is this checkout's
// dist/ts/cli/main.js, found on PATH.
//
// Stated output: a ```text block after a paragraph that says "prints" and ends with a colon ("it prints,
// in some order:") is what the last runnable block before it prints. Each of its lines must be a line of
// that output; ranks print concurrently, so their order is not checked. Where the paragraph says "with its
// own ..." (accuracies, times), a decimal number in a stated line stands for any decimal number.
//
// An elastic example (its COMMAND runs `hora run --min-np`) also runs with worker 1 SIGKILLed right after its
// first commit, and must exit 0 and print the same.
//
// Shell examples (```sh, ```bash): every command in them that runs hora (`hora`, `npx hora`,
// `node dist/ts/cli/main.js`, also after VAR=value and as the worker of `hora run`) is checked:
//   - `hora run` by hora run's own parser (every flag known, every value valid: what the launcher checks
//     before it starts anything), with stand-ins for what belongs to another machine (STAND_INS);
//     `hora bench` by hora bench's parser; `hora timeline`, `hora env` against their usage;
//   - a command that is a runnable block's COMMAND has been run with that block;
//   - the commands in RUN_FOR_REAL are cheap: they run for real from the repository root and must exit 0.
//
// Names, from the docs to the code: every HORA_* variable the docs mention is listed by `hora env` (except
// variables of the test suite itself: named under test/ and nowhere in ts/, adapters/ or native/), and every
// flag the docs give `hora run` is in `hora run --help`: in commands, and as a lone `--flag` code span in a
// paragraph that speaks of `hora run` and of no other launcher.
//
// Links: every relative link of README.md, docs/*.md and docs/notes/*.md resolves, a heading's #anchor
// included, and so does every path of a docs page (and #anchor) that a source, bench or test file names.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { spawnAndCollect } = require('./support/spawn');
const { ROOT, HORA, NODE } = require('./support/hora-job');

const { parseRunArgs } = require(path.join(ROOT, 'dist', 'ts', 'cli', 'run-args.js'));
const { parseRendezvousArgs } = require(path.join(ROOT, 'dist', 'ts', 'cli', 'rendezvous.js'));
const bench = require(path.join(ROOT, 'dist', 'ts', 'cli', 'bench.js'));

const DOCS = ['README.md', ...fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
// The project's own (scripts/make-onnx-training-artifacts.js), so the ONNX Runtime example runs in every clone.
const ORT_ARTIFACTS = path.join(ROOT, 'test', 'fixtures', 'onnxruntime-training');

/** What a `// run with PREREQUISITE:` block may need: a reason to skip when it is missing, and how to provide it. */
const PREREQUISITES = {
  'a CUDA device': {
    missing() {
      const hora = require(path.join(ROOT, 'dist', 'ts', 'index.js'));
      return hora.cuda.available() ? null : `no CUDA device: ${hora.cuda.unavailableReason()}`;
    },
    provide() {},
  },
  'the ONNX Runtime training artifacts': {
    missing: () => (fs.existsSync(path.join(ORT_ARTIFACTS, 'training_model.onnx')) ? null : `the artifacts are not in ${ORT_ARTIFACTS}`),
    provide(dir) {
      for (const f of fs.readdirSync(ORT_ARTIFACTS).filter((name) => !name.endsWith('.md'))) fs.symlinkSync(path.join(ORT_ARTIFACTS, f), path.join(dir, f));
    },
  },
};

/** Shell commands from the docs that take seconds: run for real, from the repository root. */
const RUN_FOR_REAL = [
  'node dist/ts/cli/main.js run -np 2 node bench/latency.js 3000',
  'HORA_TRANSPORT=tcp node dist/ts/cli/main.js run -np 2 node bench/latency.js 3000',
];

/** hora run values that only make sense on another machine, replaced when a documented command is parsed. */
const STAND_INS = {
  '--hostfile': (dir) => write(dir, 'hostfile', 'localhost slots=64\n'), // the file the docs name is the reader's
  '-i': (dir) => write(dir, 'ssh-key', ''), // the same for the private key
  '--ssh-identity': (dir) => write(dir, 'ssh-key', ''),
  '--iface': () => 'lo', // checked against this machine's interfaces, which the docs cannot know
  // The reader's discovery script, run once when the command is parsed: one that lists this machine.
  '--host-discovery-script': (dir) => {
    const file = write(dir, 'discover-hosts.sh', '#!/bin/sh\necho localhost:64\n');
    fs.chmodSync(file, 0o755);
    return file;
  },
};

/**
 * Stand-in values for the variables a command forwards from the reader's environment (`-x NAME`, and the bare
 * names of HORA_RUN_EXPORT), which this machine need not have.
 */
function exportedStandIns(args, env) {
  const names = [];
  args.forEach((a, i) => {
    if (args[i - 1] === '-x') names.push(a);
    else if (a.startsWith('-x=')) names.push(a.slice(3));
  });
  names.push(...(env.HORA_RUN_EXPORT ?? '').split(',').map((e) => e.trim()));
  return Object.fromEntries(names.filter((n) => n && !n.includes('=')).map((n) => [n, 'stand-in']));
}

function write(dir, name, text) {
  const file = path.join(dir, name);
  fs.writeFileSync(file, text);
  return file;
}

// ---------------------------------------------------------------------------------------------------------
// Reading the docs

/** Fenced blocks and the paragraphs between them, with line numbers. */
function parseMarkdown(file) {
  const lines = fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n');
  const blocks = [];
  const paragraphs = [];
  let prose = [];
  let before = ''; // the paragraph just before the next block, if nothing else came between
  const endParagraph = (line) => {
    if (prose.length) {
      paragraphs.push({ file, line, text: prose.join('\n') });
      before = prose.join('\n');
    }
    prose = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const open = /^\s*```(\S*)/.exec(lines[i]);
    if (!open) {
      if (lines[i].trim() === '') endParagraph(i + 1 - prose.length);
      else prose.push(lines[i]);
      continue;
    }
    endParagraph(i + 1 - prose.length);
    const body = [];
    let j = i + 1;
    while (j < lines.length && !/^\s*```\s*$/.test(lines[j])) body.push(lines[j++]);
    blocks.push({ file, line: i + 1, lang: open[1].toLowerCase(), text: body.join('\n'), before });
    before = '';
    i = j;
  }
  endParagraph(lines.length);
  return { blocks, paragraphs, text: lines.join('\n') };
}

const docs = DOCS.map((file) => ({ file, ...parseMarkdown(file) }));
const where = (b) => `${b.file}:${b.line}`;
const isJs = (b) => ['js', 'javascript', 'mjs', 'cjs'].includes(b.lang);

/** A js block's marker: {kind: 'run', prerequisite, command, script} or {kind: 'fragment'} or {kind: null}. */
function marker(block) {
  const first = block.text.split('\n')[0];
  const run = /^\/\/ run(?: with ([^:]+))?: (.+)$/.exec(first);
  if (run) {
    const command = run[2].trim();
    const script = /\bnode\s+(?:-\S+\s+)*([\w.-]+\.(?:mjs|cjs|js))(?:\s|$)/.exec(command);
    return { kind: 'run', prerequisite: run[1], command, script: script && script[1] };
  }
  if (/^\/\/ fragment: \S/.test(first)) return { kind: 'fragment' };
  return { kind: null, first };
}

/** Runnable blocks in document order, each with the ```text blocks that state its output. */
const runnables = [];
/** ```text blocks that state an output with no runnable block before them. */
const orphanOutputs = [];
for (const doc of docs) {
  let last = null;
  for (const b of doc.blocks) {
    if (b.lang === 'text' && /\bprints\b[^\n]*:\s*$/.test(b.before)) {
      if (last) last.expected.push(b);
      else orphanOutputs.push(b);
    } else if (isJs(b)) {
      const m = marker(b);
      if (m.kind === 'run' && m.script) runnables.push((last = { block: b, marker: m, expected: [] }));
    }
  }
}

/**
 * Splits one shell line into commands of words, as sh would for what the docs use: quotes, backslashes,
 * $(...), comments, and the separators ; & && || |. Returns [{env: {NAME: value}, words}].
 */
function shellCommands(line) {
  const commands = [];
  let words = [];
  let word = null;
  const endWord = () => { if (word !== null) words.push(word); word = null; };
  const endCommand = () => { endWord(); if (words.length) commands.push(words); words = []; };
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === '\\' && i + 1 < line.length) { word = (word ?? '') + line[++i]; continue; }
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new Error(`unclosed ' in: ${line}`);
      word = (word ?? '') + line.slice(i + 1, end);
      i = end;
      continue;
    }
    if (c === '"') {
      let j = i + 1;
      let text = '';
      for (; j < line.length && line[j] !== '"'; j++) text += line[j] === '\\' ? line[++j] : line[j];
      if (j >= line.length) throw new Error(`unclosed " in: ${line}`);
      word = (word ?? '') + text;
      i = j;
      continue;
    }
    if (c === '$' && line[i + 1] === '(') {
      let depth = 0, j = i + 1;
      for (; j < line.length; j++) {
        if (line[j] === '(') depth++;
        if (line[j] === ')' && --depth === 0) break;
      }
      word = (word ?? '') + line.slice(i, j + 1);
      i = j;
      continue;
    }
    if (c === '#' && word === null) break;
    if (c === ' ' || c === '\t') { endWord(); continue; }
    if (c === ';' || c === '&' || c === '|') {
      endCommand();
      if (line[i + 1] === c) i++;
      continue;
    }
    word = (word ?? '') + c;
  }
  endCommand();
  return commands.map((w) => {
    const env = {};
    let k = 0;
    for (; k < w.length && /^[A-Za-z_][A-Za-z0-9_]*=/.test(w[k]); k++) {
      const eq = w[k].indexOf('=');
      env[w[k].slice(0, eq)] = w[k].slice(eq + 1);
    }
    return { env, words: w.slice(k) };
  });
}

/** The arguments after `hora` when words run hora, else null. */
function horaArgs(words) {
  if (words[0] === 'hora') return words.slice(1);
  if (words[0] === 'npx' && words[1] === 'hora') return words.slice(2);
  if (words[0] === 'node' && (words[1] === 'dist/ts/cli/main.js' || words[1] === './dist/ts/cli/main.js')) return words.slice(2);
  return null;
}

/** The lines of a shell block, continuation lines joined. */
function shellLines(block) {
  return block.text.replace(/\\\n\s*/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
}

const normalize = (line) => line.replace(/\s+#.*$/, '').replace(/\s+/g, ' ').trim();

// ---------------------------------------------------------------------------------------------------------
// Running

/** A scratch project: node_modules/hora -> this checkout, every other package -> this checkout's own. */
function makeProject() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-docs-'));
  const modules = path.join(dir, 'node_modules');
  fs.mkdirSync(modules);
  for (const name of fs.readdirSync(path.join(ROOT, 'node_modules'))) {
    if (name === 'hora' || name.startsWith('.')) continue;
    const from = path.join(ROOT, 'node_modules', name);
    if (name.startsWith('@')) {
      fs.mkdirSync(path.join(modules, name));
      for (const sub of fs.readdirSync(from)) fs.symlinkSync(path.join(from, sub), path.join(modules, name, sub));
    } else {
      fs.symlinkSync(from, path.join(modules, name));
    }
  }
  fs.symlinkSync(ROOT, path.join(modules, 'hora'));
  const bin = path.join(dir, 'bin');
  fs.mkdirSync(bin);
  fs.writeFileSync(path.join(bin, 'hora'), `#!/bin/sh\nexec "${NODE}" "${HORA}" "$@"\n`, { mode: 0o755 });
  return { dir, bin };
}

/** Runs a documented command line with bash; `npx hora` and `hora` are this checkout's. extraEnv: added to its environment. */
function runCommand(line, { cwd, bin, timeoutMs = 240000, extraEnv = {} }) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('HORA_')) env[k] = v;
  Object.assign(env, extraEnv);
  env.PATH = [bin, path.dirname(NODE), process.env.PATH].join(path.delimiter);
  // Its own process group, so that the timeout ends whatever the line started too.
  return spawnAndCollect('bash', ['-c', line.replace(/\bnpx hora\b/g, 'hora')], { cwd, env, detached: true, timeoutMs });
}

const tail = (r, n = 2500) => {
  const text = `${r.stdout}\n--- stderr ---\n${r.stderr}`;
  return text.length > n ? text.slice(-n) : text;
};

// What the code says about itself.
const horaHelp = (args) => {
  const r = spawnSync(NODE, [HORA, ...args], { encoding: 'utf8', env: { PATH: process.env.PATH } });
  return `${r.stdout}${r.stderr}`;
};
const RUN_HELP = horaHelp(['run', '--help']);
const BENCH_HELP = horaHelp(['bench', '--help']);
const TIMELINE_USAGE = horaHelp(['timeline']);
const ENV_USAGE = horaHelp(['env', '--help']);
const ENV_NAMES = JSON.parse(spawnSync(NODE, [HORA, 'env', '--json'], { encoding: 'utf8', env: { PATH: process.env.PATH } }).stdout)
  .variables.map((v) => v.name);

/** Flags a help text lists ("  -np, -n, --num-proc N   ..."), each with whether it takes a value. */
function helpFlags(help) {
  const flags = new Map();
  for (const line of help.split('\n')) {
    const m = /^\s{2,}((?:--?[A-Za-z][\w-]*(?:, )?)+)(?: (\S+))?(?:\s{2,}|$)/.exec(line);
    if (!m) continue;
    const value = m[2] === undefined ? 'none' : m[2].startsWith('[') ? 'optional' : 'required';
    for (const f of m[1].split(', ')) flags.set(f.trim(), value);
  }
  return flags;
}
const RUN_FLAGS = helpFlags(RUN_HELP);
const BENCH_FLAGS = helpFlags(BENCH_HELP);

/**
 * Checks that a run printed every line of the stated outputs. Where the paragraph that states one says
 * "with its own ..." (figures that differ from run to run), a decimal number in a stated line stands for
 * any decimal number.
 */
function checkPrinted(t, r, expected, how = '') {
  const got = r.stdout.split('\n').map((l) => l.trimEnd());
  for (const out of expected) {
    const own = /\bwith its own\b/.test(out.before);
    for (const line of out.text.split('\n').filter((l) => l.trim())) {
      const want = line.trimEnd();
      const pattern = own ? new RegExp(`^${want.split(/\d+\.\d+/).map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('\\d+\\.\\d+')}$`) : null;
      t.ok(got.some((l) => (pattern ? pattern.test(l) : l === want)), `prints ${JSON.stringify(line)}${how} (${where(out)})`, { output: tail(r) });
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// The checks

t.test('every ```js block says on its first line how to use it', async (t) => {
  for (const doc of docs) {
    for (const b of doc.blocks.filter(isJs)) {
      const m = marker(b);
      if (m.kind === null) {
        t.fail(`${where(b)}: the first line is neither "// run: COMMAND", "// run with PREREQUISITE: COMMAND" nor "// fragment: ...": ${JSON.stringify(m.first)}`);
      } else if (m.kind === 'run') {
        t.ok(m.script, `${where(b)}: "${m.command}" runs a file the block can be saved as`);
        if (m.prerequisite !== undefined) t.ok(PREREQUISITES[m.prerequisite], `${where(b)}: the prerequisite "${m.prerequisite}" is one this test knows`);
      } else {
        t.pass(`${where(b)}: a fragment`);
      }
    }
  }
});

/**
 * An elastic example (its command runs `hora run --min-np`) runs a second time with worker 1 SIGKILLed right
 * after its first commit: the job must go on and print what the text says, which a step applied twice after
 * the rollback would change. The kill comes from a module every worker imports first (NODE_OPTIONS), which
 * wraps hora.elastic.State's commit in the process of worker 1.
 */
const isElastic = (m) => /\bhora run\b.*--min-np\b/.test(m.command);
const KILL_AFTER_FIRST_COMMIT = `import * as hora from 'hora';
if (process.env.HORA_WORKER_ID === '1') {
  const commit = hora.elastic.State.prototype.commit;
  hora.elastic.State.prototype.commit = async function () {
    await commit.call(this);
    process.kill(process.pid, 'SIGKILL');
  };
}
`;

t.test('every runnable ```js block runs as written, and prints what the text says it prints', async (t) => {
  const project = makeProject();
  t.teardown(() => fs.rmSync(project.dir, { recursive: true, force: true }));
  for (const b of orphanOutputs) t.fail(`${where(b)}: states an output, but no runnable block comes before it`);
  let n = 0;
  for (const { block: b, marker: m, expected } of runnables) {
    const need = m.prerequisite === undefined ? null : PREREQUISITES[m.prerequisite];
    const missing = need ? need.missing() : null;
    await t.test(`${where(b)}: ${m.command}`, { skip: missing ? `needs ${m.prerequisite}: ${missing}` : false }, async (t) => {
      const dir = path.join(project.dir, `block-${n++}`);
      fs.mkdirSync(dir);
      fs.writeFileSync(path.join(dir, m.script), `${b.text}\n`);
      if (need) need.provide(dir);
      const r = await runCommand(m.command, { cwd: dir, bin: project.bin });
      t.equal(r.code, 0, `exits 0${r.timedOut ? ' (it was killed after 240 s)' : ''}`, { output: tail(r) });
      checkPrinted(t, r, expected);
      if (!isElastic(m)) return;
      const hook = path.join(dir, 'kill-after-first-commit.mjs');
      fs.writeFileSync(hook, KILL_AFTER_FIRST_COMMIT);
      const killed = await runCommand(m.command, { cwd: dir, bin: project.bin, extraEnv: { NODE_OPTIONS: `--import=${hook}` } });
      t.equal(killed.code, 0, `with worker 1 killed after its first commit: exits 0${killed.timedOut ? ' (it was killed after 240 s)' : ''}`, { output: tail(killed) });
      t.match(killed.stderr, /worker 1 was killed by SIGKILL; the job goes on without it/, 'worker 1 was killed, and the job went on', { output: tail(killed) });
      checkPrinted(t, killed, expected, ' with worker 1 killed after its first commit');
    });
  }
});

t.test('every hora command in a ```sh block is one hora accepts; the cheap ones run', async (t) => {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-docs-sh-'));
  t.teardown(() => fs.rmSync(scratch, { recursive: true, force: true }));
  const ranWithBlock = new Set(runnables.map((r) => normalize(r.marker.command)));
  const seen = new Set();
  const project = makeProject();
  t.teardown(() => fs.rmSync(project.dir, { recursive: true, force: true }));

  /** Checks `hora argv...` (run with the line's own variables, env) without running it; returns a list of problems. */
  function check(argv, env = {}) {
    const [command, ...rest] = argv;
    const problems = [];
    switch (command) {
      case 'run': {
        const args = rest.map((a, i) => (STAND_INS[rest[i - 1]] ? STAND_INS[rest[i - 1]](scratch) : a));
        let opts;
        try {
          opts = parseRunArgs(args, { ...exportedStandIns(args, env), ...env });
        } catch (e) {
          return [`hora run rejects it: ${e.message}`];
        }
        if (opts === 'help') return problems;
        const worker = horaArgs([opts.command, ...opts.args]);
        return worker ? check(worker) : problems;
      }
      case 'rendezvous':
        try {
          parseRendezvousArgs(rest, { HORA_SECRET: 'the reader\'s secret', ...env });
        } catch (e) {
          problems.push(`hora rendezvous rejects it: ${e.message}`);
        }
        return problems;
      case 'bench':
        try {
          bench.parseArgs(rest);
        } catch (e) {
          problems.push(`hora bench rejects it: ${e.message}`);
        }
        return problems;
      case 'timeline':
        for (const a of rest.filter((x) => x.startsWith('-'))) if (!TIMELINE_USAGE.includes(` ${a} `)) problems.push(`hora timeline has no ${a}`);
        return problems;
      case 'env':
        for (const a of rest) if (!ENV_USAGE.includes(a)) problems.push(`hora env has no ${a}`);
        return problems;
      case '--help': case '-h': case '--version': case '-v':
        return problems;
      default:
        return [`hora has no command ${JSON.stringify(command)}`];
    }
  }

  for (const doc of docs) {
    for (const b of doc.blocks.filter((x) => ['sh', 'bash', 'shell'].includes(x.lang))) {
      for (const line of shellLines(b)) {
        let commands;
        try {
          commands = shellCommands(line);
        } catch (e) {
          t.fail(`${where(b)}: cannot read ${JSON.stringify(line)}: ${e.message}`);
          continue;
        }
        for (const { env, words } of commands) {
          const argv = horaArgs(words);
          if (!argv) continue;
          for (const name of Object.keys(env).filter((k) => k.startsWith('HORA_'))) {
            t.ok(ENV_NAMES.includes(name), `${where(b)}: ${name} is a variable of hora env`);
          }
          const problems = check(argv, env);
          t.same(problems, [], `${where(b)}: ${normalize(line)}`);
        }
        const key = normalize(line);
        if (ranWithBlock.has(key)) t.pass(`${where(b)}: ran with its block: ${key}`);
        if (RUN_FOR_REAL.includes(key) && !seen.has(key)) {
          seen.add(key);
          const r = await runCommand(key, { cwd: ROOT, bin: project.bin });
          t.equal(r.code, 0, `${where(b)}: runs for real and exits 0: ${key}`, { output: tail(r) });
        }
      }
    }
  }
  for (const line of RUN_FOR_REAL) t.ok(seen.has(line), `RUN_FOR_REAL names a command the docs show: ${line}`);
});

t.test('every HORA_* variable the docs mention is listed by hora env', async (t) => {
  const read = (dir, exts) => {
    const out = [];
    const walk = (d) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) { if (e.name !== 'node_modules') walk(p); } else if (exts.some((x) => e.name.endsWith(x))) out.push(fs.readFileSync(p, 'utf8'));
      }
    };
    walk(path.join(ROOT, dir));
    return out.join('\n');
  };
  const testSuite = read('test', ['.js']);
  const source = ['ts', 'adapters', 'native'].map((d) => read(d, ['.ts', '.cc', '.h', '.js'])).join('\n');
  const names = new Map();
  for (const doc of docs) {
    const lines = doc.text.split('\n');
    lines.forEach((l, i) => {
      for (const m of l.matchAll(/(?<![\w-])HORA_[A-Z0-9_]*[A-Z0-9_](\*)?/g)) {
        if (!names.has(m[0])) names.set(m[0], `${doc.file}:${i + 1}`);
      }
    });
  }
  for (const [name, at] of names) {
    if (name.endsWith('*')) {
      const prefix = name.slice(0, -1);
      t.ok(ENV_NAMES.some((n) => n.startsWith(prefix)), `${at}: ${name} names variables of hora env`);
    } else if (ENV_NAMES.includes(name)) {
      t.pass(`${at}: ${name}`);
    } else {
      const ofTests = testSuite.includes(name) && !source.includes(name);
      t.ok(ofTests, ofTests ? `${at}: ${name} is a variable of the test suite, not of hora` : `${at}: ${name} is listed by hora env`);
    }
  }
});

t.test('every hora run flag the docs show is in hora run --help', async (t) => {
  t.ok(RUN_FLAGS.size > 10 && RUN_FLAGS.has('-np'), `hora run --help lists its flags (${[...RUN_FLAGS.keys()].join(' ')})`);
  const OTHER_LAUNCHERS = /\b(mpirun|mpiexec|MPI|srun|sbatch|torchrun|kubectl|iperf3|taskset|g\+\+|cmake)\b/;
  /** Flags of `hora run ...` up to the worker command; its own `hora bench` flags too. */
  const commandFlags = (argv, flags) => {
    const found = [];
    for (let i = 0; i < argv.length; i++) {
      const a = argv[i];
      if (a === '--' || a === '[--]') break;
      if (!a.startsWith('-')) {
        const worker = horaArgs(argv.slice(i));
        if (worker && worker[0] === 'bench') found.push(...worker.slice(1).filter((x) => x.startsWith('-')).map((f) => ['bench', f]));
        break;
      }
      const name = a.split('=')[0];
      found.push(['run', name]);
      const arity = flags.get(name);
      if (arity === 'required' && !a.includes('=')) i++;
      if (arity === 'optional' && /^\d+$/.test(argv[i + 1] ?? '')) i++;
    }
    return found;
  };
  for (const doc of docs) {
    for (const p of doc.paragraphs) {
      for (const [, span] of p.text.matchAll(/`([^`\n]+)`/g)) {
        let words;
        try {
          words = shellCommands(span)[0]?.words ?? [];
        } catch {
          continue;
        }
        const argv = horaArgs(words);
        if (argv && argv[0] === 'run') {
          for (const [of, flag] of commandFlags(argv.slice(1), RUN_FLAGS)) {
            t.ok((of === 'run' ? RUN_FLAGS : BENCH_FLAGS).has(flag), `${p.file}:${p.line}: \`${span}\`: hora ${of} ${flag}`);
          }
        } else if (argv && argv[0] === 'bench') {
          for (const flag of argv.slice(1).filter((x) => x.startsWith('-'))) t.ok(BENCH_FLAGS.has(flag), `${p.file}:${p.line}: \`${span}\`: hora bench ${flag}`);
        } else if (/^--?[A-Za-z][\w-]*$/.test(words[0] ?? '') && /`(npx )?hora run\b/.test(p.text) && !OTHER_LAUNCHERS.test(p.text)) {
          t.ok(RUN_FLAGS.has(words[0]), `${p.file}:${p.line}: \`${span}\`, in a paragraph about hora run, is a flag of hora run --help`);
        }
      }
    }
  }
});

/** The anchors GitHub gives a markdown file's headings: lower case, punctuation dropped, spaces as hyphens, -N for repeats. */
function anchorsOf(file) {
  const anchors = new Set();
  const seen = new Map();
  let fenced = false;
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const h = !fenced && /^#{1,6} (.*)$/.exec(line);
    if (!h) continue;
    const slug = h[1].trim().toLowerCase().replace(/[^\p{L}\p{N}_\- ]/gu, '').replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n ? `${slug}-${n}` : slug);
  }
  return anchors;
}

t.test('every link of the docs, and every docs/*.md the code names, resolves, anchors included', async (t) => {
  const notes = fs.readdirSync(path.join(ROOT, 'docs', 'notes')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/notes/${f}`);
  /** A problem with `target` (a path and maybe #anchor) as seen from `from`, or null. */
  const problem = (from, target) => {
    const [file, anchor] = target.split('#');
    const full = file ? path.resolve(path.dirname(path.join(ROOT, from)), decodeURI(file)) : path.join(ROOT, from);
    if (!fs.existsSync(full)) return `${file} does not exist`;
    if (anchor && full.endsWith('.md') && !anchorsOf(full).has(anchor)) return `${path.relative(ROOT, full)} has no heading #${anchor}`;
    return null;
  };
  let links = 0;
  for (const file of [...DOCS, ...notes]) {
    const prose = fs.readFileSync(path.join(ROOT, file), 'utf8').replace(/^\s*```[\s\S]*?^\s*```/gm, '');
    for (const [, target] of prose.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/i.test(target)) continue; // https:, mailto:
      links++;
      const p = problem(file, target);
      if (p) t.fail(`${file}: (${target}): ${p}`);
    }
  }
  t.ok(links > 100, `the docs have links (${links})`);
  const walk = (d) => fs.readdirSync(path.join(ROOT, d), { withFileTypes: true }).flatMap((e) =>
    (e.isDirectory() ? (e.name === 'node_modules' ? [] : walk(path.join(d, e.name))) : [path.join(d, e.name)]));
  for (const file of ['bench', 'test', 'ts', 'adapters', 'native', 'scripts', 'examples'].filter((d) => fs.existsSync(path.join(ROOT, d))).flatMap(walk)) {
    if (!/\.(js|mjs|cjs|ts|cc|h|cu|c|sh|py)$/.test(file)) continue;
    for (const [target] of fs.readFileSync(path.join(ROOT, file), 'utf8').matchAll(/(?<![\w/])docs\/[\w./-]+\.md(#[\w-]+)?/g)) {
      const p = problem('README.md', target);
      if (p) t.fail(`${file}: ${target}: ${p}`);
    }
  }
});
