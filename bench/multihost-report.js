#!/usr/bin/env node
'use strict';
// Summarizes the tables bench/multihost.sh wrote into DIR: per size, the median over rounds of each
// series' busbw, hierarchical/ring and auto/ring time ratios (medians of per-round ratios), the cost model's
// prediction against the measured time, busbw as a share of the line rate, and an SVG plot of busbw
// against size (DIR/busbw.svg).
//
//   node bench/multihost-report.js DIR RATE      (RATE as given to tc, e.g. 1gbit)
const fs = require('node:fs');
const path = require('node:path');

const [dir, rateText = '1gbit'] = process.argv.slice(2);
if (!dir) {
  console.error('usage: multihost-report.js DIR RATE');
  process.exit(2);
}

function lineRateBytes(text) {
  const m = /^([\d.]+)([kmgt]?)(bit|bps)$/.exec(text);
  if (!m) return NaN;
  const scale = { '': 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12 }[m[2]];
  return (Number(m[1]) * scale) / (m[3] === 'bit' ? 8 : 1);
}

/** hora bench table: bytes count type iters time_us algbw busbw #wrong [model_us algorithm] */
function readHora(file) {
  const rows = new Map();
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8 || !/^\d+$/.test(f[0])) continue;
    rows.set(Number(f[0]), { time: Number(f[4]), busbw: Number(f[6]), wrong: Number(f[7]), model: f[8] ? Number(f[8]) : NaN, algorithm: f[9] });
  }
  return rows;
}

/** Open MPI peer table: bytes iters time_us algbw busbw */
function readMpi(file) {
  const rows = new Map();
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 5 || !/^\d+$/.test(f[0])) continue;
    rows.set(Number(f[0]), { time: Number(f[2]), busbw: Number(f[4]) });
  }
  return rows;
}

const median = (a) => {
  const s = a.filter((x) => Number.isFinite(x)).sort((x, y) => x - y);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

const series = new Map(); // name -> [rounds of Map(bytes -> row)]
for (const file of fs.readdirSync(dir).sort()) {
  const m = /^(hora-(\w+)|mpi)-(\d+)\.txt$/.exec(file);
  if (!m) continue;
  const name = m[2] ?? 'openmpi';
  const rows = m[2] ? readHora(path.join(dir, file)) : readMpi(path.join(dir, file));
  if (!series.has(name)) series.set(name, []);
  series.get(name).push(rows);
}
const names = [...series.keys()];
const sizes = [...new Set([...series.values()].flatMap((rounds) => rounds.flatMap((r) => [...r.keys()])))].sort((a, b) => a - b)
  .filter((b) => b >= 4096);
const rate = lineRateBytes(rateText);
const fmt = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a');

const at = (name, bytes, field) => (series.get(name) ?? []).map((r) => r.get(bytes)?.[field]);
const ratio = (a, b, bytes) => {
  const ra = series.get(a) ?? [], rb = series.get(b) ?? [];
  return median(ra.map((r, i) => (r.get(bytes)?.time ?? NaN) / (rb[i]?.get(bytes)?.time ?? NaN)));
};

const header = ['bytes', ...names.map((n) => `${n}_busbw_GBs`), 'hier/ring', 'auto/ring', 'auto_algo', 'model/measured(auto)', 'best_busbw/line'];
console.log(header.join('  '));
for (const bytes of sizes) {
  const row = [String(bytes).padStart(9)];
  const bus = {};
  for (const n of names) {
    bus[n] = median(at(n, bytes, 'busbw'));
    row.push(fmt(bus[n]).padStart(8));
  }
  row.push(fmt(ratio('hierarchical', 'ring', bytes)), fmt(ratio('auto', 'ring', bytes)));
  const autoRounds = series.get('auto') ?? [];
  row.push(autoRounds[0]?.get(bytes)?.algorithm ?? 'n/a');
  row.push(fmt(median(autoRounds.map((r) => r.get(bytes)?.model / r.get(bytes)?.time))));
  const best = Math.max(...names.filter((n) => n !== 'openmpi').map((n) => bus[n]).filter(Number.isFinite));
  row.push(fmt((best * 1e9) / rate));
  console.log(row.join('  '));
}
const wrong = [...series.entries()].filter(([n]) => n !== 'openmpi').flatMap(([, rounds]) => rounds.flatMap((r) => [...r.values()].map((x) => x.wrong)));
console.log(`wrong results in hora's checks: ${wrong.reduce((a, b) => a + (b || 0), 0)}`);

// SVG: busbw (GB/s) against message size, log-x, one polyline per series.
const W = 640, H = 400, L = 60, R = 140, T = 30, B = 50;
const maxBus = Math.max(rate / 1e9 * 1.1, ...names.flatMap((n) => sizes.map((b) => median(at(n, b, 'busbw'))).filter(Number.isFinite)));
const xOf = (b) => L + ((Math.log2(b) - Math.log2(sizes[0])) / (Math.log2(sizes[sizes.length - 1]) - Math.log2(sizes[0]) || 1)) * (W - L - R);
const yOf = (v) => H - B - (v / maxBus) * (H - T - B);
const colors = { ring: '#1f77b4', hierarchical: '#d62728', auto: '#2ca02c', openmpi: '#7f7f7f' };
const label = { ring: 'hora flat ring', hierarchical: 'hora hierarchical', auto: 'hora auto', openmpi: 'Open MPI' };
let svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">\n`;
svg += `<rect width="${W}" height="${H}" fill="white"/>\n`;
svg += `<text x="${L}" y="18" font-size="13">allreduce busbw, ${path.basename(dir).replace(/^multihost-/, '').replace(/-.*/, '')} (hosts x ranks), links ${rateText}</text>\n`;
svg += `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="black"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="black"/>\n`;
for (const b of sizes) {
  const kib = b / 1024;
  const text = kib >= 1024 ? `${kib / 1024}M` : `${kib}K`;
  svg += `<text x="${xOf(b)}" y="${H - B + 16}" text-anchor="middle">${text}</text>\n`;
}
svg += `<text x="${(L + W - R) / 2}" y="${H - 12}" text-anchor="middle">message size (bytes)</text>\n`;
for (let i = 0; i <= 5; i++) {
  const v = (maxBus * i) / 5;
  svg += `<text x="${L - 6}" y="${yOf(v) + 4}" text-anchor="end">${v.toFixed(3)}</text><line x1="${L}" y1="${yOf(v)}" x2="${W - R}" y2="${yOf(v)}" stroke="#eee"/>\n`;
}
svg += `<text transform="translate(14 ${(T + H - B) / 2}) rotate(-90)" text-anchor="middle">busbw (GB/s)</text>\n`;
svg += `<line x1="${L}" y1="${yOf(rate / 1e9)}" x2="${W - R}" y2="${yOf(rate / 1e9)}" stroke="black" stroke-dasharray="4 3"/><text x="${W - R + 4}" y="${yOf(rate / 1e9) + 4}">line rate</text>\n`;
names.forEach((n, k) => {
  const pts = sizes.map((b) => [xOf(b), yOf(median(at(n, b, 'busbw')))]).filter(([, y]) => Number.isFinite(y));
  svg += `<polyline fill="none" stroke="${colors[n] ?? '#000'}" stroke-width="2" points="${pts.map((p) => p.map((v) => v.toFixed(1)).join(',')).join(' ')}"/>\n`;
  svg += `<text x="${W - R + 4}" y="${T + 16 + k * 16}" fill="${colors[n] ?? '#000'}">${label[n] ?? n}</text>\n`;
});
svg += '</svg>\n';
fs.writeFileSync(path.join(dir, 'busbw.svg'), svg);
console.log(`plot: ${path.join(dir, 'busbw.svg')}`);
