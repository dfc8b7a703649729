'use strict';
// `hora run` and the other CLI commands, driven as a user would: as child processes.
const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');

const dist = path.join(__dirname, '..', 'dist', 'ts');
const HORA = path.join(dist, 'cli', 'main.js');
const NODE = process.execPath;

// Runs `hora ...args`; resolves {code, signal, stdout, stderr}. onSpawn(child) may signal it.
function hora(args, { env = {}, timeoutMs = 30000, onSpawn } = {}) {
  return new Promise((resolve) => {
    const child = spawn(NODE, [HORA, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    if (onSpawn) onSpawn(child, () => stdout);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

t.test('prefixes every line with the rank and flushes a partial last line', async (t) => {
  const script = 'console.log("hello from", process.env.HORA_RANK); console.error("to stderr"); process.stdout.write("no newline")';
  const r = await hora(['run', '-np', '3', NODE, '-e', script]);
  t.equal(r.code, 0);
  const out = r.stdout.split('\n').filter(Boolean).sort();
  t.same(out, ['[0] hello from 0', '[0] no newline', '[1] hello from 1', '[1] no newline', '[2] hello from 2', '[2] no newline']);
  t.same(r.stderr.split('\n').filter(Boolean).sort(), ['[0] to stderr', '[1] to stderr', '[2] to stderr']);
});

t.test('workers get the HORA_* contract and can register with the launcher', async (t) => {
  const script = `
    const { resolveLaunch, readSettings, advertiseAddress } = require(${JSON.stringify(path.join(dist, 'config.js'))});
    const { register } = require(${JSON.stringify(path.join(dist, 'control', 'client.js'))});
    const l = resolveLaunch();
    const s = readSettings();
    register({ addr: l.rendezvousAddr, port: l.rendezvousPort, secret: l.secret, rank: l.rank, hostId: s.hostId,
               dataAddr: advertiseAddress(s, l.rendezvousAddr), dataPort: 0, timeoutMs: 10000 })
      .then(({ table, self }) => console.log(JSON.stringify({ source: l.source, host: l.isRendezvousHost, env: [l.localRank, l.localSize, l.crossRank, l.crossSize],
        peer: [self.rank, self.localRank, self.localSize, self.crossRank, self.crossSize], job: table.jobId === process.env.HORA_JOB_ID })));`;
  const r = await hora(['run', '-np', '4', '-H', 'localhost:2,127.0.0.1:2', '--simulate-hosts', NODE, '-e', script]);
  t.equal(r.code, 0, r.stderr);
  const lines = r.stdout.split('\n').filter(Boolean).sort();
  t.equal(lines.length, 4);
  lines.forEach((line, rank) => {
    t.ok(line.startsWith(`[${rank}] `));
    const got = JSON.parse(line.slice(line.indexOf(' ') + 1));
    const local = rank % 2;
    const cross = rank < 2 ? 0 : 1;
    t.same(got, { source: 'hora', host: false, env: [local, 2, cross, 2], peer: [rank, local, 2, cross, 2], job: true });
  });
});

t.test('HORA_DEBUG=INFO: the launcher logs each rank\'s closed control connection once', async (t) => {
  const script = `require(${JSON.stringify(path.join(dist, 'index.js'))}).init().then(() => process.exit(0))`;
  const r = await hora(['run', '-np', '2', NODE, '-e', script], { env: { HORA_DEBUG: 'INFO' } });
  t.equal(r.code, 0, r.stderr);
  // A connection that closes after the launcher began to close its server is not logged at all.
  let seen = 0;
  for (const rank of [0, 1]) {
    const lines = r.stderr.split('\n').filter((l) => l.includes(`control connection of rank ${rank} closed`));
    t.ok(lines.length <= 1, `rank ${rank}: not more than one line`, { lines });
    seen += lines.length;
  }
  t.ok(seen >= 1, 'the line is logged', { stderr: r.stderr });
});

t.test('a worker exiting with 3 makes the launcher exit 3 and stop the others', async (t) => {
  const script = 'if (process.env.HORA_RANK === "1") setTimeout(() => process.exit(3), 200); else { console.log("pid", process.pid); setInterval(() => {}, 1000); }';
  const started = Date.now();
  const r = await hora(['run', '--grace', '0.5', '-np', '3', NODE, '-e', script]);
  t.equal(r.code, 3);
  t.match(r.stderr, /rank 1 exited with code 3/);
  t.ok(Date.now() - started < 10000, 'the others were stopped after the grace period');
  const pids = [...r.stdout.matchAll(/pid (\d+)/g)].map((m) => Number(m[1]));
  t.equal(pids.length, 2);
  for (const pid of pids) t.notOk(isAlive(pid), `worker ${pid} is gone`);
});

t.test('a worker killed by SIGKILL makes the launcher exit 137 and the others are killed', async (t) => {
  const script = `console.log("pid", process.pid);
    process.on("SIGTERM", () => {}); // a stubborn worker: only SIGKILL stops it
    if (process.env.HORA_RANK === "0") setTimeout(() => process.kill(process.pid, "SIGKILL"), 300);
    setInterval(() => {}, 1000);`;
  const r = await hora(['run', '--grace', '0.3', '-np', '3', NODE, '-e', script]);
  t.equal(r.code, 137);
  t.match(r.stderr, /rank 0 was killed by SIGKILL/);
  const pids = [...r.stdout.matchAll(/pid (\d+)/g)].map((m) => Number(m[1]));
  t.equal(pids.length, 3);
  for (const pid of pids) t.notOk(isAlive(pid), `worker ${pid} is gone`);
});

t.test('registered workers receive Abort when another fails', async (t) => {
  const script = `
    const { resolveLaunch, readSettings } = require(${JSON.stringify(path.join(dist, 'config.js'))});
    const { register } = require(${JSON.stringify(path.join(dist, 'control', 'client.js'))});
    const l = resolveLaunch();
    register({ addr: l.rendezvousAddr, port: l.rendezvousPort, secret: l.secret, rank: l.rank, hostId: readSettings().hostId,
               dataAddr: '127.0.0.1', dataPort: 0, timeoutMs: 10000 }).then(({ connection }) => {
      if (l.rank === 2) setTimeout(() => process.exit(4), 100);
      else { connection.onAbort((a) => { console.log("abort:", a.reason, a.rank, a.code); process.exit(1); }); setInterval(() => {}, 1000); }
    });`;
  const r = await hora(['run', '--grace', '5', '-np', '3', NODE, '-e', script]);
  t.equal(r.code, 4, 'the first failure decides the exit status');
  const aborts = r.stdout.split('\n').filter((l) => l.includes('abort:')).sort();
  t.same(aborts, ['[0] abort: rank 2 exited with code 4 2 ERR_PEER_LOST', '[1] abort: rank 2 exited with code 4 2 ERR_PEER_LOST']);
});

t.test('SIGTERM to the launcher is forwarded; it exits 143', async (t) => {
  const script = 'process.on("SIGTERM", () => { console.log("worker got SIGTERM"); process.exit(0); }); console.log("ready"); setInterval(() => {}, 1000);';
  const r = await hora(['run', '-np', '2', NODE, '-e', script], {
    onSpawn: async (child, stdout) => {
      while ((stdout().match(/ready/g) || []).length < 2) await sleep(20);
      child.kill('SIGTERM');
    },
  });
  t.equal(r.code, 143);
  t.equal((r.stdout.match(/worker got SIGTERM/g) || []).length, 2);
});

t.test('leftover /dev/shm/hora-<job>* files are removed', { skip: !fs.existsSync('/dev/shm') && 'no /dev/shm' }, async (t) => {
  const script = 'const f = "/dev/shm/hora-" + process.env.HORA_JOB_ID + "-seg" + process.env.HORA_RANK; require("fs").writeFileSync(f, "x"); console.log(f);';
  const r = await hora(['run', '-np', '2', NODE, '-e', script]);
  t.equal(r.code, 0);
  const files = [...r.stdout.matchAll(/(\/dev\/shm\/hora-\S+)/g)].map((m) => m[1]);
  t.equal(files.length, 2);
  for (const f of files) t.notOk(fs.existsSync(f), `${f} removed`);
});

t.test('a reader that closes the launcher\'s stdout does not block the workers', async (t) => {
  const r = await hora(['run', '-np', '2', NODE, '-e', 'for (let i = 0; i < 200000; i++) console.log(i)'], {
    timeoutMs: 20000,
    onSpawn: (child) => child.stdout.once('data', () => child.stdout.destroy()),
  });
  t.same([r.code, r.signal], [0, null]);
});

t.test('a command that cannot start exits 127', async (t) => {
  const r = await hora(['run', '-np', '2', 'hora-no-such-command-xyz']);
  t.equal(r.code, 127);
  t.match(r.stderr, /cannot start "hora-no-such-command-xyz"/);
});

t.test('bad arguments: exit 2 with a message naming the flag and the value', async (t) => {
  const cases = [
    [['run', '-np', '0', NODE], /-np "0"/],
    [['run', '-np', 'abc', NODE], /-np "abc"/],
    [['run', '-np', '2'], /command: missing/],
    [['run', NODE], /-np: missing/],
    [['run', '-np'], /-np: missing value/],
    [['run', '--frobnicate', '-np', '2', NODE], /--frobnicate/],
    [['run', '-np', '2', '--timeout', '-5', NODE], /--timeout "-5"/],
    [['run', '-np', '2', '--algo', 'bogus', NODE], /--algo "bogus"/],
    [['run', '-np', '2', '--debug', 'LOUD', NODE], /--debug "LOUD"/],
    [['run', '-np', '3', '-H', 'localhost:2', NODE], /-np "3".*at most 2/],
    [['run', '-np', '1', '-H', '-oProxyCommand=x:4', NODE], /-H "-oProxyCommand=x:4" is invalid: .*host names/],
    [['run', '-H', 'a:1,b:1', '--hostfile', __filename, NODE], /--hostfile .*either -H or --hostfile/],
    [['run', '--hostfile', '/no/such/hostfile', NODE], /--hostfile "\/no\/such\/hostfile" is invalid: expected a readable file/],
    [['run', '-np', '1', '-p', '0', NODE], /-p "0" is invalid: expected a TCP port/],
    [['run', '-np', '1', '--ssh-port', 'ssh', NODE], /-p "ssh" is invalid/],
    [['run', '-np', '1', '-i', '/no/such/key', NODE], /-i "\/no\/such\/key" is invalid: expected a readable private key/],
    [['run', '-np', '1', '--ssh-opts', '-o "User=x', NODE], /--ssh-opts "-o \\"User=x" is invalid: .*unbalanced "/],
    [['run', '-np', '1', '--iface', 'no-such-iface0', NODE], /--iface "no-such-iface0"/],
    [['run', '-np', '1', '-x'], /-x: missing value: give NAME or NAME=VALUE/],
    [['run', '-np', '1', '-x', '=v', NODE], /-x "=v" is invalid: expected NAME or NAME=VALUE with a variable name/],
    [['run', '-np', '1', '-x', '1X=v', NODE], /-x "1X=v" is invalid: .*"1X" is not one/],
    [['run', '-np', '1', '-x', 'A-B', NODE], /-x "A-B" is invalid: .*"A-B" is not one/],
    [['run', '-np', '1', '-x', 'HORA_TEST_UNSET_XYZ', NODE], /-x "HORA_TEST_UNSET_XYZ" is invalid: expected a variable set in the launcher's environment: HORA_TEST_UNSET_XYZ is unset here/],
    [['run', '-np', '1', '-x', 'HORA_RANK=3', NODE], /-x "HORA_RANK=3" is invalid: .*HORA_RANK, which hora run sets for each worker/],
    [['bogus'], /unknown command "bogus"/],
  ];
  for (const [args, pattern] of cases) {
    const r = await hora(args);
    t.equal(r.code, 2, args.join(' '));
    t.match(r.stderr, pattern, args.join(' '));
  }
  const env = await hora(['run', '-np', '2', NODE, '-e', '0'], { env: { HORA_TIMEOUT_S: 'never' } });
  t.equal(env.code, 2);
  t.match(env.stderr, /HORA_TIMEOUT_S "never"/);
  const list = await hora(['run', '-np', '1', NODE, '-e', '0'], { env: { HORA_RUN_EXPORT: 'A=1, B C' } });
  t.equal(list.code, 2);
  t.match(list.stderr, /HORA_RUN_EXPORT "A=1, B C" is invalid: .*"B C" is not one/);
  const unset = await hora(['run', '-np', '1', NODE, '-e', '0'], { env: { HORA_RUN_EXPORT: 'HORA_TEST_UNSET_XYZ' } });
  t.equal(unset.code, 2);
  t.match(unset.stderr, /HORA_RUN_EXPORT "HORA_TEST_UNSET_XYZ" is invalid: .*HORA_TEST_UNSET_XYZ is unset here/);
});

t.test('-x NAME, -x NAME=VALUE and HORA_RUN_EXPORT reach local workers; -x wins', async (t) => {
  const script = 'console.log(JSON.stringify(["XA", "XB", "XC", "XD", "XE"].map((n) => process.env[n] ?? null)))';
  const env = { XA: 'from launcher', XC: 'c here', XD: 'ignored', HORA_RUN_EXPORT: 'XC, XD=list,XE=' };
  const r = await hora(['run', '-np', '2', '-x', 'XA', '-x', 'XB=a=b c', '-x=XD=flag', NODE, '-e', script], { env });
  t.equal(r.code, 0, r.stderr);
  const lines = r.stdout.split('\n').filter(Boolean).sort();
  t.same(lines, [0, 1].map((rank) => `[${rank}] ${JSON.stringify(['from launcher', 'a=b c', 'c here', 'flag', ''])}`));
});

t.test('help, version and env', async (t) => {
  const help = await hora(['run', '--help']);
  t.equal(help.code, 0);
  for (const section of ['Job layout:', 'Worker environment:', 'Timeouts and shutdown:', 'Tuning', 'Logging and timeline:']) t.match(help.stdout, section);
  t.match(help.stdout, /Local workers inherit this environment whole\. Remote workers get .*\n.*\n.*HORA_\* variables, then the -x and HORA_RUN_EXPORT variables;\n\s*nothing else is forwarded/,
    'says what reaches remote workers');
  const main = await hora(['--help']);
  t.equal(main.code, 0);
  t.match(main.stdout, /run .*\n.*env .*\n.*bench/);
  const version = await hora(['--version']);
  t.equal(version.code, 0);
  t.equal(version.stdout.trim(), require('../package.json').version);
  const env = await hora(['env'], { env: { HORA_FUSION_MB: '32', HORA_SECRET: 'do-not-print' } });
  t.equal(env.code, 0);
  t.match(env.stdout, /HORA_FUSION_MB = "32"\s+\[default 64\]/);
  t.match(env.stdout, /HORA_SECRET = \(set, hidden\)/);
  t.match(env.stdout, /Read by `hora run` itself:\n  HORA_RUN_EXPORT = \(unset\)/);
  t.notMatch(env.stdout, /do-not-print/);
  t.match(env.stdout, /launched by: single/);
  const bad = await hora(['env'], { env: { HORA_DEBUG: 'LOUD' } });
  t.equal(bad.code, 1);
  t.match(bad.stdout, /HORA_DEBUG="LOUD" is invalid/);
  const json = await hora(['env', '--json']);
  t.equal(json.code, 0);
  t.ok(JSON.parse(json.stdout).variables.some((v) => v.name === 'HORA_TIMEOUT_S'));
});

// ---------------------------------------------------------------------------
// Launching over ssh: the parts that need no remote host (test/cluster-launcher.test.js runs real ones).

const run = require(path.join(dist, 'cli', 'run.js'));
const ssh = require(path.join(dist, 'cli', 'ssh.js'));
const os = require('node:os');

t.test('hostfile: "host slots=N" lines, comments and blank lines; errors name the file, line and text', async (t) => {
  const text = '# cluster\n\nnode1 slots=4\n  alice@node2   slots = 2  # trailing comment\nnode3\nlocalhost slots=1\n';
  t.same(run.parseHostfile(text, 'hosts.txt'), [
    { host: 'node1', slots: 4, remote: true },
    { host: 'alice@node2', slots: 2, remote: true },
    { host: 'node3', slots: 1, remote: true },
    { host: 'localhost', slots: 1, remote: false },
  ]);
  const bad = [
    ['node1 slots=4\nnode2 slots=zero\n', /--hostfile hosts.txt line 2 "node2 slots=zero" is invalid: expected "host slots=N"/],
    ['node1 slots=0', /line 1 "node1 slots=0" is invalid: expected at least 1 slot for node1/],
    ['node1 4', /line 1 "node1 4"/],
    ['# nothing\n\n', /--hostfile "hosts.txt" is invalid: expected at least one/],
    ['-oProxyCommand=x slots=1', /line 1 "-oProxyCommand=x slots=1" is invalid: expected a host name/],
  ];
  for (const [content, pattern] of bad) t.throws(() => run.parseHostfile(content, 'hosts.txt'), pattern, JSON.stringify(content));

  const file = path.join(os.tmpdir(), `hora-hostfile-${process.pid}`);
  fs.writeFileSync(file, 'localhost slots=2\n127.0.0.1 slots=1 # three workers in all\n');
  t.teardown(() => fs.rmSync(file, { force: true }));
  const r = await hora(['run', '--hostfile', file, NODE, '-e', 'console.log(process.env.HORA_SIZE)']);
  t.equal(r.code, 0, r.stderr);
  t.same(r.stdout.split('\n').filter(Boolean).sort(), ['[0] 3', '[1] 3', '[2] 3'], '-np defaults to the slots of the hostfile');
  fs.writeFileSync(file, 'localhost slots=2\nlocalhost slots=two\n');
  const bad2 = await hora(['run', '--hostfile', file, NODE, '-e', '0']);
  t.equal(bad2.code, 2);
  t.match(bad2.stderr, `--hostfile ${file} line 2 "localhost slots=two" is invalid`);
});

t.test('--ssh-opts is split like a shell would', async (t) => {
  const cases = [
    ['', []],
    ['  -F  ./cfg  ', ['-F', './cfg']],
    [`-o 'ProxyCommand=ssh -W %h:%p gw' -o "User=a b"`, ['-o', 'ProxyCommand=ssh -W %h:%p gw', '-o', 'User=a b']],
    [`a\\ b "c\\"d" 'e\\f' x""y ''`, ['a b', 'c"d', 'e\\f', 'xy', '']],
  ];
  for (const [text, words] of cases) t.same(ssh.splitShellWords(text), words, text);
  t.throws(() => ssh.splitShellWords(`-o 'x`), /unbalanced '/);
  t.throws(() => ssh.splitShellWords('x\\'), /trailing/);
});

t.test('shellQuote: a POSIX shell gets every word back unchanged', async (t) => {
  const words = ['plain', 'with space', "it's", '"dq"', '$HOME', '`cmd`', 'a\nb', '*', '', 'back\\slash', '-e'];
  const r = require('node:child_process').spawnSync('/bin/sh', ['-c', `printf '%s\\0' ${words.map(ssh.shellQuote).join(' ')}`], { encoding: 'utf8' });
  t.same(r.stdout.split('\0').slice(0, -1), words);
});

t.test('ssh arguments: user options first (they win), then -p, -i, hora defaults, and the host after --', async (t) => {
  const args = ssh.sshArgs('user@node1', { extraArgs: ['-F', 'cfg'], port: 2222, identity: '/k' }, 'echo hi');
  t.same(args.slice(0, 6), ['-F', 'cfg', '-p', '2222', '-i', '/k']);
  t.ok(args.includes('BatchMode=yes'), 'never prompts for a password');
  t.match(args.join(' '), /ConnectTimeout=\d+/);
  t.same(args.slice(-3), ['--', 'user@node1', 'echo hi']);
  t.same(ssh.sshArgs('h', { extraArgs: [] }, 'x').slice(0, 2), ['-o', 'BatchMode=yes']);
});

t.test('remote workers get the launcher\'s HORA_* variables; an HORA_IFACE address stays behind', async (t) => {
  const env = ssh.remoteWorkerEnv({ PATH: '/bin', HORA_TEST_X: 'y', HORA_IFACE: '10.0.0.5', HORA_RANK: 'old' }, { HORA_RANK: '3' });
  t.same(env, { HORA_TEST_X: 'y', HORA_RANK: '3' });
  t.same(ssh.remoteWorkerEnv({ HORA_IFACE: 'eth1' }, {}), { HORA_IFACE: 'eth1' }, 'an interface name is passed on');
  t.throws(() => ssh.envLine({ 'BAD NAME': 'x' }), /BAD NAME/);
  t.equal(ssh.envLine({ A: 'line\nbreak' }), '{"A":"line\\nbreak"}\n', 'one line, whatever the values hold');
});

// Runs a remote command line through a local shell, as sshd would; stdin is the control channel, its
// first line the worker's environment (env; null writes nothing).
function runRemoteLine(line, env = {}) {
  const child = spawn('/bin/sh', ['-c', line], { stdio: ['pipe', 'pipe', 'pipe'] });
  if (env !== null) child.stdin.write(ssh.envLine(env));
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const done = new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
  const timer = setTimeout(() => child.kill('SIGKILL'), 20000);
  done.then(() => clearTimeout(timer));
  return { child, done, stdout: () => stdout };
}

t.test('remote command line: cwd, variables and arguments arrive intact; the exit status comes back', async (t) => {
  const args = ['with space', "it's", '$HOME', '-e'];
  const script = 'console.log(JSON.stringify({ cwd: process.cwd(), v: process.env.HORA_TEST_V, args: process.argv.slice(1) })); process.exit(7)';
  const value = `a 'b' "c" $d\nsecond line`;
  const line = ssh.remoteCommandLine(os.tmpdir(), NODE, ['-e', script, ...args]);
  t.notOk(line.includes('second line'), 'no value on the command line');
  const r = await runRemoteLine(line, { HORA_TEST_V: value }).done;
  t.equal(r.code, 7, r.stderr);
  t.same(JSON.parse(r.stdout), { cwd: fs.realpathSync(os.tmpdir()), v: value, args });
  const missing = await runRemoteLine(ssh.remoteCommandLine('/', 'hora-no-such-command-xyz', [])).done;
  t.equal(missing.code, 127);
  t.match(missing.stderr, /cannot start "hora-no-such-command-xyz"/);
});

t.test('remote wrapper: a line on stdin signals the worker\'s group; end of input stops it, children included', async (t) => {
  // The worker starts a child of its own and ignores the first SIGTERM.
  const script = `const c = require("child_process").spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], { stdio: "ignore" });
    console.log("pids", process.pid, c.pid);
    let terms = 0;
    process.on("SIGUSR2", () => console.log("got SIGUSR2"));
    process.on("SIGTERM", () => { if (++terms > 1) process.exit(0); console.log("ignoring SIGTERM"); });
    setInterval(() => {}, 1000);`;
  const job = runRemoteLine(ssh.remoteCommandLine('/', NODE, ['-e', script]));
  while (!/pids \d+ \d+/.test(job.stdout())) await sleep(20);
  const pids = job.stdout().match(/pids (\d+) (\d+)/).slice(1).map(Number);
  job.child.stdin.write('SIGUSR2\n');
  while (!/got SIGUSR2/.test(job.stdout())) await sleep(20);
  job.child.stdin.write('SIGTERM\n');
  while (!/ignoring SIGTERM/.test(job.stdout())) await sleep(20);
  const ended = Date.now();
  job.child.stdin.end(); // as when the launcher or ssh goes away
  const r = await job.done;
  t.equal(r.code, 0, 'the worker took the second SIGTERM and exited 0');
  t.ok(Date.now() - ended < 3000, 'end of input sent SIGTERM at once');
  for (const pid of pids) t.notOk(isAlive(pid), `process ${pid} is gone`);
});

t.test('remote wrapper: without its environment line the worker never starts, and the wrapper does not wait forever', async (t) => {
  const marker = path.join(os.tmpdir(), `hora-wrapper-started-${process.pid}`);
  t.teardown(() => fs.rmSync(marker, { force: true }));
  const script = `require("fs").writeFileSync(${JSON.stringify(marker)}, "x")`;
  // ssh died before the launcher's first line got through: input ends.
  const closed = runRemoteLine(ssh.remoteCommandLine('/', NODE, ['-e', script]), null);
  closed.child.stdin.end();
  const r1 = await closed.done;
  t.equal(r1.code, 1);
  t.match(r1.stderr, /connection closed before it sent the worker's environment; not starting/);
  // Input stays open but nothing comes: the wrapper gives up after its wait (1 s here).
  const started = Date.now();
  const silent = runRemoteLine(ssh.remoteCommandLine('/', NODE, ['-e', script], NODE, 1000), null);
  const r2 = await silent.done;
  t.equal(r2.code, 1);
  t.match(r2.stderr, /no environment from the launcher within 1 s; not starting/);
  t.ok(Date.now() - started < 15000, 'gave up by itself');
  silent.child.stdin.destroy();
  // Something other than an environment.
  const garbled = runRemoteLine(ssh.remoteCommandLine('/', NODE, ['-e', script]), null);
  garbled.child.stdin.write('SIGTERM\n');
  const r3 = await garbled.done;
  t.equal(r3.code, 1);
  t.match(r3.stderr, /not the worker's environment/);
  t.notOk(fs.existsSync(marker), 'the worker never ran');
});

t.test('HORA_TRANSPORT=shm: shared memory between ranks of one host; across hosts every rank fails, naming the hosts', async (t) => {
  const script = `const hora = require(${JSON.stringify(path.join(dist, 'index.js'))});
    hora.init().then(async () => {
      const y = await hora.allreduce(new Float64Array([hora.rank() + 1]), { op: 'sum' });
      console.log('sum', y[0]);
      await hora.shutdown();
    }, (e) => { console.log('error', e.code, e.message); process.exit(5); });`;
  const one = await hora(['run', '-np', '3', '--transport', 'shm', '--debug', 'INFO', NODE, '-e', script]);
  t.equal(one.code, 0, one.stderr);
  t.same(one.stdout.split('\n').filter(Boolean).sort(), ['[0] sum 6', '[1] sum 6', '[2] sum 6']);
  t.equal((one.stderr.match(/connected to 2 peers in [\d.]+ ms \(2 over shared memory;/g) || []).length, 3, 'every pair over shared memory');

  const two = await hora(['run', '-H', 'localhost:2,127.0.0.1:1', '--simulate-hosts', '--grace', '20', '--transport', 'shm', NODE, '-e', script]);
  t.equal(two.code, 5, two.stderr);
  const [id0, id1] = ['#0', '#1'].map((suffix) => JSON.stringify(`${require('../dist/ts/config.js').defaultHostId()}${suffix}`));
  for (const rank of [0, 1, 2]) {
    t.match(two.stdout, `[${rank}] error ERR_INVALID_ARGUMENT hora.init on rank ${rank}: HORA_TRANSPORT=shm needs every rank on one host, ` +
      `but the job spans 2 hosts (ranks 0, 1 on ${id0}; rank 2 on ${id1}); use auto`, `rank ${rank} names the setting and the hosts`);
  }
});
