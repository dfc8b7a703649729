#!/usr/bin/env node
'use strict';
// Checks that every #include "dir/file.h" in native/src and native/binding points down the layers of the
// native core (or stays in its own layer), and prints every one that points up:
//
//   native/src/transport/context.h:16: transport includes algorithms/topology.h, a higher layer (algorithms)
//
// The layers, lowest first: a layer may use the ones below it and is used only by the ones above.
// cuda/ sits between algorithms/ and engine/: its paths stage device memory through the host collectives
// (and use them as barriers), and the engine hands it plain structs (cuda::DeviceWork); the algorithms do
// not know devices exist.
//
// A file in a folder the table does not name, or an include of one, fails too: a new folder gets its
// place in LAYERS before it is used.
//
// Usage: node scripts/check-layers.js [root]   (exit 0: every arrow points down; 1: some do not)
const fs = require('fs');
const path = require('path');

const LAYERS = ['common', 'reduce', 'transport', 'algorithms', 'cuda', 'engine', 'binding'];

// Upward includes let through for now: {file, include}. Empty since issue 39 gave cuda/ its own struct; an
// entry that no longer matches an include fails the check, so this list only shrinks.
const KNOWN_UPWARD = [];

const SOURCE = /\.(h|cc|cu|cuh)$/;
const INCLUDE = /^\s*#\s*include\s*"([^"]+)"/;

// The layer of a file under native/ ('binding' for native/binding, the first folder under native/src).
function layerOfFile(rel) {
  const parts = rel.split('/');
  if (parts[1] === 'binding') return 'binding';
  return parts.length > 3 ? parts[2] : null;
}

function walk(root, rel, out) {
  let entries;
  try {
    entries = fs.readdirSync(path.join(root, rel), { withFileTypes: true });
  } catch (err) {
    if (err.code === 'ENOENT') return;
    throw err;
  }
  for (const e of entries) {
    const child = rel + '/' + e.name;
    if (e.isDirectory()) walk(root, child, out);
    else if (e.isFile() && SOURCE.test(e.name)) out.push(child);
  }
}

// Every problem in the tree at `root`: {file, line, text} for each include that points up (or into or
// from an unknown folder), and each KNOWN_UPWARD entry that matches nothing.
function checkLayers(root, known = KNOWN_UPWARD) {
  const files = [];
  walk(root, 'native/src', files);
  walk(root, 'native/binding', files);
  files.sort();
  const problems = [];
  const used = new Set();
  for (const file of files) {
    const from = layerOfFile(file);
    const fromRank = LAYERS.indexOf(from);
    if (fromRank < 0) {
      problems.push({ file, line: 0, text: `${from === null ? 'a file directly in native/src' : `folder ${from}/`} has no layer in scripts/check-layers.js LAYERS` });
      continue;
    }
    const lines = fs.readFileSync(path.join(root, file), 'utf8').split('\n');
    lines.forEach((source, i) => {
      const m = INCLUDE.exec(source);
      if (!m || !m[1].includes('/')) return;  // "file.h": beside the including file, its own layer
      const include = m[1];
      const to = include.split('/')[0];
      const toRank = LAYERS.indexOf(to);
      const where = { file, line: i + 1 };
      if (toRank < 0) {
        problems.push({ ...where, text: `${from} includes ${include}, whose folder ${to}/ has no layer in scripts/check-layers.js LAYERS` });
        return;
      }
      if (toRank <= fromRank) return;
      const k = known.findIndex((e) => e.file === file && e.include === include);
      if (k >= 0) {
        used.add(k);
        return;
      }
      problems.push({ ...where, text: `${from} includes ${include}, a higher layer (${to})` });
    });
  }
  known.forEach((e, k) => {
    if (!used.has(k)) {
      problems.push({ file: e.file, line: 0, text: `KNOWN_UPWARD lists ${e.include}, which it no longer includes upward: remove the entry` });
    }
  });
  return problems;
}

function format(p) {
  return `${p.file}${p.line > 0 ? ':' + p.line : ''}: ${p.text}`;
}

module.exports = { LAYERS, KNOWN_UPWARD, checkLayers, format };

if (require.main === module) {
  const root = path.resolve(process.argv[2] || path.join(__dirname, '..'));
  const problems = checkLayers(root);
  for (const p of problems) console.error(format(p));
  if (problems.length > 0) {
    console.error(`check-layers: ${problems.length} include(s) against the layers ${LAYERS.join(' < ')}`);
    process.exit(1);
  }
  console.log(`check-layers: every include in native/src and native/binding points down (${LAYERS.join(' < ')})`);
}
