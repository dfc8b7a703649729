'use strict';
// Summarises bench/gpu/latency.js lines (bench/gpu/device-check.sh's latency.jsonl): per transport, ranks,
// mode and size, the median microseconds per call of each label, new/base as the median and the lowest of
// the per-round ratios (rounds paired in order), and the host-array time and the copies of the same size.
const fs = require('node:fs');

const rows = fs.readFileSync(process.argv[2], 'utf8').split('\n').map((l) => l.replace(/^\[\d+\] /, '')).filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length === 0 ? NaN : s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const size = (b) => (b >= 1 << 20 ? `${b / (1 << 20)}M` : `${b / 1024}K`);
const groups = new Map();
for (const r of rows) {
  const key = `${r.transport}|${r.ranks}|${r.mode}|${r.bytes}`;
  if (!groups.has(key)) groups.set(key, { r, by: {} });
  const g = groups.get(key);
  (g.by[r.label] ||= []).push(r);
}
const labels = [...new Set(rows.map((r) => r.label))].filter((l) => l !== 'base' && l !== 'new');
console.log(['path', 'np', 'mode', 'size', 'base us', 'new us', 'new/base med', 'new/base low', 'host us', 'copy both us', ...labels].join('\t'));
for (const { r, by } of groups.values()) {
  const b = by.base || [], n = by.new || [];
  const ratios = [];
  for (let i = 0; i < Math.min(b.length, n.length); i++) ratios.push(n[i].device_us / b[i].device_us);
  const host = [...b, ...n].map((x) => x.host_us).filter((x) => x !== null);
  const copy = [...b, ...n].map((x) => x.copy_both_ways_us).filter((x) => x !== null);
  const f = (x) => (Number.isFinite(x) ? x.toFixed(x < 10 ? 2 : 1) : '-');
  console.log([r.transport === 'tcp' ? 'staged' : 'ipc', r.ranks, r.mode, size(r.bytes),
    f(median(b.map((x) => x.device_us))), f(median(n.map((x) => x.device_us))), f(median(ratios)), f(Math.min(...ratios)),
    f(median(host)), f(median(copy)), ...labels.map((l) => f(median((by[l] || []).map((x) => x.device_us))))].join('\t'));
}
