'use strict';
// The table of bench/overlap.sh from bench/overlap-worker.js's result line: per round and the medians.
// Usage: node bench/overlap-report.js result.json
const fs = require('node:fs');

const r = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const rows = r.rounds.map(({ overlap, sync, plain }) => ({
  plain: plain.stepMs, sync: sync.stepMs, overlap: overlap.stepMs,
  exposedOff: sync.stepMs - plain.stepMs, exposedOn: overlap.stepMs - plain.stepMs,
  hidden: 1 - (overlap.stepMs - plain.stepMs) / (sync.stepMs - plain.stepMs), ratio: overlap.stepMs / sync.stepMs,
  bwdOff: sync.backwardMs, bwdOn: overlap.backwardMs, waitOff: sync.exposedMs, waitOn: overlap.exposedMs, inFlight: overlap.hiddenMs,
}));
const ms = (x) => x.toFixed(0).padStart(8);
const line = (label, g) => console.log(`${label.padStart(6)} ${ms(g('plain'))} ${ms(g('sync'))} ${ms(g('overlap'))} ${ms(g('exposedOff'))} ` +
  `${ms(g('exposedOn'))} ${g('hidden').toFixed(3).padStart(7)} ${g('ratio').toFixed(3).padStart(6)} ${ms(g('bwdOff'))} ${ms(g('bwdOn'))} ` +
  `${ms(g('waitOff'))} ${ms(g('waitOn'))}`);
const m = (k) => median(rows.map((row) => row[k]));

console.log(`${r.params} parameters, batch ${r.batch} per rank, ${r.size} ranks; one step's allreduce alone: ${r.allreduceMs.toFixed(0)} ms. ms per step:`);
console.log(' round    plain     sync  overlap  exp.off   exp.on  hidden  ratio  bwd.off   bwd.on wait.off  wait.on');
rows.forEach((row, i) => line(String(i + 1), (k) => row[k]));
line('median', m);
console.log(`allreduce alone / backward pass (overlap: false) = ${(r.allreduceMs / m('bwdOff')).toFixed(2)}; blocked after the pass: ` +
  `${m('waitOff').toFixed(0)} ms without overlap, ${m('waitOn').toFixed(0)} ms with; buckets in flight during the pass: ${m('inFlight').toFixed(0)} ms`);
