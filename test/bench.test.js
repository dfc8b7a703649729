// hora bench under hora run: every collective runs, its table has one row per size, and every result
// checks out (#wrong 0); bad flags are usage errors.
const t = require('tap');
const { spawnAndCollect } = require('./support/spawn');
const path = require('path');

const cli = path.join(__dirname, '..', 'dist', 'ts', 'cli', 'main.js');

function bench(args, env = {}) {
  return spawnAndCollect(process.execPath, [cli, 'run', '-np', '2', process.execPath, cli, 'bench', ...args], {
    timeoutMs: 120000, env: { ...process.env, ...env },
  });
}

function rows(stdout) {
  return stdout.split('\n').map((l) => l.replace(/^\[0\]\s*/, '').trim().split(/\s+/)).filter((c) => /^\d+$/.test(c[0]));
}

for (const op of ['allreduce', 'broadcast', 'allgather', 'reducescatter']) {
  t.test(`hora bench --op ${op}`, async (t) => {
    const r = await bench(['--op', op, '--min', '4', '--max', '1M', '--iters', '3', '--warmup', '1']);
    t.equal(r.code, 0, `exit code (stderr: ${r.stderr.slice(-400)})`);
    const table = rows(r.stdout);
    t.equal(table.length, 10, 'one row per size from 4 B to 1 MiB by 4x');
    t.ok(table.every((c) => c[7] === '0'), 'every row checked with 0 wrong elements');
    t.ok(table.every((c) => Number(c[4]) > 0), 'every row has a time');
    // The last line, as nccl-tests ends its table: the mean of the busbw column.
    const last = r.stdout.trim().split('\n').pop().replace(/^\[0\]\s*/, '');
    const m = /^# Avg bus bandwidth {4}: (\d+\.\d{3}) GB\/s$/.exec(last);
    t.ok(m, `ends with the average bus bandwidth: ${last}`);
    const mean = table.reduce((sum, c) => sum + Number(c[6]), 0) / table.length;
    if (m) t.ok(Math.abs(Number(m[1]) - mean) <= 0.001 + 1e-9 * mean, `${m[1]} is the mean of the busbw column (${mean.toFixed(4)})`);
  });
}

t.test('hora bench with float16 avg over TCP', async (t) => {
  const r = await bench(['--dtype', 'float16', '--reduce-op', 'avg', '--max', '256K', '--iters', '2', '--warmup', '0'], { HORA_TRANSPORT: 'tcp' });
  t.equal(r.code, 0, r.stderr.slice(-400));
  t.ok(rows(r.stdout).every((c) => c[7] === '0'), 'no wrong elements');
});

t.test('hora bench --sync --reps 3: one row per size, each checked', async (t) => {
  const r = await bench(['--sync', '--reps', '3', '--min', '4', '--max', '64K', '--iters', '5', '--warmup', '1']);
  t.equal(r.code, 0, `exit code (stderr: ${r.stderr.slice(-400)})`);
  const table = rows(r.stdout);
  t.equal(table.length, 8, 'one row per size from 4 B to 64 KiB by 4x, not one per repetition');
  t.ok(table.every((c) => c[7] === '0' && Number(c[4]) > 0), 'every row checked, with a time');
});

t.test('bad flags are usage errors naming the flag', async (t) => {
  const r = await spawnAndCollect(process.execPath, [cli, 'bench', '--max', 'lots']);
  t.equal(r.code, 2);
  t.match(r.stderr, /--max expects a size such as 4, 64K or 256M; received "lots"/);
  const reps = await spawnAndCollect(process.execPath, [cli, 'bench', '--reps', '0']);
  t.equal(reps.code, 2);
  t.match(reps.stderr, /--reps expects an integer >= 1; received "0"/);
});

t.test('a bad flag under hora run: the usage once, from rank 0, not once per rank', async (t) => {
  const r = await bench(['--bogus']);
  t.not(r.code, 0, 'the job fails');
  const out = r.stdout + r.stderr;
  t.equal(out.split('usage: hora run -np N hora bench').length - 1, 1, 'the usage is printed once', { out });
  t.equal(out.split('hora bench: unknown option "--bogus"').length - 1, 1, 'the error is printed once', { out });
  t.match(r.stderr, /\[0\] hora bench: unknown option "--bogus"/, 'by rank 0');
});

t.test('without the launcher (a world of one) hora bench refuses, and says how to start it; with -np 1 it says what its columns are worth', async (t) => {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^(HORA_|OMPI_|PMI_|SLURM_)/.test(k) && !['RANK', 'WORLD_SIZE'].includes(k)) env[k] = v;
  const r = await spawnAndCollect(process.execPath, [cli, 'bench', '--max', '256M', '--iters', '1'], { timeoutMs: 60000, env });
  t.equal(r.code, 2, 'exit code 2', { stderr: r.stderr });
  t.equal(rows(r.stdout).length, 0, 'no rows of figures');
  t.match(r.stderr, /this job has one rank, and a collective over one rank moves no data: a world of one measures nothing/);
  t.match(r.stderr, /npx hora run -np 2 hora bench/, 'says how to start it');
  // Asked for on purpose (hora run -np 1: the cost of a call alone), it runs and says what its columns are worth.
  const one = await spawnAndCollect(process.execPath, [cli, 'run', '-np', '1', process.execPath, cli, 'bench', '--max', '16', '--iters', '3', '--warmup', '0'],
    { timeoutMs: 120000, env });
  t.equal(one.code, 0, 'hora run -np 1 hora bench runs', { stderr: one.stderr });
  t.equal(rows(one.stdout).length, 2, 'with its rows');
  t.match(one.stdout, /# a world of one: no data moves, time_us is the cost of a call alone; algbw and busbw measure nothing/);
});
