'use strict';
// Runs inside every rank of a `hora run` job for test/checkpoint.test.js: hora.checkpoint.save and load,
// one scenario (argv[2]) per run. CKPT_DIRS is a JSON list of checkpoint directories, CKPT_STEP a step.
//
//   save     saves step CKPT_STEP of the standard entries (entriesFor) to every dir, keep CKPT_KEEP
//   load     loads (step CKPT_LOAD_STEP or the latest) from every dir and checks each part against what the
//            saver's data must be at this world size; each dir's outcome (its error, if any) is reported
//   crash    saves step 1, then step 2 with rank 1 SIGKILLing itself (by its PID) once its shard's
//            temporary file exists, mid-save
//   badArgs  a list of wrong calls, each made wrong on rank 1 only (rank 0 and the others call it rightly)
//   notShared each rank passes a directory of its own, as ranks on hosts without a shared filesystem would
//   ranges   a load with options.ranges: rank r reads all of a sharded entry
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const hora = require('../../dist/ts/index.js');
const { describeError, runScenarios } = require('../support/worker-util');

const DTYPES = ['float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'int8', 'int16', 'uint16'];
const CTORS = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array, bfloat16: Uint16Array, int32: Int32Array,
  int64: BigInt64Array, uint8: Uint8Array, int8: Int8Array, int16: Int16Array, uint16: Uint16Array,
};
const SHARDED_LENGTH = 1009;
const REPLICATED_LENGTH = 37;
/** Past hora.checkpoint's 4 MiB chunks: a resharded read starts and ends inside chunks. */
const BIG_LENGTH = 2500000;

/** Elements [begin, end) of entry `name` (dtype) as saved at `step`: the same on every rank and world size. */
function values(dtype, name, step, begin, end) {
  const out = new CTORS[dtype](end - begin);
  let seed = 0;
  for (const ch of name) seed = (seed * 31 + ch.charCodeAt(0)) % 9973;
  for (let i = begin; i < end; i++) {
    const v = (seed + step * 101 + i * 7) % 65536;
    if (dtype === 'int64') out[i - begin] = BigInt(v) * 1000003n - 5n ** 20n;
    else if (dtype === 'float32' || dtype === 'float64') out[i - begin] = v * 0.25 - 1000.5;
    else out[i - begin] = v; // the integer types wrap as their arrays do
  }
  return out;
}

function blockRange(count, size, block) {
  const base = Math.floor(count / size), extra = count % size;
  const start = (b) => b * base + Math.min(b, extra);
  return [start(block), start(block + 1)];
}

/** An uneven split: rank r holds a share proportional to r + 1. */
function unevenRange(count, size, r) {
  const total = (size * (size + 1)) / 2;
  const start = (b) => Math.floor((count * (b * (b + 1)) / 2) / total);
  return [start(r), start(r + 1)];
}

function entriesFor(step, r, p) {
  const entries = {};
  for (const dtype of DTYPES) {
    const needsDtype = CTORS[dtype] === Uint16Array;
    const rep = values(dtype, `r_${dtype}`, step, 0, REPLICATED_LENGTH);
    entries[`r_${dtype}`] = needsDtype ? { data: rep, dtype } : rep;
    const [b, e] = blockRange(SHARDED_LENGTH, p, r);
    entries[`s_${dtype}`] = { data: values(dtype, `s_${dtype}`, step, b, e), dtype: needsDtype ? dtype : undefined, globalLength: SHARDED_LENGTH, offset: b };
  }
  const [ub, ue] = unevenRange(BIG_LENGTH, p, r);
  entries.big = { data: values('float32', 'big', step, ub, ue), globalLength: BIG_LENGTH, offset: ub };
  entries.empty = { data: new Float64Array(0), globalLength: 0, offset: 0 };
  for (const [k, v] of Object.entries(entries)) if (v.dtype === undefined && !ArrayBuffer.isView(v)) delete v.dtype;
  return entries;
}

function expected() {
  const out = {};
  for (const dtype of DTYPES) {
    out[`r_${dtype}`] = { dtype, length: REPLICATED_LENGTH, sharded: false };
    out[`s_${dtype}`] = { dtype, length: SHARDED_LENGTH, sharded: true };
  }
  out.big = { dtype: 'float32', length: BIG_LENGTH, sharded: true };
  out.empty = { dtype: 'float64', length: 0, sharded: true };
  return out;
}

function sameBytes(a, b) {
  return a.constructor === b.constructor && a.length === b.length && Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

/** What is wrong with a loaded checkpoint at this world size (an empty list when nothing is). */
function check(loaded, step, r, p, ranges = {}) {
  const wrong = [];
  for (const [name, x] of Object.entries(expected())) {
    const got = loaded.entries[name];
    if (loaded.dtypes[name] !== x.dtype) wrong.push(`${name}: dtype ${loaded.dtypes[name]}`);
    if (!x.sharded) {
      if (!ArrayBuffer.isView(got) || !sameBytes(got, values(x.dtype, name, step, 0, x.length))) wrong.push(`${name}: values`);
      continue;
    }
    const [b, e] = ranges[name] ? [ranges[name].offset, ranges[name].offset + ranges[name].length] : blockRange(x.length, p, r);
    if (!got || got.offset !== b || got.globalLength !== x.length || got.dtype !== x.dtype) wrong.push(`${name}: range ${got && got.offset} of ${got && got.globalLength}`);
    else if (!sameBytes(got.data, values(x.dtype, name, step, b, e))) wrong.push(`${name}: values of [${b}, ${e})`);
  }
  return wrong;
}

const dirs = () => JSON.parse(process.env.CKPT_DIRS || '[]');
const num = (v) => (v === undefined || v === '' ? undefined : Number(v));

async function settle(call) {
  try {
    return { ok: true, value: await call() };
  } catch (e) {
    return describeError(e);
  }
}

runScenarios(hora, {
  async save(r, p) {
    const step = num(process.env.CKPT_STEP);
    const keep = num(process.env.CKPT_KEEP);
    for (const dir of dirs()) await hora.checkpoint.save(dir, entriesFor(step, r, p), keep ? { step, keep } : { step });
    return { ok: true };
  },

  async load(r, p) {
    const step = num(process.env.CKPT_LOAD_STEP);
    const out = [];
    for (const dir of dirs()) {
      const o = await settle(() => hora.checkpoint.load(dir, { ...(step !== undefined ? { step } : {}), expect: expected() }));
      if (!o.ok) out.push(o);
      else out.push({ ok: true, step: o.value.step, wrong: check(o.value, o.value.step, r, p) });
    }
    return { ok: true, dirs: out };
  },

  async wrongModel(r, p) {
    const dir = dirs()[0];
    const expect = expected();
    const cases = {
      missingEntry: { ...expect, extra: { dtype: 'float32', length: 3 } },
      extraEntry: Object.fromEntries(Object.entries(expect).filter(([k]) => k !== 'big')),
      dtype: { ...expect, big: { dtype: 'float64', length: BIG_LENGTH } },
      length: { ...expect, s_int32: { dtype: 'int32', length: SHARDED_LENGTH + 1 } },
    };
    const out = {};
    for (const [k, e] of Object.entries(cases)) out[k] = await settle(() => hora.checkpoint.load(dir, { expect: e }));
    out.after = await settle(async () => check(await hora.checkpoint.load(dir, { expect }), num(process.env.CKPT_STEP), r, p));
    return { ok: true, cases: out };
  },

  async ranges(r, p) {
    const dir = dirs()[0];
    const ranges = { big: { offset: 0, length: BIG_LENGTH }, s_float16: { offset: 3, length: 500 } };
    const loaded = await hora.checkpoint.load(dir, { ranges });
    return { ok: true, wrong: check(loaded, loaded.step, r, p, ranges) };
  },

  async readBytes(r, p) {
    const dir = dirs()[0];
    // Counts the bytes every FileHandle.read returns, while this rank loads.
    const probe = await fs.promises.open(path.join(dir, 'latest'), 'r');
    const proto = Object.getPrototypeOf(probe);
    await probe.close();
    const read = proto.read;
    let bytes = 0;
    proto.read = async function (...args) {
      const out = await read.apply(this, args);
      bytes += out.bytesRead;
      return out;
    };
    let loaded;
    try {
      // 'big' at the split it was saved with (uneven), the rest at the even split.
      const [b, e] = unevenRange(BIG_LENGTH, p, r);
      loaded = await hora.checkpoint.load(dir, process.env.CKPT_SAVED_SPLIT ? { ranges: { big: { offset: b, length: e - b } } } : {});
    } finally {
      proto.read = read;
    }
    let share = 0;
    for (const v of Object.values(loaded.entries)) share += ArrayBuffer.isView(v) ? v.byteLength : v.data.byteLength;
    return { ok: true, bytes, share };
  },

  async crash(r, p) {
    const dir = dirs()[0];
    await hora.checkpoint.save(dir, entriesFor(1, r, p), { step: 1 });
    if (r === 1) {
      const stepDir = path.join(dir, 'step-2');
      const poll = () => {
        let names = [];
        try {
          names = fs.readdirSync(stepDir);
        } catch {
          names = [];
        }
        if (names.some((n) => n.includes('rank-00001'))) {
          fs.writeFileSync(path.join(os.tmpdir(), `.ckpt-killed-${process.env.CKPT_TOKEN}`), names.join(','));
          process.kill(process.pid, 'SIGKILL');
        }
        setImmediate(poll);
      };
      setImmediate(poll);
    }
    await hora.checkpoint.save(dir, entriesFor(2, r, p), { step: 2 });
    return { ok: true, saved: 2 };
  },

  async badArgs(r, p) {
    const dir = dirs()[0];
    const good = entriesFor(9, r, p);
    const wrongOn1 = (bad) => (r === 1 ? bad : good);
    const cases = {
      dir: () => hora.checkpoint.save(r === 1 ? 42 : dir, good, { step: 9 }),
      entries: () => hora.checkpoint.save(dir, wrongOn1('weights'), { step: 9 }),
      entryValue: () => hora.checkpoint.save(dir, wrongOn1({ ...good, big: [1, 2, 3] }), { step: 9 }),
      uint16NoDtype: () => hora.checkpoint.save(dir, wrongOn1({ ...good, r_uint16: new Uint16Array(REPLICATED_LENGTH) }), { step: 9 }),
      offset: () => hora.checkpoint.save(dir, wrongOn1({ ...good, big: { ...good.big, offset: -1 } }), { step: 9 }),
      step: () => hora.checkpoint.save(dir, good, { step: r === 1 ? 1.5 : 9 }),
      keep: () => hora.checkpoint.save(dir, good, { step: 9, keep: r === 1 ? 0 : 2 }),
      unknownOption: () => hora.checkpoint.save(dir, good, r === 1 ? { step: 9, kep: 2 } : { step: 9 }),
      overlap: () => hora.checkpoint.save(dir, { s: { data: new Float32Array(4), globalLength: 4 * p - 1, offset: Math.max(0, 4 * r - 1) } }, { step: 9 }),
      loadStep: () => hora.checkpoint.load(dir, { step: r === 1 ? -1 : 1 }),
      loadRanges: () => hora.checkpoint.load(dir, r === 1 ? { ranges: { big: { offset: 0, length: BIG_LENGTH + 1 } } } : {}),
      loadUnknownOption: () => hora.checkpoint.load(dir, r === 1 ? { steps: 1 } : {}),
    };
    const out = {};
    for (const [k, call] of Object.entries(cases)) out[k] = await settle(call);
    out.stepsOnDisk = fs.readdirSync(dir).filter((n) => n.startsWith('step-'));
    out.after = await settle(async () => check(await hora.checkpoint.load(dir), 1, r, p));
    return { ok: true, cases: out };
  },

  // File operations that fail (CKPT_IO names the paths the test prepared): each case's outcome on this rank.
  async ioFailures(r, p) {
    const io = JSON.parse(process.env.CKPT_IO);
    const cases = {
      parentIsFile: () => hora.checkpoint.save(io.parentIsFile, entriesFor(9, r, p), { step: 9 }),
      stepIsFile: () => hora.checkpoint.save(io.stepIsFile, entriesFor(9, r, p), { step: 9 }),
      latestIsDir: () => hora.checkpoint.load(io.latestIsDir),
      manifestIsDir: () => hora.checkpoint.load(io.manifestIsDir),
      missingStep: () => hora.checkpoint.load(io.missingStep, { step: 77 }),
    };
    const out = {};
    for (const [k, call] of Object.entries(cases)) out[k] = await settle(call);
    out.after = await settle(async () => check(await hora.checkpoint.load(io.stepIsFile), 1, r, p));
    return { ok: true, cases: out };
  },

  async notShared(r, p) {
    const own = fs.mkdtempSync(path.join(os.tmpdir(), `hora-ckpt-own-${r}-`));
    try {
      return { ok: true, outcome: await settle(() => hora.checkpoint.save(own, entriesFor(1, r, p), { step: 1 })) };
    } finally {
      fs.rmSync(own, { recursive: true, force: true });
    }
  },
}, { noShutdown: ['crash'] });
