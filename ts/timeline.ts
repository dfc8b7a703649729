/**
 * The timeline (HORA_TIMELINE): a Chrome trace of every collective this rank ran, for chrome://tracing
 * and Perfetto, and the merge of the ranks' files into one (done by `hora run`).
 *
 * File format: the trace event format's bare JSON array, one event a line, written as the job runs so a
 * crash leaves a readable file. The first line is "[", every event after the first starts with ",", and a
 * clean close adds "]". A file cut short by a crash is therefore missing only its "]" (and at worst a
 * last partial line, which the merge drops); the trace event format makes the closing bracket optional.
 * The merged file is complete JSON in the object form ({"traceEvents": [...]}).
 *
 * Layout, per rank (pid = rank, process "rank N (host)"):
 *   tid 0 "engine"                      what the communication thread ran, one slice per collective or per
 *                                       fusion group, back to back: where the engine was busy or idle
 *   tid 1.. "collectives", "collectives (2)", ...
 *                                       one top slice per collective from the JS call to completion, with
 *                                       its phases as children. Collectives submitted together are in
 *                                       flight at the same time, so each goes on the first lane that is
 *                                       free at its call: slices on one lane never overlap.
 * Phases (children of a collective, in order; absent when they did not happen):
 *   queued      from the JS call until the engine took it (args split it into time in the JS batch and in
 *               the engine's queue)
 *   copy in     fused only: this tensor's copy into the fusion buffer
 *   negotiate   the cross-rank agreement (engine/agreement.h); it also waits for the slowest rank. For
 *               small allreduces the data rides along with it: then it is "negotiate + transfer" and no
 *               transfer slice follows
 *   transfer    the collective algorithm moving (and reducing) the data
 *   reduce (sum of kernels)
 *               nested in the phase that moved the data. Reduction kernels run inside the progress loop
 *               in many short calls interleaved with the receives, so there is no single reduce interval:
 *               this slice is as long as their summed time, drawn from the start of its parent. It shows
 *               the share of the phase spent reducing, not when; args give the number of kernel calls.
 *   copy out    fused only: this tensor's copy back out of the fusion buffer
 *
 * Time: the engine stamps phases on the monotonic clock (CLOCK_MONOTONIC, the clock of process.hrtime,
 * shared by all processes of a machine); the writer shifts them to wall-clock time with an offset read at
 * start-up (native clocks()). Ranks on one machine therefore line up to a microsecond or so; ranks on
 * different machines line up as well as their wall clocks agree (NTP: typically well under a millisecond
 * on a LAN, more without it). `ts` is microseconds since a base, a wall-clock time on a 1000 s grid that
 * the rank's process_name event carries as args.clock_base_us: small numbers format fast and keep
 * nanosecond digits, where full Unix-epoch microseconds would not fit a double's precision below 0.25 us.
 * The merge shifts every rank to the earliest base.
 *
 * Cost: per collective the engine reads the clock a dozen times and keeps a record; the JS side notes
 * the call. A timer collects the records every 250 ms and formats and writes them.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import {
  DTYPE_BYTES, DTYPE_NAMES, itemBytes, KIND_NAMES, NativeDType, NativeItem, NativeKind, NativeOp, OP_NAMES,
  TimelineColumn as C, valuesOf,
} from './native';

/** The engine's names of the kinds (the slices' names), the dtypes and the ops, by value. */
const KINDS: readonly string[] = valuesOf(KIND_NAMES, (k) => k.engine);
const DTYPES: readonly string[] = valuesOf(DTYPE_NAMES);
const OPS: readonly string[] = valuesOf(OP_NAMES);
const FLUSH_BYTES = 64 * 1024;
const FLUSH_INTERVAL_MS = 250;
const BASE_GRID_US = 1e9;
/** The lane of the slices adapters draw (the backward pass), below every collectives lane. */
const TRAINING_TID = 1000;

/** What the JS side knows of a call, taken when it is made. */
interface Call {
  /** process.hrtime of the call, nanoseconds. */
  calledNs: number;
  kind: NativeKind;
  op: NativeOp;
  dtype: NativeDType;
  root: number;
  name: string;
  bytes: number;
  /** send, recv: the other rank and the tag. */
  peer?: number;
  tag?: number;
  /** A process group's collective: the group's id (then seq counts that group's collectives). */
  group?: number;
}

/** The engine's record of a completed call: its row in a takeTimeline() result, and that result's strings. */
interface Completed {
  call: Call;
  row: Float64Array;
  strings: string[];
}

export type TakeTimeline = () => { rows: Float64Array; strings: string[] };

/** The file a rank writes for HORA_TIMELINE=FILE: trace.json -> trace.rank3.json, trace -> trace.rank3. */
export function rankTimelinePath(file: string, rank: number): string {
  const ext = path.extname(file);
  return ext ? `${file.slice(0, -ext.length)}.rank${rank}${ext}` : `${file}.rank${rank}`;
}

/**
 * Starts this rank's timeline file for HORA_TIMELINE=file, or says why it cannot and returns null: a
 * training job goes on without its trace rather than fail.
 */
export function openTimeline(file: string, rank: number, clocks: [number, number], take: TakeTimeline, who = `rank ${rank}`): TimelineWriter | null {
  const target = rankTimelinePath(file, rank);
  try {
    return new TimelineWriter(target, rank, os.hostname(), clocks, take, who);
  } catch (e) {
    process.stderr.write(`hora: ${who}: cannot write the timeline to ${target}: ${(e as Error).message}; going on without it\n`);
    return null;
  }
}

/**
 * Writes one rank's file. Per collective, the JS side only notes the call (called()); the engine keeps
 * the phase times of completed works, and a timer collects them in bulk every 250 ms, formats and writes
 * them: nothing of this runs between one collective and the next.
 */
export class TimelineWriter {
  private fd: number | null;
  private buffer = '';
  private wroteEvent = false;
  /** Calls not yet collected, by work id. */
  private calls = new Map<number, Call>();
  /** Monotonic nanoseconds / 1000 + this = microseconds since the base. */
  private readonly toBaseUs: number;
  /** Per collectives lane (tid lane + 1): when its last slice ends, microseconds. */
  private laneEnds: number[] = [];
  /** The fusion group being collected for the engine track. */
  private group: Completed[] = [];
  private timer: NodeJS.Timeout;
  private readonly closeOnExit = () => this.close();
  private trainingLaneNamed = false;

  /**
   * Opens `file` (truncating it) and writes the process and thread names. clocks is native clocks():
   * [monotonic nanoseconds now, wall clock minus monotonic in microseconds]; take collects completed works.
   */
  constructor(readonly file: string, private readonly rank: number, host: string, clocks: [number, number],
    private take: TakeTimeline, private readonly who = `rank ${rank}`) {
    const [monotonicNs, wallMinusMonotonicUs] = clocks;
    const base = Math.floor((monotonicNs / 1000 + wallMinusMonotonicUs) / BASE_GRID_US) * BASE_GRID_US;
    this.toBaseUs = wallMinusMonotonicUs - base;
    this.fd = fs.openSync(file, 'w');
    fs.writeSync(this.fd, '[\n');
    this.emit({ name: 'process_name', ph: 'M', pid: rank, tid: 0, args: { name: `${who} (${host})`, clock_base_us: base } });
    this.emit({ name: 'process_sort_index', ph: 'M', pid: rank, tid: 0, args: { sort_index: rank } });
    this.nameThread(0, 'engine');
    this.writeOut();
    this.timer = setInterval(() => this.flush(), FLUSH_INTERVAL_MS);
    this.timer.unref();
    process.once('exit', this.closeOnExit);
  }

  /** Notes a call as it is made (the Dispatcher, with the id the engine will report it under). */
  called(id: number, item: Omit<NativeItem, 'id'>): void {
    if (this.fd === null) return;
    this.calls.set(id, {
      calledNs: Number(process.hrtime.bigint()), kind: item.kind, op: item.op, dtype: item.dtype, root: item.root,
      name: item.name, bytes: itemBytes(item), peer: item.peer, tag: item.tag, group: item.group || undefined,
    });
  }

  /**
   * A slice of the training step that an adapter draws on the "training" lane (hora/tfjs: the backward
   * pass, so each bucket's allreduce shows against it). Times are process.hrtime nanoseconds.
   */
  span(name: string, startNs: number, endNs: number, args?: object): void {
    if (this.fd === null) return;
    if (!this.trainingLaneNamed) {
      this.nameThread(TRAINING_TID, 'training');
      this.trainingLaneNamed = true;
    }
    this.slice(TRAINING_TID, name, 'training', startNs, endNs, args);
  }

  /**
   * Elastic jobs: one file per worker across the worlds it is in. Called when the worker's new world has
   * its communicator: calls of the last world still open (their world ended under them) become slices up
   * to now, an instant marks the new world, and completed works are taken from the new communicator.
   * The last world's completed works must have been flushed before its communicator closed.
   */
  nextWorld(take: TakeTimeline, world: { generation: number; rank: number; size: number }): void {
    if (this.fd === null) return;
    this.endOpenCalls('the world ended under it');
    this.take = take;
    const now = Number(process.hrtime.bigint());
    this.buffer += `${this.wroteEvent ? ',' : ''}{"name":"world ${world.generation}: rank ${world.rank} of ${world.size}","cat":"elastic",` +
      `"ph":"i","s":"p","pid":${this.rank},"tid":0,"ts":${this.us(now).toFixed(3)},"args":${JSON.stringify(world)}}\n`;
    this.wroteEvent = true;
    this.writeOut();
  }

  /** Collects what the engine completed, formats it and writes it to the file. */
  flush(): void {
    if (this.fd === null) return;
    let taken: { rows: Float64Array; strings: string[] };
    try {
      taken = this.take();
    } catch {
      return; // the communicator is closed: nothing more will come
    }
    const { rows, strings } = taken;
    // Rows come in completion order, which is the order of the calls (one queue per communicator).
    for (let at = 0; at < rows.length; at += C.Columns) {
      const row = rows.subarray(at, at + C.Columns);
      const call = this.calls.get(row[C.Id]);
      if (!call) continue; // not a collective (the connect work)
      this.calls.delete(row[C.Id]);
      this.write({ call, row, strings });
      if (this.buffer.length >= FLUSH_BYTES) this.writeOut();
    }
    this.writeOut();
  }

  /**
   * Writes what the engine completed, and calls still outstanding as slices up to now; terminates the
   * array and closes the file. Idempotent.
   */
  close(): void {
    if (this.fd === null) return;
    this.flush();
    this.endOpenCalls('not completed when the timeline closed');
    this.buffer += '\n]\n';
    this.writeOut();
    this.stop();
  }

  // Calls noted but not completed: slices from the call to now, with why they end there.
  private endOpenCalls(status: string): void {
    this.endGroup();
    const now = Number(process.hrtime.bigint());
    for (const call of this.calls.values()) {
      const tid = this.lane(call.calledNs, now);
      this.slice(tid, sliceName(call), 'collective', call.calledNs, now, { ...this.callArgs(call), status });
    }
    this.calls.clear();
  }

  private writeOut(): void {
    if (this.fd === null || this.buffer === '') return;
    const text = this.buffer;
    this.buffer = '';
    try {
      fs.writeSync(this.fd, text);
    } catch (e) {
      process.stderr.write(`hora: ${this.who}: stopped writing the timeline ${this.file}: ${(e as Error).message}\n`);
      this.stop();
    }
  }

  private stop(): void {
    clearInterval(this.timer);
    process.off('exit', this.closeOnExit);
    if (this.fd !== null) {
      try { fs.closeSync(this.fd); } catch { /* already gone */ }
    }
    this.fd = null;
  }

  private emit(e: Record<string, unknown>): void {
    this.buffer += (this.wroteEvent ? ',' : '') + JSON.stringify(e) + '\n';
    this.wroteEvent = true;
  }

  private nameThread(tid: number, name: string): void {
    this.emit({ name: 'thread_name', ph: 'M', pid: this.rank, tid, args: { name } });
    this.emit({ name: 'thread_sort_index', ph: 'M', pid: this.rank, tid, args: { sort_index: tid } });
  }

  private us(monotonicNs: number): number {
    return monotonicNs / 1000 + this.toBaseUs;
  }

  // Written by hand rather than with JSON.stringify: this runs for every phase of every collective.
  private slice(tid: number, name: string, cat: string, startNs: number, endNs: number, args?: object): void {
    // Both ends rounded to nanoseconds the same way, so a child never pokes out of its parent.
    const from = Math.round(this.us(startNs) * 1000);
    const to = Math.max(from, Math.round(this.us(endNs) * 1000));
    this.buffer += `${this.wroteEvent ? ',' : ''}{"name":${JSON.stringify(name)},"cat":"${cat}","ph":"X","pid":${this.rank},` +
      `"tid":${tid},"ts":${(from / 1000).toFixed(3)},"dur":${((to - from) / 1000).toFixed(3)}` +
      `${args ? `,"args":${JSON.stringify(args)}` : ''}}\n`;
    this.wroteEvent = true;
  }

  /** The first collectives lane free at startNs; it is then taken until endNs. Returns its tid. */
  private lane(startNs: number, endNs: number): number {
    const start = this.us(startNs);
    let lane = this.laneEnds.findIndex((end) => end <= start);
    if (lane < 0) {
      lane = this.laneEnds.length;
      this.laneEnds.push(0);
      this.nameThread(lane + 1, lane === 0 ? 'collectives' : `collectives (${lane + 1})`);
    }
    this.laneEnds[lane] = this.us(endNs);
    return lane + 1;
  }

  private callArgs(call: Call): Record<string, unknown> {
    const args: Record<string, unknown> = { kind: KINDS[call.kind] ?? String(call.kind) };
    if (call.name) args.name = call.name;
    if (call.kind === NativeKind.Allreduce || call.kind === NativeKind.ReduceScatter || call.kind === NativeKind.Reduce) args.op = OPS[call.op];
    if (call.kind !== NativeKind.Barrier && call.kind !== NativeKind.Invalid && call.kind !== NativeKind.Join) {
      args.dtype = DTYPES[call.dtype];
      args.count = call.bytes / (DTYPE_BYTES[call.dtype] ?? 1);
      args.bytes = call.bytes;
    }
    if (call.kind === NativeKind.Broadcast || call.kind === NativeKind.Reduce || call.kind === NativeKind.Gather) args.root = call.root;
    if (call.kind === NativeKind.Send) args.to = call.peer;
    if (call.kind === NativeKind.Recv) args.from = call.peer;
    if (call.kind === NativeKind.Send || call.kind === NativeKind.Recv) args.tag = call.tag;
    if (call.group) args.group = call.group;
    return args;
  }

  private write(c: Completed): void {
    const { call, row: t, strings } = c;
    const done = t[C.Done];
    const title = sliceName(call);
    const fused = t[C.FusedTensors];
    const algorithm = t[C.Algorithm] >= 0 ? strings[t[C.Algorithm]] : undefined;
    const tid = this.lane(call.calledNs, done);

    const args = this.callArgs(call);
    if (algorithm) args.algorithm = algorithm;
    if (fused > 0) args.fused_with = fused - 1;
    args.seq = t[C.Seq];
    args.status = t[C.Code] >= 0 ? strings[t[C.Code]] : 'ok';
    if (t[C.Message] >= 0) args.error = strings[t[C.Message]];
    this.slice(tid, title, 'collective', call.calledNs, done, args);

    const started = t[C.Started];
    this.slice(tid, 'queued', 'phase', call.calledNs, started || done, {
      in_js_batch_us: t[C.Enqueued] ? (t[C.Enqueued] - call.calledNs) / 1000 : undefined,
      in_engine_queue_us: started && t[C.Enqueued] ? (started - t[C.Enqueued]) / 1000 : undefined,
    });
    if (t[C.CopyInStart]) this.slice(tid, 'copy in', 'phase', t[C.CopyInStart], t[C.CopyInEnd] || done, { bytes: call.bytes });
    const reduces = call.kind === NativeKind.Allreduce || call.kind === NativeKind.ReduceScatter || call.kind === NativeKind.Reduce;
    const reduce = !reduces ? undefined : {
      reduce_us: t[C.ReduceNanos] / 1000, reduce_calls: t[C.ReduceCalls],
      ...(fused > 0 ? { of: `the fusion group of ${fused} tensors` } : {}),
    };
    const rodeAlong = algorithm === 'agreement';
    if (t[C.NegotiateStart]) {
      const end = t[C.NegotiateEnd] || done;
      this.slice(tid, rodeAlong ? 'negotiate + transfer' : 'negotiate', 'phase', t[C.NegotiateStart], end, rodeAlong ? reduce : undefined);
      if (rodeAlong) this.reduceSlice(tid, t, t[C.NegotiateStart], end);
    }
    if (t[C.TransferEnd] && t[C.NegotiateEnd]) {
      const transferArgs = algorithm || reduce ? { ...(algorithm ? { algorithm } : {}), ...reduce } : undefined;
      this.slice(tid, 'transfer', 'phase', t[C.NegotiateEnd], t[C.TransferEnd], transferArgs);
      this.reduceSlice(tid, t, t[C.NegotiateEnd], t[C.TransferEnd]);
    }
    if (t[C.CopyOutStart]) this.slice(tid, 'copy out', 'phase', t[C.CopyOutStart], t[C.CopyOutEnd] || done, { bytes: call.bytes });

    // The engine track: one slice per fusion group, or per collective.
    if (!started) return;
    if (this.group.length > 0) {
      const g = this.group[0].row;
      if (g[C.Seq] !== t[C.Seq] || g[C.Started] !== started) this.endGroup();
    }
    if (fused > 0) {
      // The row is a view into a buffer shared with the rest of this collection: keep a copy.
      this.group.push({ ...c, row: t.slice() });
      if (this.group.length === fused) this.endGroup();
      return;
    }
    this.slice(0, title, 'engine', started, done, { seq: t[C.Seq] });
  }

  /** See the file comment: the summed kernel time, drawn from the start of the phase it happened in. */
  private reduceSlice(tid: number, t: Float64Array, startNs: number, endNs: number): void {
    if (t[C.ReduceCalls] === 0) return;
    const end = Math.min(endNs, startNs + t[C.ReduceNanos]);
    this.slice(tid, 'reduce (sum of kernels)', 'phase', startNs, end, {
      calls: t[C.ReduceCalls],
      note: 'summed kernel time, interleaved with the receives: not one interval',
    });
  }

  private endGroup(): void {
    const members = this.group;
    this.group = [];
    if (members.length === 0) return;
    const first = members[0].row;
    const last = members[members.length - 1].row;
    const bytes = members.reduce((n, m) => n + m.call.bytes, 0);
    this.slice(0, `fused ×${members.length}`, 'engine', first[C.Started], last[C.Done], {
      seq: first[C.Seq], tensors: members.length, bytes, names: members.map((m) => sliceName(m.call)),
    });
  }
}

function sliceName(call: Call): string {
  const kind = KINDS[call.kind] ?? 'collective';
  return call.name ? `${kind} ${call.name}` : kind;
}

/** Events of one rank's file, tolerating a file cut short (missing "]", a partial last line). */
async function* eventsOf(file: string): AsyncGenerator<string> {
  const lines = readline.createInterface({ input: fs.createReadStream(file, 'utf8'), crlfDelay: Infinity });
  for await (const raw of lines) {
    let line = raw.trim();
    if (line.startsWith(',')) line = line.slice(1);
    if (line === '' || line === '[' || line === ']') continue;
    try {
      JSON.parse(line);
    } catch {
      continue; // the partial line a crash can leave
    }
    yield line;
  }
}

/** The clock base of a rank file (args.clock_base_us of its process_name event), 0 if none. */
async function clockBaseOf(file: string): Promise<number> {
  for await (const line of eventsOf(file)) {
    const e = JSON.parse(line);
    if (e.ph === 'M' && e.name === 'process_name') return Number(e.args?.clock_base_us) || 0;
  }
  return 0;
}

/** `hora timeline FILE -np N`: merges the rank files of a job started without hora run. */
export async function timelineMain(argv: string[]): Promise<number> {
  const np = argv.indexOf('-np') >= 0 ? Number(argv[argv.indexOf('-np') + 1]) : NaN;
  const file = argv.find((a, i) => !a.startsWith('-') && argv[i - 1] !== '-np');
  if (!file || !Number.isInteger(np) || np < 1) {
    process.stderr.write('usage: hora timeline FILE -np N   (merges FILE.rank0 ... of HORA_TIMELINE=FILE into FILE)\n');
    return 2;
  }
  const m = await mergeTimelines(path.resolve(file), np);
  if (m.merged.length === 0) {
    process.stderr.write(`hora timeline: no rank file found (looked for ${rankTimelinePath(file, 0)} and the like)\n`);
    return 1;
  }
  const missing = m.missing.length ? `; no file from rank(s) ${m.missing.join(', ')}` : '';
  process.stdout.write(`hora timeline: ${m.merged.length} rank(s), ${m.events} events, written to ${file}${missing}\n`);
  return 0;
}

export interface MergeResult {
  /** Ranks whose file was found and merged. */
  merged: number[];
  /** Ranks whose file was not there (e.g. written on another host). */
  missing: number[];
  events: number;
}

/**
 * Merges the files rankTimelinePath(file, r) for r < size into `file` (complete JSON) and removes them.
 * Throws when reading or writing fails; the rank files are then left in place.
 */
export async function mergeTimelines(file: string, size: number): Promise<MergeResult> {
  const result: MergeResult = { merged: [], missing: [], events: 0 };
  const parts: string[] = [];
  for (let r = 0; r < size; r++) {
    if (fs.existsSync(rankTimelinePath(file, r))) {
      parts.push(rankTimelinePath(file, r));
      result.merged.push(r);
    } else {
      result.missing.push(r);
    }
  }
  if (parts.length === 0) return result;
  // Every rank's ts counts from its own clock base: shift them all to the earliest.
  const bases = await Promise.all(parts.map(clockBaseOf));
  const base = Math.min(...bases);
  const tmp = `${file}.merging`;
  const fd = fs.openSync(tmp, 'w');
  try {
    let out = '{"traceEvents":[\n';
    for (const [i, part] of parts.entries()) {
      const shift = bases[i] - base;
      for await (let line of eventsOf(part)) {
        if (shift !== 0) {
          const e = JSON.parse(line);
          if (typeof e.ts === 'number') e.ts = Number((e.ts + shift).toFixed(3));
          if (e.name === 'process_name' && e.args) e.args.clock_base_us = base;
          line = JSON.stringify(e);
        }
        out += (result.events++ > 0 ? ',' : '') + line + '\n';
        if (out.length >= FLUSH_BYTES) {
          fs.writeSync(fd, out);
          out = '';
        }
      }
    }
    const otherData = {
      ranks: result.merged.length, missing_ranks: result.missing, clock_base_us: base,
      clock: 'ts: microseconds since clock_base_us (wall clock, Unix epoch); ranks on different hosts align as well as their clocks do (NTP)',
    };
    out += `],\n"displayTimeUnit":"ns",\n"otherData":${JSON.stringify(otherData)}}\n`;
    fs.writeSync(fd, out);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
  for (const part of parts) fs.rmSync(part, { force: true });
  return result;
}
