'use strict';
// The project's TypeScript and C++ sources, for tests that read the tree (test/imports.test.js, test/config-env.test.js).
const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.join(__dirname, '..', '..');

/** Every .ts file (not .d.ts) under `folder` (relative to the checkout), as paths relative to it, in walk order. */
function tsSources(folder) {
  const out = [];
  for (const entry of fs.readdirSync(path.join(ROOT, folder), { withFileTypes: true })) {
    const rel = `${folder}/${entry.name}`;
    if (entry.isDirectory()) out.push(...tsSources(rel));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

/** Every C++ or CUDA source (.h, .cc, .cu, .cuh) under `folder`, as paths relative to the checkout, in walk order. */
function nativeSources(folder) {
  const out = [];
  for (const entry of fs.readdirSync(path.join(ROOT, folder), { withFileTypes: true })) {
    const rel = `${folder}/${entry.name}`;
    if (entry.isDirectory()) out.push(...nativeSources(rel));
    else if (/\.(h|cc|cu|cuh)$/.test(entry.name)) out.push(rel);
  }
  return out;
}

module.exports = { ROOT, tsSources, nativeSources };
