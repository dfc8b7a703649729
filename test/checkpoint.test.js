'use strict';
// hora.checkpoint: save and load at 1 to 4 ranks, every dtype, resharding both ways, keep and the latest
// pointer, a rank killed mid-save, damaged checkpoints (a corrupt byte, a truncated or missing file, another
// model) and wrong arguments, each failing on every rank and naming what is wrong.
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const t = require('tap');
const { runJob, runScenario, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'checkpoint-worker.js');

function tempDirs(t, n) {
  const dirs = [];
  for (let i = 0; i < n; i++) dirs.push(fs.mkdtempSync(path.join(os.tmpdir(), 'hora-ckpt-test-')));
  t.teardown(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));
  return dirs;
}

const env = (dirs, extra = {}) => ({ CKPT_DIRS: JSON.stringify(dirs), ...extra });

async function save(t, np, dirs, step, extra = {}) {
  const { results } = await runScenario(t, np, WORKER, 'save', env(dirs, { CKPT_STEP: String(step), ...extra }));
  t.ok(results.every((r) => r && r.ok), `save of step ${step} at ${np} ranks resolved on every rank`, { results });
}

async function load(t, np, dirs, extra = {}) {
  const { results } = await runScenario(t, np, WORKER, 'load', env(dirs, extra));
  return results.map((r) => (r ? r.dirs : null));
}

function manifestOf(dir, step) {
  return JSON.parse(fs.readFileSync(path.join(dir, `step-${step}`, 'manifest.json'), 'utf8'));
}

for (const np of [1, 2, 3, 4]) {
  t.test(`p=${np}: every dtype, replicated and sharded (even, uneven, empty), saved and loaded at the same size`, async (t) => {
    const [dir] = tempDirs(t, 1);
    await save(t, np, [dir], 5);
    t.equal(fs.readFileSync(path.join(dir, 'latest'), 'utf8'), 'step-5\n', 'latest names the step');
    const m = manifestOf(dir, 5);
    t.equal(m.worldSize, np, 'the manifest records the world size');
    t.equal(m.files.length, np, 'one file per rank');
    for (const f of m.files) t.equal(fs.statSync(path.join(dir, 'step-5', f.name)).size, f.bytes, `${f.name} has the bytes the manifest says`);
    t.same(fs.readdirSync(path.join(dir, 'step-5')).filter((n) => n.startsWith('.')), [], 'no temporary file is left');
    t.same(fs.readdirSync(dir).filter((n) => n.startsWith('.')), [], 'no probe file is left');
    const outs = await load(t, np, [dir]);
    for (const [rank, o] of outs.entries()) t.same(o, [{ ok: true, step: 5, wrong: [] }], `rank ${rank} loaded its part of every entry`);
  });
}

for (const [from, tos] of [[4, [2, 3, 1]], [1, [4, 3]], [2, [3]], [3, [2]]]) {
  t.test(`resharding: ${from} ranks save, ${tos.join(', ')} ranks load`, async (t) => {
    const [dir] = tempDirs(t, 1);
    await save(t, from, [dir], 7);
    for (const to of tos) {
      const outs = await load(t, to, [dir]);
      for (const [rank, o] of outs.entries()) t.same(o, [{ ok: true, step: 7, wrong: [] }], `${to} ranks: rank ${rank} got its even share`);
    }
  });
}

t.test('load reads only what this rank needs: at the saved size exactly its part, resharded never every file whole', async (t) => {
  const [dir] = tempDirs(t, 1);
  await save(t, 4, [dir], 2);
  const m = manifestOf(dir, 2);
  const total = m.files.reduce((a, f) => a + f.bytes, 0);
  const { results: same } = await runScenario(t, 4, WORKER, 'readBytes', env([dir], { CKPT_SAVED_SPLIT: '1' }));
  for (const [rank, r] of same.entries()) t.equal(r.bytes, r.share, `4 ranks: rank ${rank} read ${r.bytes} bytes, exactly its part`);
  const { results: fewer } = await runScenario(t, 2, WORKER, 'readBytes', env([dir]));
  for (const [rank, r] of fewer.entries()) {
    t.ok(r.bytes >= r.share && r.bytes < total, `2 ranks: rank ${rank} read ${r.bytes} bytes: its part (${r.share}) and the rest of the chunks around it, not all ${total}`);
  }
});

t.test('p=3: options.ranges reads a chosen range of a sharded entry (here all of it) in place of the even split', async (t) => {
  const [dir] = tempDirs(t, 1);
  await save(t, 2, [dir], 1);
  const { results } = await runScenario(t, 3, WORKER, 'ranges', env([dir]));
  for (const [rank, r] of results.entries()) t.same(r, { ok: true, wrong: [] }, `rank ${rank} got the ranges it asked for`);
});

t.test('p=2: keep removes older steps, latest moves, a step saved again replaces the earlier save of it', async (t) => {
  const [dir] = tempDirs(t, 1);
  for (const step of [1, 2, 3, 4]) await save(t, 2, [dir], step, { CKPT_KEEP: '2' });
  t.same(fs.readdirSync(dir).filter((n) => n.startsWith('step-')).sort(), ['step-3', 'step-4'], 'keep: 2 leaves the two newest steps');
  t.equal(fs.readFileSync(path.join(dir, 'latest'), 'utf8'), 'step-4\n');
  const first = manifestOf(dir, 4).token;
  fs.mkdirSync(path.join(dir, 'step-0'));
  fs.writeFileSync(path.join(dir, 'step-0', 'rank-00000-unfinished.bin'), 'x');
  await save(t, 3, [dir], 4, { CKPT_KEEP: '2' });
  const m = manifestOf(dir, 4);
  t.not(m.token, first, 'step 4 saved again has a new manifest');
  t.same(fs.readdirSync(path.join(dir, 'step-4')).sort(), ['manifest.json', ...m.files.map((f) => f.name)].sort(), 'only the new save\'s files remain in step 4');
  t.notOk(fs.existsSync(path.join(dir, 'step-0')), 'an unfinished older step is removed');
  t.ok(fs.existsSync(path.join(dir, 'step-3', 'manifest.json')), 'step 3 is kept');
  const outs = await load(t, 2, [dir], { CKPT_LOAD_STEP: '3' });
  t.same(outs[0], [{ ok: true, step: 3, wrong: [] }], 'an older kept step loads by options.step');
});

t.test('p=3: a rank SIGKILLed mid-save leaves the previous step whole; it loads at 2 and 3 ranks', async (t) => {
  const [dir] = tempDirs(t, 1);
  const token = `${process.pid}-${Date.now()}`;
  const marker = path.join(os.tmpdir(), `.ckpt-killed-${token}`);
  t.teardown(() => fs.rmSync(marker, { force: true }));
  const job = await runJob(3, WORKER, { args: ['crash'], env: env([dir], { CKPT_TOKEN: token, HORA_TIMEOUT_S: '30' }), timeoutMs: 120000 });
  t.not(job.code, 0, 'the job fails', { output: tail(job) });
  t.ok(fs.existsSync(marker), 'rank 1 killed itself while its step-2 file was being written', { output: tail(job) });
  t.equal(fs.readFileSync(path.join(dir, 'latest'), 'utf8'), 'step-1\n', 'latest still names step 1');
  t.notOk(fs.existsSync(path.join(dir, 'step-2', 'manifest.json')), 'step 2 has no manifest');
  for (const np of [2, 3]) {
    const outs = await load(t, np, [dir]);
    for (const [rank, o] of outs.entries()) t.same(o, [{ ok: true, step: 1, wrong: [] }], `${np} ranks: rank ${rank} loaded step 1`);
  }
  await save(t, 3, [dir], 2);
  t.same(fs.readdirSync(path.join(dir, 'step-2')).filter((n) => n.startsWith('.')), [], 'a later save of step 2 leaves no file of the crashed one');
});

t.test('damaged checkpoints fail on every rank, naming the file, and load nothing', async (t) => {
  const dirs = tempDirs(t, 5);
  await save(t, 4, dirs, 3);
  const fileOf = (dir, rank) => path.join(dir, 'step-3', manifestOf(dir, 3).files[rank].name);
  // dirs[0] is left whole. A byte of rank 2's file flipped, in the middle of entry 'big':
  const big = manifestOf(dirs[1], 3).entries.big.parts[2];
  const corrupt = fileOf(dirs[1], big.file);
  const fd = fs.openSync(corrupt, 'r+');
  const at = big.byteOffset + 1000;
  const b = Buffer.alloc(1);
  fs.readSync(fd, b, 0, 1, at);
  b[0] ^= 0xff;
  fs.writeSync(fd, b, 0, 1, at);
  fs.closeSync(fd);
  const truncated = fileOf(dirs[2], 3);
  fs.truncateSync(truncated, fs.statSync(truncated).size - 10);
  const missing = fileOf(dirs[3], 1);
  fs.rmSync(missing);
  const manifest = path.join(dirs[4], 'step-3', 'manifest.json');
  fs.writeFileSync(manifest, fs.readFileSync(manifest, 'utf8').slice(0, 100));

  for (const np of [4, 2]) {
    const outs = await load(t, np, dirs);
    for (const [rank, o] of outs.entries()) {
      t.same(o[0], { ok: true, step: 3, wrong: [] }, `${np} ranks: rank ${rank} loads the whole checkpoint`);
      const cases = [[1, corrupt, /is corrupt: bytes \d+ to \d+ \(chunk \d+ of entry 'big'.* do not match the manifest's crc32c/], [2, truncated, /is truncated: it has \d+ bytes, the manifest says \d+/],
        [3, missing, /is missing: the manifest names it as rank 1's file of step 3/], [4, manifest, /is not valid JSON/]];
      for (const [i, file, why] of cases) {
        t.match(o[i], { ok: false, isHoraError: true, code: 'ERR_MISMATCH' }, `${np} ranks: rank ${rank}, ${path.basename(file)}: ERR_MISMATCH`);
        t.ok(o[i].message.includes(file), `${np} ranks: rank ${rank}: the message names ${file}`, { message: o[i].message });
        t.match(o[i].message, why, `${np} ranks: rank ${rank}: the message says what is wrong`);
      }
    }
  }
});

/** CRC-32C of `bytes` (the reflected polynomial 0x82F63B78, one byte at a time): the test's own, apart from the addon's. */
const CRC32C_TABLE = Array.from({ length: 256 }, (_, b) => {
  let r = b;
  for (let i = 0; i < 8; i++) r = r & 1 ? (r >>> 1) ^ 0x82f63b78 : r >>> 1;
  return r >>> 0;
});
function crc32c(bytes) {
  let r = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) r = (r >>> 8) ^ CRC32C_TABLE[(r ^ bytes[i]) & 0xff];
  return ((r ^ 0xffffffff) >>> 0).toString(16).padStart(8, '0');
}

/** Each chunk of each part that manifest `m` of step `step` names, with its bytes from the part's file. */
function* chunksOf(dir, step, m) {
  const elem = { float32: 4, float64: 8, float16: 2, bfloat16: 2, int32: 4, int64: 8, uint8: 1, int8: 1, int16: 2, uint16: 2 };
  for (const [name, e] of Object.entries(m.entries)) {
    for (const part of e.parts) {
      const file = fs.readFileSync(path.join(dir, `step-${step}`, m.files[part.file].name));
      const bytes = part.length * elem[e.dtype];
      for (let k = 0; k * m.chunkBytes < bytes; k++) {
        const at = part.byteOffset + k * m.chunkBytes;
        yield { name, part, k, bytes: file.subarray(at, Math.min(at + m.chunkBytes, part.byteOffset + bytes)) };
      }
    }
  }
}

/** Step `step`'s manifest rewritten as version 1 wrote it: no `checksum`, each part's sha256 of each chunk in `sha256`. */
function asVersion1(dir, step) {
  const m = manifestOf(dir, step);
  for (const e of Object.values(m.entries)) for (const p of e.parts) p.sha256 = [];
  for (const { part, k, bytes } of chunksOf(dir, step, m)) part.sha256[k] = crypto.createHash('sha256').update(bytes).digest('hex');
  for (const e of Object.values(m.entries)) for (const p of e.parts) delete p.checksums;
  m.version = 1;
  delete m.checksum;
  fs.writeFileSync(path.join(dir, `step-${step}`, 'manifest.json'), JSON.stringify(m, null, 1) + '\n');
}

function flipByte(file, at) {
  const fd = fs.openSync(file, 'r+');
  const b = Buffer.alloc(1);
  fs.readSync(fd, b, 0, 1, at);
  b[0] ^= 0xff;
  fs.writeSync(fd, b, 0, 1, at);
  fs.closeSync(fd);
}

t.test('manifests: version 2 names crc32c, whose checksums are CRC-32C; version 1 manifests (sha256) still load and find damage; an unknown checksum is ERR_MISMATCH', async (t) => {
  const dirs = tempDirs(t, 4);
  await save(t, 3, dirs, 2);
  const m = manifestOf(dirs[0], 2);
  t.match(m, { version: 2, checksum: 'crc32c' }, 'the manifest is version 2 and names crc32c');
  let chunks = 0;
  const wrong = [];
  for (const { name, part, k, bytes } of chunksOf(dirs[0], 2, m)) {
    chunks++;
    if (crc32c(bytes) !== part.checksums[k]) wrong.push(`${name} chunk ${k}: ${part.checksums[k]}, CRC-32C ${crc32c(bytes)}`);
  }
  t.ok(chunks > 30, `every part's chunks were checked (${chunks})`);
  t.same(wrong, [], 'each chunk\'s checksum is the CRC-32C of its bytes');

  asVersion1(dirs[1], 2);
  asVersion1(dirs[2], 2);
  const big = manifestOf(dirs[2], 2).entries.big.parts[2];
  const damaged = path.join(dirs[2], 'step-2', manifestOf(dirs[2], 2).files[big.file].name);
  flipByte(damaged, big.byteOffset + 4 * 1024 * 1024 + 77);
  const unknown = path.join(dirs[3], 'step-2', 'manifest.json');
  fs.writeFileSync(unknown, JSON.stringify({ ...manifestOf(dirs[3], 2), checksum: 'md5' }));
  for (const np of [3, 2]) {
    const outs = await load(t, np, dirs);
    for (const [rank, o] of outs.entries()) {
      t.same(o.slice(0, 2), [{ ok: true, step: 2, wrong: [] }, { ok: true, step: 2, wrong: [] }], `${np} ranks: rank ${rank} loads version 2 and version 1`);
      t.match(o[2], { ok: false, code: 'ERR_MISMATCH', message: /is corrupt: bytes \d+ to \d+ \(chunk 1 of entry 'big'.* do not match the manifest's sha256/ },
        `${np} ranks: rank ${rank}: a changed byte under a version 1 manifest is found by its sha256`);
      t.ok(o[2].message.includes(damaged), `${np} ranks: rank ${rank}: the message names ${damaged}`);
      t.match(o[3], { ok: false, code: 'ERR_MISMATCH', message: /names the checksum "md5", which this hora does not know \(it knows crc32c, sha256\)/ },
        `${np} ranks: rank ${rank}: an unknown checksum is ERR_MISMATCH`);
      t.ok(o[3].message.includes(unknown), `${np} ranks: rank ${rank}: the message names ${unknown}`);
    }
  }
});

t.test('p=2: a checkpoint of another model (entries, dtype, length) fails on every rank naming the manifest', async (t) => {
  const [dir] = tempDirs(t, 1);
  await save(t, 2, [dir], 6);
  const { results } = await runScenario(t, 2, WORKER, 'wrongModel', env([dir], { CKPT_STEP: '6' }));
  const manifest = path.join(dir, 'step-6', 'manifest.json');
  const why = {
    missingEntry: /another model: it lacks 'extra'/,
    extraEntry: /another model: it has 'big', which were not expected/,
    dtype: /entry 'big' is float32, expected float64/,
    length: /entry 's_int32' has 1009 elements, expected 1010/,
  };
  for (const [rank, r] of results.entries()) {
    for (const [k, re] of Object.entries(why)) {
      t.match(r.cases[k], { ok: false, code: 'ERR_MISMATCH' }, `rank ${rank}, ${k}: ERR_MISMATCH`);
      t.ok(r.cases[k].message.includes(manifest), `rank ${rank}, ${k}: names the manifest`);
      t.match(r.cases[k].message, re, `rank ${rank}, ${k}: says what differs`);
    }
    t.same(r.cases.after, { ok: true, value: [] }, `rank ${rank}: the right expectation loads after`);
  }
});

t.test('p=3: a wrong argument on rank 1 fails the call on every rank with ERR_INVALID_ARGUMENT naming it; nothing is written', async (t) => {
  const [dir] = tempDirs(t, 1);
  await save(t, 3, [dir], 1);
  const { results } = await runScenario(t, 3, WORKER, 'badArgs', env([dir]));
  const named = {
    dir: "argument 'dir' must be", entries: "argument 'entries' must be", entryValue: "argument 'entries[\"big\"]' must be",
    uint16NoDtype: "argument 'entries[\"r_uint16\"]' must be an array with its dtype", offset: "argument 'entries[\"big\"].offset' must be",
    step: "argument 'options.step' must be", keep: "argument 'options.keep' must be", unknownOption: "argument 'options.kep' is not an option",
    loadStep: "argument 'options.step' must be", loadRanges: "argument 'options.ranges[\"big\"]' must be", loadUnknownOption: "argument 'options.steps' is not an option",
  };
  for (const [rank, r] of results.entries()) {
    for (const [k, text] of Object.entries(named)) {
      t.match(r.cases[k], { ok: false, isHoraError: true, code: 'ERR_INVALID_ARGUMENT' }, `rank ${rank}, ${k}: ERR_INVALID_ARGUMENT`);
      t.ok(r.cases[k].message && r.cases[k].message.includes(text), `rank ${rank}, ${k}: the message names the argument`, { message: r.cases[k].message });
      if (rank !== 1) t.ok(r.cases[k].message.startsWith('rank 1 failed: '), `rank ${rank}, ${k}: says rank 1 failed`);
    }
    t.match(r.cases.overlap, { ok: false, code: 'ERR_MISMATCH', message: /shards of entry 's' must cover its 11 elements once each, but rank 1's shard overlaps/ },
      `rank ${rank}: overlapping shards are ERR_MISMATCH`);
    t.same(r.cases.stepsOnDisk, ['step-1'], `rank ${rank}: no step was written`);
    t.same(r.cases.after, { ok: true, value: [] }, `rank ${rank}: step 1 still loads`);
  }
});

t.test('p=3: ranks that do not share the directory (each its own) fail the save on every rank, saying so', async (t) => {
  const { results } = await runScenario(t, 3, WORKER, 'notShared');
  for (const [rank, r] of results.entries()) {
    t.match(r.outcome, { ok: false, code: 'ERR_INVALID_ARGUMENT' }, `rank ${rank}: ERR_INVALID_ARGUMENT`);
    t.match(r.outcome.message, /argument 'dir' must be a directory on a filesystem shared by every rank, but rank [12] cannot see the file .*\.probe-/,
      `rank ${rank}: the message says the filesystem is not shared`);
  }
});

t.test('p=3: a file operation that fails is ERR_IO on every rank, with the OS code and the path; a missing step is the caller\'s argument', async (t) => {
  const [tmp, saved, latestIsDir, manifestIsDir] = tempDirs(t, 4);
  // A directory that cannot be made (its parent is a regular file: root's permissions do not stop this one).
  const parentFile = path.join(tmp, 'a-file');
  fs.writeFileSync(parentFile, 'not a directory');
  const parentIsFile = path.join(parentFile, 'ckpt');
  // A regular file where a step's directory goes.
  await save(t, 3, [saved, manifestIsDir], 1);
  fs.writeFileSync(path.join(saved, 'step-9'), 'not a directory');
  // A directory where a file is read: `latest`, a step's manifest.
  fs.mkdirSync(path.join(latestIsDir, 'latest'));
  const manifest = path.join(manifestIsDir, 'step-1', 'manifest.json');
  fs.rmSync(manifest);
  fs.mkdirSync(manifest);
  const io = { parentIsFile, stepIsFile: saved, latestIsDir, manifestIsDir, missingStep: saved };
  const { results } = await runScenario(t, 3, WORKER, 'ioFailures', { CKPT_IO: JSON.stringify(io) });
  const expected = {
    parentIsFile: { osCode: 'ENOTDIR', path: parentIsFile, who: 0, text: `could not write to the directory (argument 'dir') ${parentIsFile}` },
    stepIsFile: { osCode: 'EEXIST', path: path.join(saved, 'step-9'), who: 0, text: `could not write ${path.join(saved, 'step-9')}/.rank-00000-` },
    latestIsDir: { osCode: 'EISDIR', path: path.join(latestIsDir, 'latest'), who: 0, text: `could not read ${path.join(latestIsDir, 'latest')}` },
    manifestIsDir: { osCode: 'EISDIR', path: manifest, who: 0, text: `could not read ${manifest}` },
  };
  for (const [rank, r] of results.entries()) {
    for (const [k, x] of Object.entries(expected)) {
      t.match(r.cases[k], { ok: false, isHoraError: true, code: 'ERR_IO', osCode: x.osCode, path: x.path }, `rank ${rank}, ${k}: ERR_IO with the OS code and the path`);
      t.ok(r.cases[k].message && r.cases[k].message.includes(x.text), `rank ${rank}, ${k}: the message says what failed on which file`, { message: r.cases[k].message });
      if (rank !== x.who) t.ok(r.cases[k].message.startsWith(`rank ${x.who} failed: `), `rank ${rank}, ${k}: says rank ${x.who} failed`);
    }
    t.match(r.cases.missingStep, { ok: false, code: 'ERR_INVALID_ARGUMENT', message: /step 77 is not a complete checkpoint/ }, `rank ${rank}: a missing step is ERR_INVALID_ARGUMENT`);
    t.ok(r.cases.missingStep.message.includes(path.join(saved, 'step-77', 'manifest.json')), `rank ${rank}: it names the manifest it looked for`);
    t.same(r.cases.after, { ok: true, value: [] }, `rank ${rank}: the failed save left step 1 loadable`);
  }
  t.same(fs.readdirSync(saved).sort(), ['latest', 'step-1', 'step-9'], 'the failed save wrote nothing beside step 1');
});

t.test('ioError: a system call\'s error (a full disk) is ERR_IO with its code and path; any other error is ERR_INTERNAL with its stack', async (t) => {
  const { ioError } = require('../dist/ts/errors.js');
  const full = Object.assign(new Error("ENOSPC: no space left on device, write"), { code: 'ENOSPC', errno: -28, syscall: 'write' });
  const e = ioError('checkpoint.save', 'write', '/ckpt/step-3/.rank-00001-ab.bin.tmp', full, 1);
  t.match(e, { name: 'HoraError', code: 'ERR_IO', osCode: 'ENOSPC', path: '/ckpt/step-3/.rank-00001-ab.bin.tmp', rank: 1 }, 'ERR_IO, the code, the file (no err.path: the file written)');
  t.equal(e.message, 'hora.checkpoint.save: rank 1 could not write /ckpt/step-3/.rank-00001-ab.bin.tmp: ENOSPC: no space left on device, write', 'one message, the code once');
  const bug = ioError('checkpoint.save', 'write', '/ckpt/x', new TypeError('boom'), 0);
  t.match(bug, { code: 'ERR_INTERNAL', message: /failed to write \/ckpt\/x: TypeError: boom\n\s+at / }, 'not a system call\'s error: ERR_INTERNAL with the stack');
  t.equal(bug.osCode, undefined, 'and no osCode');
});

t.test('p=2: load of a directory with no checkpoint fails on every rank naming the latest file', async (t) => {
  const [dir] = tempDirs(t, 1);
  const outs = await load(t, 2, [dir]);
  for (const [rank, o] of outs.entries()) {
    t.match(o[0], { ok: false, code: 'ERR_INVALID_ARGUMENT' }, `rank ${rank}`);
    t.ok(o[0].message.includes(path.join(dir, 'latest')), `rank ${rank}: names ${dir}/latest`, { message: o[0].message });
  }
});

const TFJS_WORKER = path.join(__dirname, 'workers', 'checkpoint-tfjs-worker.js');

for (const optimizer of ['adam', 'momentum']) {
  t.test(`hora/tfjs (${optimizer}): saveCheckpoint at 2 ranks, a fresh model and optimizer resume bit-identically; 3 and 1 ranks load the same state`, async (t) => {
    const [dir] = tempDirs(t, 1);
    const env = { CKPT_DIR: dir, CKPT_OPTIMIZER: optimizer };
    const { results } = await runScenario(t, 2, TFJS_WORKER, 'save', env);
    for (const [rank, r] of results.entries()) {
      t.equal(r.step, 3, `rank ${rank}: loadCheckpoint resolves to the step`);
      t.same(r.loaded, r.atSave, `rank ${rank}: weights, slots, iterations and hidden variables are those saved`);
      t.ok(r.atSave.slots.length > 0 && r.atSave.iterations === 3, `rank ${rank}: the optimizer had state to save`);
      t.equal(r.resumedEnd, r.end, `rank ${rank}: two more steps after the load end where the uninterrupted run ends`);
    }
    for (const np of [3, 1]) {
      const { results: loads } = await runScenario(t, np, TFJS_WORKER, 'load', env);
      for (const [rank, r] of loads.entries()) t.same(r.loaded, results[0].atSave, `${np} ranks: rank ${rank} holds the saved state`);
    }
    const { results: wrong } = await runScenario(t, 2, TFJS_WORKER, 'wrong', env);
    for (const [rank, r] of wrong.entries()) {
      t.match(r.outcome, { ok: false, code: 'ERR_MISMATCH', message: /step-3\/manifest\.json is a checkpoint of another model: weight 0 \('dense_Dense1\/kernel' there\) is float32 \[8, 16\], the model's \('dense_Dense\d+\/kernel'\) is float32 \[8, 17\]/ },
        `rank ${rank}: another model is ERR_MISMATCH naming the manifest and the weight`);
      t.ok(r.unchanged, `rank ${rank}: no weight was written`);
    }
  });
}

t.test('hora/tfjs: a wrong argument or another model on rank 1 only fails saveCheckpoint and loadCheckpoint on every rank; nothing is written', async (t) => {
  const [dir] = tempDirs(t, 1);
  const env = { CKPT_DIR: dir };
  await runScenario(t, 2, TFJS_WORKER, 'save', env);
  const { results } = await runScenario(t, 3, TFJS_WORKER, 'oneRankWrong', env);
  for (const [rank, r] of results.entries()) {
    t.match(r.save, { ok: false, code: 'ERR_INVALID_ARGUMENT', message: /hora\/tfjs saveCheckpoint: argument 'what.model' must be a tf.LayersModel/ }, `rank ${rank}: save`);
    t.match(r.saveOption, { ok: false, code: 'ERR_INVALID_ARGUMENT', message: /'options.kep' is not an option/ }, `rank ${rank}: save option`);
    t.match(r.load, { ok: false, code: 'ERR_MISMATCH', message: /manifest\.json is a checkpoint of another model: weight 0/ }, `rank ${rank}: load into another model on rank 1`);
    if (rank !== 1) t.match(r.load.message, /^rank 1 failed: /, `rank ${rank}: says rank 1 failed`);
    t.ok(r.unchanged, `rank ${rank}: no weight was written`);
  }
  t.same(fs.readdirSync(dir).filter((n) => n.startsWith('step-')), ['step-3'], 'no step 9 was written');
});

const ELASTIC_WORKER = path.join(__dirname, 'workers', 'checkpoint-elastic-worker.js');

t.test('hora.elastic.State {checkpoint}: the launcher and every worker SIGKILLed mid-step; started again at another size, the job resumes from the last checkpoint and ends as an uninterrupted run', async (t) => {
  const [dir] = tempDirs(t, 1);
  const killed = await runJob(2, ELASTIC_WORKER, { env: { CKPT_DIR: dir, CKPT_KILL_AT: '8' }, timeoutMs: 60000 });
  t.ok(killed.reports.every((r) => r === null), 'no rank of the killed job reported', { output: tail(killed) });
  t.equal(fs.readFileSync(path.join(dir, 'latest'), 'utf8'), 'step-6\n', 'the last checkpoint is commit 6 (every 3 commits; step 8 never committed)');
  t.same(fs.readdirSync(dir).filter((n) => n.startsWith('step-')).sort(), ['step-3', 'step-6'], 'keep: 2');
  for (const [np, launcherArgs] of [[3, ['--min-np', '2']], [1, []]]) {
    const job = await runJob(np, ELASTIC_WORKER, { env: { CKPT_DIR: dir }, launcherArgs, timeoutMs: 120000 });
    t.equal(job.code, 0, `-np ${np} ${launcherArgs.join(' ')}: exits 0`, { output: tail(job) });
    for (const [rank, r] of job.reports.entries()) {
      t.ok(r, `-np ${np}: rank ${rank} reported`, { output: tail(job) });
      if (!r) continue;
      t.equal(r.startedAt, np === 3 ? 6 : 12, `-np ${np}: rank ${rank} resumed from commit ${np === 3 ? 6 : 12}`);
      t.ok(r.same, `-np ${np}: rank ${rank} ends with the uninterrupted run's values, bit for bit`, { w: r.w, ref: r.ref });
    }
  }
});

t.test('hora.elastic.State {checkpoint}: a worker that joins later (-np 3 --min-np 2, one lost and replaced) saves at the same commits as the others', async (t) => {
  const [dir] = tempDirs(t, 1);
  const mark = path.join(dir, 'left');
  const job = await runJob(3, ELASTIC_WORKER, {
    env: { CKPT_DIR: dir, CKPT_STEPS: '40', CKPT_STEP_MS: '100', CKPT_LEAVE_AT: '4', CKPT_LEAVE_MARK: mark, HORA_ELASTIC_SETTLE_S: '1' },
    launcherArgs: ['--min-np', '2'], timeoutMs: 180000,
  });
  t.equal(job.code, 0, 'exits 0', { output: tail(job) });
  t.ok(fs.existsSync(mark), 'rank 2 left after commit 4');
  const reports = job.reports.filter(Boolean);
  t.ok(reports.some((r) => r.startedAt > 4), 'a worker joined after the loss (its run started past commit 4)', { reports });
  for (const r of reports) t.ok(r.same && r.step === 40, `rank ${r.rank} ends at step 40 with the uninterrupted run's values`, { r });
  t.equal(fs.readFileSync(path.join(dir, 'latest'), 'utf8'), 'step-39\n', 'the last checkpoint is commit 39 (every 3)');
});

t.test('hora.elastic.State: a wrong checkpoint option is ERR_INVALID_ARGUMENT naming it', async (t) => {
  const hora = require('../dist/ts/index.js');
  const cases = [
    [{ checkpoint: { dir: '', everySteps: 1 } }, "argument 'options.checkpoint.dir'"],
    [{ checkpoint: { dir: 'x', everySteps: 0 } }, "argument 'options.checkpoint.everySteps'"],
    [{ checkpoint: { dir: 'x', everySteps: 2, keep: -1 } }, "argument 'options.checkpoint.keep'"],
    [{ checkpoint: { dir: 'x', every: 2 } }, "argument 'options.checkpoint.every' must be absent (options.checkpoint takes dir, everySteps, keep)"],
    [{ checkpiont: {} }, "'options.checkpiont' is not an option"],
    [7, "argument 'options' must be an object"],
  ];
  for (const [options, text] of cases) {
    t.throws(() => new hora.elastic.State({ step: 0 }, options), { name: 'HoraError', code: 'ERR_INVALID_ARGUMENT' }, text);
    try {
      new hora.elastic.State({ step: 0 }, options);
    } catch (e) {
      t.ok(e.message.includes(text), `names it: ${e.message}`);
    }
  }
});

t.test('bench/checkpoint.js runs (a small state, one round) and prints its medians against dd write and read', async (t) => {
  const { runProcess } = require('./support/hora-job');
  const r = await runProcess([path.join(__dirname, '..', 'bench', 'checkpoint.js'), '--mb', '8', '--ranks', '1,2', '--rounds', '1'], process.env, 120000);
  t.equal(r.code, 0, 'exits 0', { output: tail(r) });
  t.match(r.stdout, /medians of 1 round\(s\), each ratio hora \/ dd of the same round[^\n]*\n {2}1 rank\(s\): dd write \d+ MB\/s, read \d+ MB\/s; save \d+ MB\/s \([\d.]+x dd write, lowest [\d.]+x\), load \d+ MB\/s \([\d.]+x dd write, lowest [\d.]+x; [\d.]+x dd read, lowest [\d.]+x\), save with keep 1 \d+ MB\/s \([\d.]+x dd write, lowest [\d.]+x\)\n {2}2 rank\(s\)/,
    'prints the medians of the ratios and the lowest, save and load against dd write, load against dd read, and save with keep');
});
