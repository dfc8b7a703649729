'use strict';
// The launcher's status line: drawn below the output on a terminal, never on a pipe.
const t = require('tap');
const path = require('node:path');
const { StatusLine, formatStatus, formatBytes } = require('../dist/ts/cli/status-line.js');
const { HORA, NODE, ROOT, runProcess, spawnAndCollect } = require('./support/hora-job');

const ERASE = '\r\x1b[2K';

/** A stream that records writes, with a terminal width. */
function fakeTty(columns) {
  const writes = [];
  return { columns, writes, write(chunk) { writes.push(String(chunk)); return true; }, text: () => writes.join('') };
}

t.test('draws, prints output above itself, fits the width, and erases itself at the end', async (t) => {
  const tty = fakeTty(30);
  let n = 0;
  const line = new StatusLine(tty, () => `status ${++n} ${'x'.repeat(50)}`);
  line.start(60000);
  t.equal(tty.text(), `${ERASE}status 1 ${'x'.repeat(20)}`, 'cut to 29 columns: the last one is left free');
  tty.writes.length = 0;
  line.print(tty, '[0] hello\n');
  t.same(tty.writes, [ERASE, '[0] hello\n', `status 1 ${'x'.repeat(20)}`], 'erase, output, the line again');
  const err = fakeTty(30);
  tty.writes.length = 0;
  line.print(err, '[1] oops\n');
  t.same(err.writes, ['[1] oops\n'], 'output for another stream goes there');
  t.same(tty.writes, [ERASE, `status 1 ${'x'.repeat(20)}`], 'while the line is erased and redrawn on its own');
  tty.writes.length = 0;
  line.redraw();
  t.same(tty.writes, [`${ERASE}status 2 ${'x'.repeat(20)}`], 'redraw renders anew');
  tty.writes.length = 0;
  line.stop();
  line.print(tty, 'after\n');
  line.redraw();
  t.same(tty.writes, [ERASE, 'after\n'], 'after stop: erased once, output as is, no more drawing');
});

t.test('streamTo() hands whole chunks to print()', async (t) => {
  const tty = fakeTty(80);
  const line = new StatusLine(tty, () => 'S');
  line.start(60000);
  tty.writes.length = 0;
  const s = line.streamTo(tty);
  await new Promise((resolve) => s.write(Buffer.from('[0] a\n[0] b\n'), resolve));
  t.equal(tty.text(), `${ERASE}[0] a\n[0] b\nS`);
  line.stop();
});

t.test('the text: ranks up, collectives/s, bytes/s, and a stall when there is one', async (t) => {
  const snap = { size: 4, ranksUp: 3, collectivesPerS: 1234.4, bytesPerS: 52.3e6, stalls: [] };
  t.equal(formatStatus(snap), 'hora: ranks up 3/4 | 1234 collectives/s | 52.3 MB/s');
  t.equal(formatStatus({ ...snap, collectivesPerS: 2.25, bytesPerS: 999, stalls: [{ missing: [2, 3] }] }),
    'hora: ranks up 3/4 | 2.3 collectives/s | 999 B/s | STALL: ranks 2, 3 behind');
  t.equal(formatBytes(1.5e9), '1.5 GB');
  t.equal(formatStatus({ ...snap, messages: 0, messagesPerS: 0 }), 'hora: ranks up 3/4 | 1234 collectives/s | 52.3 MB/s', 'no messages: no messages/s');
  t.equal(formatStatus({ ...snap, collectivesPerS: 1, messages: 500, messagesPerS: 250.2 }),
    'hora: ranks up 3/4 | 1.0 collectives/s | 250 messages/s | 52.3 MB/s', 'send and recv calls once the job has made any');
});

t.test('hora run on a pipe prints no status line', async (t) => {
  const r = await runProcess([HORA, 'run', '-np', '2', '--', NODE, '-e', 'console.log("hi")'], process.env, 30000);
  t.equal(r.code, 0);
  t.equal(r.stdout.split('\n').sort().join('\n'), '\n[0] hi\n[1] hi');
  t.notMatch(r.stdout + r.stderr, /\x1b|ranks up/);
});

t.test('hora run on a terminal keeps the status line below the workers\' output', async (t) => {
  // script(1) gives the launcher a pseudo-terminal as stdout.
  const cmd = `${NODE} ${HORA} run -np 2 -- ${NODE} -e 'console.log("hi"); setTimeout(() => console.log("bye"), 1500)'`;
  const ran = await spawnAndCollect('script', ['-qec', cmd, '/dev/null'], { cwd: ROOT });
  const r = ran.error ? { skip: ran.error.message } : { code: ran.code, out: ran.stdout };
  if (r.skip) return t.skip(`script(1) is not available: ${r.skip}`);
  t.equal(r.code, 0, r.out);
  t.match(r.out, /hora: ranks up \d\/2 \| [\d.]+ collectives\/s \| [\d.]+ [kMG]?B\/s/, 'the status line was drawn');
  t.match(r.out, /\r\x1b\[2K\[\d\] hi\r?\n/, 'worker output is written after erasing the line');
  t.ok(r.out.endsWith('\r\x1b[2K'), 'and the line is erased at the end');
});
