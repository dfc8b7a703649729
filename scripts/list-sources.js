#!/usr/bin/env node
'use strict';
// Prints every .cc file under native/src and native/binding, relative to the
// package root, one per line, sorted. binding.gyp expands this at configure
// time so a new source file needs no edit to the build files. native/test and
// bench are deliberately not listed: they are separate executables.
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
const dirs = ['native/src', 'native/binding'];

function walk(rel, out) {
  const abs = path.join(root, rel);
  let entries;
  try {
    entries = fs.readdirSync(abs, { withFileTypes: true });
  } catch (err) {
    if (err.code === 'ENOENT') return;
    throw err;
  }
  for (const e of entries) {
    const child = rel + '/' + e.name;
    if (e.isDirectory()) walk(child, out);
    else if (e.isFile() && e.name.endsWith('.cc')) out.push(child);
  }
}

const sources = [];
for (const d of dirs) walk(d, sources);
sources.sort();
if (sources.length === 0) {
  console.error('list-sources: no .cc files under ' + dirs.join(' or ') + ' in ' + root);
  process.exit(1);
}
process.stdout.write(sources.join('\n') + '\n');
