// The dashboard's page (see dashboard.ts): one HTML document with its style
// and script inline, so that it needs nothing but the launcher. The script
// fetches /stats.json every second and redraws; text from the job (collective
// names) only ever goes into the page through textContent.

export const DASHBOARD_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>hora job</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #1d232b; background: #f7f8fa; }
  h1 { font-size: 20px; margin: 0 0 4px; }
  h2 { font-size: 15px; margin: 20px 0 6px; }
  #summary { color: #44505e; }
  table { border-collapse: collapse; background: #fff; }
  th, td { border: 1px solid #d5dae1; padding: 3px 10px; text-align: right; white-space: nowrap; }
  th { background: #eceff3; font-weight: 600; }
  td.left, th.left { text-align: left; }
  tr.down td { color: #a0a8b2; }
  #stalls { white-space: pre-line; padding: 8px 12px; border-radius: 4px; background: #e6f4ea; color: #1e6b35; max-width: 900px; }
  #stalls.stalled { background: #fde8e8; color: #9b1c1c; font-weight: 600; }
  #chart { background: #fff; border: 1px solid #d5dae1; }
  #split { width: 480px; height: 22px; display: flex; border: 1px solid #d5dae1; background: #fff; }
  #split-compute, .swatch.compute { background: #3b82c4; }
  #split-comm, .swatch.comm { background: #e07b39; }
  .note { color: #44505e; font-size: 12px; max-width: 900px; }
  .legend span { display: inline-block; margin-right: 14px; }
  .swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
  #status { color: #a0a8b2; font-size: 12px; }
  .util { display: inline-block; vertical-align: middle; width: 160px; height: 12px; margin-right: 8px; background: #eceff3; }
  .util-busy { height: 100%; background: #2e9e5b; }
</style>
</head>
<body>
<h1>hora job</h1>
<div id="summary">waiting for the first report...</div>
<h2>Stalls</h2>
<div id="stalls">no stalled ranks</div>
<h2>Ranks</h2>
<table id="ranks">
  <thead><tr><th>rank</th><th class="left">state</th><th>collectives/s</th><th>messages/s</th><th>bytes/s</th><th>submitted</th><th>completed</th><th>steps</th><th>comm share</th><th class="left">oldest pending</th></tr></thead>
  <tbody></tbody>
</table>
<h2>Collectives/s per rank, last minute</h2>
<canvas id="chart" width="760" height="220"></canvas>
<div class="legend" id="legend"></div>
<h2>Bandwidth per kind of collective, and messages</h2>
<table id="kinds">
  <thead><tr><th class="left">kind</th><th>completed</th><th>bytes</th><th>algbw</th><th>busbw</th><th>algbw (last s)</th><th>busbw (last s)</th></tr></thead>
  <tbody></tbody>
</table>
<p class="note" id="kinds-note" hidden>send and recv (point-to-point messages) are counted, and their bytes are in bytes/s,
but they have no bandwidth here: a receive is in flight from the moment it is posted, its wait for the sender included.</p>
<h2>Training steps: compute and communication</h2>
<div id="split"><div id="split-compute"></div><div id="split-comm"></div></div>
<div class="legend" id="split-legend"><span><span class="swatch compute"></span>compute (everything else in a step)</span><span><span class="swatch comm"></span>communication: waiting for collectives and for messages (send, recv)</span></div>
<div id="split-text">no steps reported yet</div>
<div id="pipeline-panel" hidden>
<h2>Pipeline</h2>
<table id="pipeline">
  <thead><tr><th>stage</th><th class="left">ranks</th><th>batches</th><th class="left">utilization</th><th>bubble</th><th>weights</th><th>peak stash</th></tr></thead>
  <tbody></tbody>
</table>
<div id="pipeline-text"></div>
</div>
<p id="status"></p>
<script>
'use strict';
const COLORS = ['#3b82c4', '#e07b39', '#2e9e5b', '#c23b3b', '#8a5cc2', '#8c6d31', '#d45fa8', '#5f6b7a'];
const $ = (id) => document.getElementById(id);

function si(v, unit) {
  if (v === null || v === undefined || !isFinite(v)) return '-';
  const steps = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
  for (const [f, p] of steps) if (Math.abs(v) >= f) return (v / f).toFixed(2) + ' ' + p + unit;
  return (Math.abs(v) >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(1)) + ' ' + unit;
}
const rate = (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(1));
const pct = (v) => (v === null || v === undefined ? '-' : (100 * v).toFixed(0) + '%');

function row(cells, attrs) {
  const tr = document.createElement('tr');
  for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, v);
  for (const c of cells) {
    const td = document.createElement('td');
    td.textContent = c.text;
    if (c.field) td.dataset.field = c.field;
    if (c.left) td.className = 'left';
    tr.appendChild(td);
  }
  return tr;
}

function rankList(ranks) {
  return (ranks.length === 1 ? 'rank ' : 'ranks ') + ranks.join(', ');
}

function render(s) {
  $('summary').textContent = 'ranks up ' + s.ranksUp + '/' + s.size + ' \\u2022 ' + rate(s.collectivesPerS) +
    ' collectives/s \\u2022 ' + (s.messages > 0 ? rate(s.messagesPerS) + ' messages/s \\u2022 ' : '') + si(s.bytesPerS, 'B/s');
  const stalls = $('stalls');
  if (s.stalls.length === 0) {
    stalls.className = '';
    stalls.textContent = 'no stalled ranks';
  } else {
    stalls.className = 'stalled';
    stalls.textContent = s.stalls.map((x) => rankList(x.missing) + (x.missing.length === 1 ? ' has' : ' have') +
      ' not submitted ' + x.kind + (x.name ? " '" + x.name + "'" : '') + ' (#' + x.seq + ')' +
      (x.submittedBy.length ? ' that ' + rankList(x.submittedBy) + ' submitted ' + Math.round(x.ageMs / 1000) + ' s ago' : '')).join('\\n');
  }
  const stalled = new Set(s.stalls.flatMap((x) => x.missing));
  const tbody = $('ranks').tBodies[0];
  tbody.replaceChildren(...s.ranks.map((r) => {
    const state = !r.up ? 'gone' : stalled.has(r.rank) ? 'STALLED' : r.reportAgeMs === null ? 'no report yet' : r.reportAgeMs > 3000 ? 'silent ' + Math.round(r.reportAgeMs / 1000) + ' s' : 'up';
    const p = r.pending[0];
    const tr = row([
      { text: String(r.rank), field: 'rank' },
      { text: state, field: 'state', left: true },
      { text: rate(r.collectivesPerS), field: 'collectivesPerS' },
      { text: rate(r.messagesPerS), field: 'messagesPerS' },
      { text: si(r.bytesPerS, 'B/s'), field: 'bytesPerS' },
      { text: String(r.submitted), field: 'submitted' },
      { text: String(r.completed), field: 'completed' },
      { text: String(r.steps), field: 'steps' },
      { text: r.stepS > 0 ? pct(r.commWaitS / r.stepS) : '-', field: 'commShare' },
      { text: p ? p.kind + (p.name ? " '" + p.name + "'" : '') + ' #' + p.seq + ', ' + (p.ageMs / 1000).toFixed(1) + ' s' : '-', field: 'pending', left: true },
    ], { 'data-rank': String(r.rank) });
    if (!r.up) tr.className = 'down';
    return tr;
  }));
  const kinds = $('kinds').tBodies[0];
  kinds.replaceChildren(...s.kinds.map((k) => row([
    { text: k.kind, field: 'kind', left: true },
    { text: String(k.count), field: 'count' },
    { text: si(k.bytes, 'B'), field: 'bytes' },
    { text: si(k.algbw, 'B/s'), field: 'algbw' },
    { text: si(k.busbw, 'B/s'), field: 'busbw' },
    { text: si(k.recentAlgbw, 'B/s'), field: 'recentAlgbw' },
    { text: si(k.recentBusbw, 'B/s'), field: 'recentBusbw' },
  ], { 'data-kind': k.kind })));
  $('kinds-note').hidden = !s.kinds.some((k) => k.kind === 'send' || k.kind === 'recv');
  const st = s.steps;
  if (st.count > 0 && st.stepS > 0) {
    const comm = st.commShare === null ? st.commWaitS / st.stepS : st.commShare;
    $('split-compute').style.width = (100 * (1 - comm)).toFixed(1) + '%';
    $('split-comm').style.width = (100 * comm).toFixed(1) + '%';
    $('split-text').textContent = st.count + ' steps over all ranks: compute ' + pct(1 - comm) + ', communication ' + pct(comm) +
      ' (since the start: ' + st.computeS.toFixed(1) + ' s compute, ' + st.commWaitS.toFixed(1) + ' s waiting for collectives and messages)';
  }
  renderPipeline(s.pipeline);
  drawChart(s);
  $('status').textContent = 'updated ' + new Date(s.timeMs).toLocaleTimeString();
}

// One row per stage: busy / wall time of its recent batches as a bar, averaged over its replicas.
function renderPipeline(p) {
  $('pipeline-panel').hidden = !p;
  if (!p) return;
  $('pipeline-text').textContent = p.stages + (p.stages === 1 ? ' stage' : ' stages') + ' x ' + p.replicas +
    (p.replicas === 1 ? ' replica' : ' replicas') + '; utilization is the time a stage computed over the time of its batches';
  $('pipeline').tBodies[0].replaceChildren(...p.byStage.map((st) => {
    const tr = row([
      { text: String(st.stage), field: 'stage' },
      { text: st.ranks.length ? st.ranks.join(', ') : 'no report', field: 'ranks', left: true },
      { text: String(st.batches), field: 'batches' },
      { text: pct(st.utilization), field: 'utilization', left: true },
      { text: pct(st.bubble), field: 'bubble' },
      { text: si(st.weightBytes, 'B'), field: 'weightBytes' },
      { text: si(st.peakStashBytes, 'B'), field: 'peakStashBytes' },
    ], { 'data-stage': String(st.stage) });
    const bar = document.createElement('span');
    bar.className = 'util';
    const busy = document.createElement('div');
    busy.className = 'util-busy';
    busy.style.width = (100 * (st.utilization || 0)).toFixed(1) + '%';
    bar.appendChild(busy);
    tr.querySelector('td[data-field=utilization]').prepend(bar);
    return tr;
  }));
}

function drawChart(s) {
  const c = $('chart');
  const g = c.getContext('2d');
  const W = c.width, H = c.height, L = 56, B = 24, T = 10, R = 10;
  g.clearRect(0, 0, W, H);
  const t1 = s.timeMs, t0 = t1 - 60000;
  let max = 1;
  for (const r of s.ranks) for (const h of r.history) if (h[0] >= t0) max = Math.max(max, h[1]);
  max *= 1.1;
  g.strokeStyle = '#d5dae1';
  g.fillStyle = '#44505e';
  g.font = '11px system-ui, sans-serif';
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = T + (H - T - B) * (1 - i / 4);
    g.beginPath(); g.moveTo(L, y); g.lineTo(W - R, y); g.stroke();
    g.fillText(rate(max * i / 4), 4, y + 4);
  }
  for (let sec = 60; sec >= 0; sec -= 15) g.fillText(sec === 0 ? 'now' : '-' + sec + ' s', L + (W - L - R) * (1 - sec / 60) - 12, H - 6);
  const legend = [];
  s.ranks.slice(0, 32).forEach((r, i) => {
    const color = COLORS[i % COLORS.length];
    legend.push([r.rank, color]);
    const pts = r.history.filter((h) => h[0] >= t0);
    if (pts.length === 0) return;
    g.strokeStyle = color;
    g.lineWidth = 2;
    g.beginPath();
    pts.forEach((h, j) => {
      const x = L + (W - L - R) * (h[0] - t0) / 60000;
      const y = T + (H - T - B) * (1 - h[1] / max);
      if (j === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
  });
  $('legend').replaceChildren(...legend.map(([rank, color]) => {
    const span = document.createElement('span');
    const sw = document.createElement('span');
    sw.className = 'swatch';
    sw.style.background = color;
    span.append(sw, 'rank ' + rank);
    return span;
  }));
}

async function tick() {
  try {
    const res = await fetch('stats.json', { cache: 'no-store' });
    if (!res.ok) throw new Error('HTTP ' + res.status);
    render(await res.json());
  } catch (e) {
    $('status').textContent = 'no data (' + e.message + '); the job may have ended';
  }
}
tick();
setInterval(tick, 1000);
</script>
</body>
</html>
`;
