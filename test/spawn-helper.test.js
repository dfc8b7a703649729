'use strict';
// test/support/spawn.js, the one way tests start processes: what the other tests rely on it for.
const t = require('tap');
const fs = require('node:fs');
const { startProcess, spawnAndCollect, timeoutNote } = require('./support/spawn');

const NODE = process.execPath;
// Running (a zombie waiting for whoever adopted it to reap it counts as gone).
const alive = (pid) => {
  try {
    return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

t.test('collects stdout, stderr and both as they came; the exit code; env, cwd and stdin reach the process', async (t) => {
  const script = `process.stdout.write("out " + process.env.SPAWN_TEST_V + " " + process.cwd() + "\\n");
    process.stderr.write("err\\n");
    let input = ""; process.stdin.on("data", (d) => (input += d)).on("end", () => { console.log("in " + input); process.exit(3); });`;
  const r = await spawnAndCollect(NODE, ['-e', script], { env: { ...process.env, SPAWN_TEST_V: 'v' }, cwd: '/', stdin: 'typed' });
  t.equal(r.code, 3);
  t.equal(r.signal, null);
  t.equal(r.stdout, 'out v /\nin typed\n');
  t.equal(r.stderr, 'err\n');
  t.equal(r.output.length, r.stdout.length + r.stderr.length, 'output holds both');
  t.equal(r.timedOut, false);
  t.equal(timeoutNote(r), '', 'nothing to say without a timeout');
});

t.test('a process past its time limit is SIGKILLed and the result says so', async (t) => {
  const h = startProcess(NODE, ['-e', 'process.on("SIGTERM", () => {}); console.log("up"); setInterval(() => {}, 1000)'], { timeoutMs: 500 });
  const r = await h.done;
  t.equal(r.signal, 'SIGKILL');
  t.equal(r.timedOut, true);
  t.match(timeoutNote(r), /SIGKILLed by the test: it ran past its time limit/);
  t.notOk(alive(h.pid), 'gone');
});

t.test('waitFor sees output as it comes; kill signals at that moment, and not once the process has exited', async (t) => {
  const chunks = [];
  const h = startProcess(NODE, ['-e', 'process.on("SIGTERM", () => { console.log("got SIGTERM"); process.exit(0); }); console.log("ready"); setInterval(() => {}, 1000)'],
    { timeoutMs: 20000, onStdout: (text) => chunks.push(text) });
  t.equal(await h.waitFor(/ready/), true);
  t.equal(h.kill('SIGTERM'), true);
  const r = await h.done;
  t.equal(r.code, 0);
  t.match(r.stdout, /got SIGTERM/);
  t.equal(chunks.join(''), r.stdout, 'onStdout saw every chunk');
  t.equal(h.kill('SIGKILL'), false, 'an exited process is not signalled');
  t.equal(await h.waitFor(/never/), false, 'waitFor gives up when the process has ended');
});

t.test('detached: the timeout ends the whole process group', { timeout: 15000 }, async (t) => {
  const h = startProcess('bash', ['-c', `${NODE} -e 'console.log(process.pid); setInterval(() => {}, 1000)' & wait`], { detached: true, timeoutMs: 1500 });
  await h.waitFor(/\d+\n/, 10000);
  const grandchild = Number(h.stdout.trim());
  const r = await h.done;
  t.equal(r.timedOut, true);
  await new Promise((r) => setTimeout(r, 200));
  t.notOk(alive(grandchild), 'the grandchild went with the group');
});

t.test('a command that cannot start resolves with the error', async (t) => {
  const r = await spawnAndCollect('hora-no-such-command-xyz', []);
  t.equal(r.error && r.error.code, 'ENOENT');
  t.equal(r.code, null);
});

t.test('a character split between two chunks of output arrives whole', async (t) => {
  const script = 'const b = Buffer.from("é"); process.stdout.write(b.subarray(0, 1)); setTimeout(() => process.stdout.write(b.subarray(1)), 200)';
  const r = await spawnAndCollect(NODE, ['-e', script]);
  t.equal(r.stdout, 'é');
});
