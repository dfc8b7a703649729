// HORA_TIMELINE / hora run --timeline: every rank records every collective with its phases, and the
// launcher merges the ranks' files into one Chrome trace.
const t = require('tap');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { runJob, runProcess, tail, HORA } = require('./support/hora-job');
const { mergeTimelines, rankTimelinePath } = require('../dist/ts/timeline.js');

const WORKER = path.join(__dirname, 'workers', 'timeline-worker.js');

/** Events of a trace file in either form; a bare array may lack its closing bracket. */
function readTrace(file) {
  let text = fs.readFileSync(file, 'utf8').trim();
  if (text.startsWith('[') && !text.endsWith(']')) text += ']';
  const parsed = JSON.parse(text);
  return Array.isArray(parsed) ? parsed : parsed.traceEvents;
}

const within = (child, parent) => child.ts >= parent.ts && child.ts + child.dur <= parent.ts + parent.dur + 1e-6;

/** Checks one rank's events against what its worker issued. */
function checkRank(t, events, rank, report) {
  const mine = events.filter((e) => e.pid === rank);
  const processName = mine.find((e) => e.ph === 'M' && e.name === 'process_name');
  t.match(processName && processName.args.name, new RegExp(`^rank ${rank} \\(.+\\)$`), `rank ${rank}: process name`);
  t.ok(mine.some((e) => e.ph === 'M' && e.name === 'thread_name' && e.args.name === 'collectives'), `rank ${rank}: thread names`);

  const slices = mine.filter((e) => e.ph === 'X');
  for (const e of slices) t.ok(e.dur >= 0 && Number.isFinite(e.ts), `rank ${rank}: ${e.name} has a non-negative duration`);
  const collectives = slices.filter((e) => e.cat === 'collective');
  t.equal(collectives.length, report.issued.length, `rank ${rank}: one top slice per collective issued`);
  t.same(collectives.map((e) => ({ kind: e.args.kind, name: e.args.name || '' })), report.issued, `rank ${rank}: in the order issued`);

  // Each phase lies inside exactly the top slice of its lane that covers it; top slices on a lane never overlap.
  const phases = slices.filter((e) => e.cat === 'phase');
  const byLane = new Map();
  for (const c of collectives) byLane.set(c.tid, [...(byLane.get(c.tid) || []), c]);
  for (const lane of byLane.values()) {
    lane.sort((a, b) => a.ts - b.ts);
    for (let i = 1; i < lane.length; i++) t.ok(lane[i].ts >= lane[i - 1].ts + lane[i - 1].dur, `rank ${rank}: no overlap on lane`);
  }
  const phasesOf = new Map(collectives.map((c) => [c, []]));
  for (const p of phases) {
    const parents = (byLane.get(p.tid) || []).filter((c) => within(p, c));
    t.equal(parents.length, 1, `rank ${rank}: phase ${p.name} at ${p.ts} nests in one collective`);
    if (parents.length === 1) phasesOf.get(parents[0]).push(p);
  }
  for (const [c, ps] of phasesOf) {
    const names = ps.map((p) => p.name);
    t.ok(names.includes('queued'), `rank ${rank}: ${c.name} has queued`);
    t.ok(names.some((n) => n.startsWith('negotiate')), `rank ${rank}: ${c.name} has negotiate`);
    if (c.args.kind !== 'barrier' && !names.includes('negotiate + transfer')) t.ok(names.includes('transfer'), `rank ${rank}: ${c.name} has transfer`);
    const reduce = ps.find((p) => p.name === 'reduce (sum of kernels)');
    if (reduce) {
      const holder = ps.find((p) => p !== reduce && (p.name === 'transfer' || p.name === 'negotiate + transfer') && within(reduce, p));
      t.ok(holder, `rank ${rank}: ${c.name}: the reduce slice lies in the phase that moved the data`);
    }
    if (c.args.fused_with !== undefined) {
      t.ok(names.includes('copy in') && names.includes('copy out'), `rank ${rank}: fused ${c.name} has copy in and copy out`);
    }
  }
  const fused = collectives.filter((c) => c.args.fused_with !== undefined);
  t.equal(fused.length, 3, `rank ${rank}: the three small allreduces were fused`);
  const big = collectives.find((c) => c.args.name === 'big');
  t.equal(big.args.bytes, 4 << 20, `rank ${rank}: bytes of the large allreduce`);
  t.ok(phasesOf.get(big).some((p) => p.name === 'reduce (sum of kernels)'), `rank ${rank}: the large allreduce shows its reduction time`);
  t.ok(slices.some((e) => e.cat === 'engine' && e.name === 'fused ×3'), `rank ${rank}: engine track shows the fusion group`);
}

t.test('hora run --timeline: one merged trace of both ranks', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-timeline-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'trace.json');
  const job = await runJob(2, WORKER, { launcherArgs: ['--timeline', file], timeoutMs: 90000 });
  t.equal(job.code, 0, `hora run exits 0 (${tail(job)})`);
  t.match(job.stderr, /timeline of 2 rank\(s\), \d+ events, written to/);
  t.same(fs.readdirSync(dir), ['trace.json'], 'the rank files are merged and removed');
  const events = readTrace(file);
  for (const [rank, report] of job.reports.entries()) {
    t.ok(report, `rank ${rank} reported`);
    if (!report) continue;
    t.same(report.ok, report.ok.map(() => true), `rank ${rank}: results are right with the timeline on`);
    const c = report.clockCheck;
    t.ok(c.hr <= c.mono && c.mono <= c.hr2, `rank ${rank}: the engine clock is process.hrtime's (${JSON.stringify(c)})`);
    checkRank(t, events, rank, report);
  }
});

t.test('a failed job still gets its merged trace, including what a killed rank wrote', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-timeline-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'trace.json');
  const job = await runJob(2, WORKER, { launcherArgs: ['--timeline', file, '--grace', '1'], env: { TIMELINE_CRASH: '1' }, timeoutMs: 90000 });
  t.not(job.code, 0, 'the job fails');
  t.match(job.stderr, /timeline of 2 rank\(s\)/);
  const events = readTrace(file);
  for (const rank of [0, 1]) {
    t.ok(events.some((e) => e.pid === rank && e.name === 'process_name'), `rank ${rank}: process name`);
    const names = events.filter((e) => e.pid === rank && e.cat === 'collective').map((e) => e.args.name);
    t.same(names.slice(0, 3), ['g/a', 'g/b', 'g/c'], `rank ${rank}: the collectives before the crash are there`);
  }
  const failed = events.find((e) => e.pid === 0 && e.cat === 'collective' && e.args.name === 'big');
  t.ok(failed && failed.args.status !== 'ok', 'rank 0 records the collective that failed, with its error code');
});

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

t.test('without the launcher each rank writes FILE with its rank inserted', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-timeline-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'trace.json');
  const port = await freePort();
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HORA_')));
  const runs = await Promise.all([0, 1].map((rank) => runProcess([WORKER], {
    ...clean, RANK: String(rank), WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port),
    HORA_TIMELINE: file, HORA_TEST_RESULT_DIR: dir, HORA_TIMEOUT_S: '60',
  }, 90000)));
  for (const [rank, run] of runs.entries()) t.equal(run.code, 0, `rank ${rank} exits 0 (${run.stderr.slice(-2000)})`);
  t.equal(rankTimelinePath(file, 1), path.join(dir, 'trace.rank1.json'));
  t.equal(rankTimelinePath('/x/trace', 3), '/x/trace.rank3');
  t.notOk(fs.existsSync(file), 'nobody merges without the launcher');
  const reports = [0, 1].map((rank) => JSON.parse(fs.readFileSync(path.join(dir, `rank-${rank}.json`), 'utf8')));
  for (const rank of [0, 1]) {
    const part = rankTimelinePath(file, rank);
    const text = fs.readFileSync(part, 'utf8');
    t.ok(text.trimEnd().endsWith(']'), `rank ${rank}: a clean exit terminates the array`);
    checkRank(t, JSON.parse(text), rank, reports[rank]);
  }
  const merge = await runProcess([HORA, 'timeline', file, '-np', '2'], process.env);
  t.equal(merge.code, 0, `hora timeline exits 0 (${merge.stderr})`);
  const merged = readTrace(file);
  for (const rank of [0, 1]) checkRank(t, merged, rank, reports[rank]);
  t.notOk(fs.existsSync(rankTimelinePath(file, 0)), 'hora timeline removes the rank files it merged');
});

t.test('merging tolerates a rank file cut short by a crash, and names missing ranks', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-timeline-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'trace.json');
  const base = 1763700000000000;
  const meta = (rank) => JSON.stringify({ name: 'process_name', ph: 'M', pid: rank, tid: 0, args: { name: `rank ${rank} (h)`, clock_base_us: base + rank * 1e9 } });
  const slice = (rank) => JSON.stringify({ name: 'allreduce', cat: 'collective', ph: 'X', pid: rank, tid: 1, ts: 10, dur: 5 });
  fs.writeFileSync(rankTimelinePath(file, 0), `[\n${meta(0)}\n,${slice(0)}\n]\n`);
  fs.writeFileSync(rankTimelinePath(file, 1), `[\n${meta(1)}\n,${slice(1)}\n,{"name":"allre`);
  const result = await mergeTimelines(file, 3);
  t.same(result, { merged: [0, 1], missing: [2], events: 4 });
  const merged = JSON.parse(fs.readFileSync(file, 'utf8'));
  t.equal(merged.traceEvents.length, 4, 'the partial last line is dropped');
  const ts = merged.traceEvents.filter((e) => e.ph === 'X').map((e) => e.ts);
  t.same(ts, [10, 10 + 1e9], 'ranks with different clock bases are shifted to the earliest');
  t.equal(merged.otherData.clock_base_us, base);
  t.same(merged.otherData.missing_ranks, [2]);
  t.same(fs.readdirSync(dir), ['trace.json'], 'merged rank files are removed');
});
