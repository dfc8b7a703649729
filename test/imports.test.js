'use strict';
// No circles among the modules of ts/ and adapters/: the import graph of the .ts sources is a tree of
// layers (docs/internals.md). Every relative import counts: `import ... from`,
// `import type`, `export ... from`, `import('./x')` (also as a type) and `require('./x')`.
// And the adapters reach the core through two doors only: the public API (ts/index.ts) and what it
// gives them besides (ts/internal.ts); the core imports no adapter.

const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const ts = require('typescript');

const { ROOT, tsSources } = require('./support/sources');
const FOLDERS = ['ts', 'adapters'];

// Circles allowed for now, each as the sorted list of its files. ONLY for a circle that another change
// removes: empty this list once that change is in. A listed circle that is gone fails the test, so that
// the list never outlives its reason.
const KNOWN_CYCLES_ALLOWED_FOR_NOW = [];

/** The file a relative specifier names, as a path from the root, or undefined when it is not a .ts source. */
function resolve(from, spec, known) {
  const base = path.posix.normalize(path.posix.join(path.posix.dirname(from), spec));
  for (const candidate of [base, `${base}.ts`, base.replace(/\.js$/, '.ts'), `${base}/index.ts`]) {
    if (known.has(candidate)) return candidate;
  }
  return undefined;
}

/** file -> the files it imports, relative imports only. */
function importGraph() {
  const files = FOLDERS.flatMap(tsSources);
  const known = new Set(files);
  const graph = new Map();
  for (const file of files) {
    const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
    const { importedFiles } = ts.preProcessFile(text, true, true);
    const targets = new Set();
    for (const { fileName } of importedFiles) {
      if (!fileName.startsWith('./') && !fileName.startsWith('../')) continue;
      const target = resolve(file, fileName, known);
      if (target !== undefined) targets.add(target);
    }
    graph.set(file, [...targets].sort());
  }
  return graph;
}

/** Strongly connected components with more than one file, or a file importing itself (Tarjan). */
function cycles(graph) {
  let counter = 0;
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const found = [];
  const visit = (v) => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v)) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v), index.get(w)));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || graph.get(v).includes(v)) found.push(component.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return found;
}

/** One circle through the component's first file, written a -> b -> a. */
function describe(component, graph) {
  const inside = new Set(component);
  const start = component[0];
  const previous = new Map([[start, null]]);
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift();
    for (const w of graph.get(v)) {
      if (w === start) {
        const pathBack = [];
        for (let x = v; x !== null; x = previous.get(x)) pathBack.unshift(x);
        return [...pathBack, start].join(' -> ') + (component.length > pathBack.length ? ` (and ${component.length - pathBack.length} more files in the same knot: ${component.filter((f) => !pathBack.includes(f)).join(', ')})` : '');
      }
      if (inside.has(w) && !previous.has(w)) {
        previous.set(w, v);
        queue.push(w);
      }
    }
  }
  return component.join(', ');
}

/** The core files adapters may import: the public API and the internal module. */
const ADAPTER_DOORS = ['ts/index.ts', 'ts/internal.ts'];

/** Edges `from -> to` between adapters/ and ts/ other than an adapter importing one of ADAPTER_DOORS. */
function crossings(graph) {
  const out = [];
  for (const [from, targets] of graph) {
    for (const to of targets) {
      if (from.startsWith('adapters/') && to.startsWith('ts/') && !ADAPTER_DOORS.includes(to)) out.push(`${from} -> ${to}`);
      if (from.startsWith('ts/') && to.startsWith('adapters/')) out.push(`${from} -> ${to}`);
    }
  }
  return out;
}

const graph = importGraph();
const found = cycles(graph);
const key = (files) => files.join(' ');

t.test('the import graph of ts/ and adapters/ has no circles', async (t) => {
  t.ok(graph.size > 50, `the graph holds the sources (${graph.size} files)`);
  t.ok(graph.get('ts/index.ts').includes('ts/hora.ts'), 'ts/index.ts -> ts/hora.ts is an edge');
  const allowed = new Set(KNOWN_CYCLES_ALLOWED_FOR_NOW.map((c) => key([...c].sort())));
  for (const component of found) {
    if (allowed.has(key(component))) {
      t.comment(`allowed for now (KNOWN_CYCLES_ALLOWED_FOR_NOW): ${describe(component, graph)}`);
      continue;
    }
    t.fail(`import circle: ${describe(component, graph)}`);
  }
  for (const c of KNOWN_CYCLES_ALLOWED_FOR_NOW) {
    t.ok(found.some((component) => key(component) === key([...c].sort())),
      `${c.join(' <-> ')} is still a circle (else remove it from KNOWN_CYCLES_ALLOWED_FOR_NOW)`);
  }
});

t.test('the cycle finder finds circles, type-only and require() ones included', async (t) => {
  const g = new Map([
    ['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['d']], ['e', ['a']],
  ]);
  t.same(cycles(g).map(key).sort(), ['a b c', 'd']);
  t.equal(describe(['a', 'b', 'c'], g), 'a -> b -> c -> a');
  const text = "import type { X } from './x';\nconst y = require('./y');\ntype Z = typeof import('./z');\nexport { w } from './w';\n";
  t.same(ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName).sort(), ['./w', './x', './y', './z']);
});

t.test('adapters import only ts/index.ts and ts/internal.ts of the core, and the core no adapter', async (t) => {
  t.ok(graph.get('adapters/tfjs/optimizer.ts').includes('ts/internal.ts'), 'adapters/tfjs/optimizer.ts -> ts/internal.ts is an edge');
  t.ok(graph.get('adapters/tfjs/pipeline/executor.ts').includes('ts/internal.ts'), 'so is adapters/tfjs/pipeline/executor.ts -> ts/internal.ts');
  t.same(crossings(graph), [], 'no adapter imports another core file (add what it needs to ts/internal.ts)');
});

t.test('the door check finds an adapter that reaches past ts/internal.ts, and a core file that imports an adapter', async (t) => {
  const g = new Map([
    ['adapters/a/x.ts', ['ts/index.ts', 'ts/internal.ts', 'adapters/a/y.ts']],
    ['adapters/a/y.ts', ['ts/errors.ts']],
    ['ts/internal.ts', ['ts/errors.ts']],
    ['ts/stats.ts', ['adapters/a/y.ts']],
  ]);
  t.same(crossings(g), ['adapters/a/y.ts -> ts/errors.ts', 'ts/stats.ts -> adapters/a/y.ts']);
});
