'use strict';
// The native core's includes point only down its layers (scripts/check-layers.js): common < reduce <
// transport < algorithms < cuda < engine < binding.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnAndCollect } = require('./support/spawn');
const { checkLayers, format, KNOWN_UPWARD } = require('../scripts/check-layers.js');

const ROOT = path.join(__dirname, '..');

t.test('every include in native/src and native/binding points down the layers', async (t) => {
  const problems = checkLayers(ROOT).map(format);
  t.same(problems, [], 'no include points up, and every known upward include of KNOWN_UPWARD is still there');
  const r = await spawnAndCollect(process.execPath, [path.join(ROOT, 'scripts/check-layers.js')]);
  t.equal(r.code, 0, 'node scripts/check-layers.js exits 0', { stderr: r.stderr });
});

// A tree laid out like native/, with the files given as {path: text}.
function tree(t, files) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-layers-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  for (const [rel, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    fs.writeFileSync(path.join(dir, rel), text);
  }
  return dir;
}

t.test('an upward include fails, naming the file, the line and both layers', async (t) => {
  const dir = tree(t, {
    'native/src/common/status.h': '#pragma once\n',
    'native/src/transport/context.h': '#pragma once\n\n#include "common/status.h"\n#include "algorithms/topology.h"\n',
    'native/src/algorithms/topology.h': '#pragma once\n#include "transport/context.h"\n',
    'native/src/engine/work.h': '#include "cuda/collectives.h"\n',
    'native/binding/addon.cc': '#include "backing_store.h"\n#include "engine/work.h"\n',
  });
  t.same(checkLayers(dir, []).map(format), [
    'native/src/transport/context.h:4: transport includes algorithms/topology.h, a higher layer (algorithms)',
  ]);
  const r = await spawnAndCollect(process.execPath, [path.join(ROOT, 'scripts/check-layers.js'), dir]);
  t.equal(r.code, 1, 'the script exits 1');
  t.match(r.stderr, 'native/src/transport/context.h:4: transport includes algorithms/topology.h');
});

t.test('a folder with no layer fails, as a file and as an include', async (t) => {
  const dir = tree(t, {
    'native/src/plugins/x.cc': '#include "common/log.h"\n',
    'native/src/engine/y.cc': '#include "plugins/x.h"\n',
  });
  t.same(checkLayers(dir, []).map(format), [
    'native/src/engine/y.cc:1: engine includes plugins/x.h, whose folder plugins/ has no layer in scripts/check-layers.js LAYERS',
    'native/src/plugins/x.cc: folder plugins/ has no layer in scripts/check-layers.js LAYERS',
  ]);
});

t.test('a known upward include is let through while it is there, and fails once it is gone', async (t) => {
  const known = [{ file: 'native/src/cuda/collectives.h', include: 'engine/work.h' }];
  const withIt = tree(t, { 'native/src/cuda/collectives.h': '#include "engine/work.h"\n' });
  t.same(checkLayers(withIt, known).map(format), []);
  const without = tree(t, { 'native/src/cuda/collectives.h': '#include "transport/context.h"\n' });
  t.same(checkLayers(without, known).map(format), [
    'native/src/cuda/collectives.h: KNOWN_UPWARD lists engine/work.h, which it no longer includes upward: remove the entry',
  ]);
  t.ok(KNOWN_UPWARD.every((e) => e.file.startsWith('native/src/cuda/')), 'the known upward includes are all under native/src/cuda/');
  t.same(KNOWN_UPWARD, [], 'and there are none left: cuda/ takes plain structs from the engine (issue 39)');
});
