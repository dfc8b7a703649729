'use strict';
// `hora run` and the other CLI commands, driven as a user would: as child processes.
const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const { startProcess, spawnAndCollect } = require('./support/spawn');

const dist = path.join(__dirname, '..', 'dist', 'ts');
const HORA = path.join(dist, 'cli', 'main.js');
const NODE = process.execPath;

// Runs `hora ...args`; resolves {code, signal, stdout, stderr}. onSpawn(job) may signal it (support/spawn.js's handle).
function hora(args, { env = {}, timeoutMs = 30000, onSpawn } = {}) {
  const job = startProcess(NODE, [HORA, ...args], { env: { ...process.env, ...env }, timeoutMs });
  if (onSpawn) onSpawn(job);
  return job.done;
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
    onSpawn: async (job) => {
      while ((job.stdout.match(/ready/g) || []).length < 2) await sleep(20);
      job.kill('SIGTERM');
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
    onSpawn: (job) => job.child.stdout.once('data', () => job.child.stdout.destroy()),
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
    [['run', '--bind-to', 'socket', NODE], /--bind-to "socket" is invalid: expected core or none/],
    [['run', '--map-by', 'node', NODE], /--map-by "node" is invalid: expected core or socket/],
    [['run', '--bind-to', 'none', '--map-by', 'core', NODE], /--map-by "core" is invalid: expected to come without --bind-to none/],
    [['run', '-np', '2', '--min-np', '1', '--bind-to', 'core', NODE], /--bind-to "core" is invalid: expected no binding in an elastic job/],
    [['run', '--output-filename', '', NODE], /--output-filename "" is invalid: expected a directory name/],
    [['run', '-np', '2', '--nproc-per-node', '2', NODE], /--nproc-per-node "2" is invalid: expected either -np or --nproc-per-node/],
    [['run', '--nproc_per_node', '0', NODE], /--nproc-per-node "0" is invalid: expected a whole number/],
    [['run', '--nnodes', '2', NODE], /--nnodes "2" is invalid: expected 1 \(hora run starts the workers of every host itself.*-H host1:N,host2:N/],
    [['run', '--nnodes', '1:4', NODE], /--nnodes "1:4" is invalid: .*--min-np and --max-np/],
    [['run', '-H', 'localhost:1', '--standalone', NODE], /--standalone: one machine only/],
    [['run', '--master-addr', '10.0.0.1', NODE], /--master-addr: not an option of hora run: .*-H host1:N,host2:N.*--iface/],
    [['run', '--master_port=29500', NODE], /--master_port: not an option of hora run: /],
    [['run', '--rdzv-endpoint', 'h:29400', NODE], /--rdzv-endpoint: not an option of hora run: hora run hosts the rendezvous itself/],
    [['run', '--node_rank', '0', NODE], /--node_rank: not an option of hora run/],
    [['run', '--log-dir', 'logs', NODE], /--log-dir: not an option of hora run: hora run --output-filename DIR/],
    [['run', '--max-restarts', '3', NODE], /--max-restarts: not an option of hora run: .*--min-np/],
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

const run = { ...require(path.join(dist, 'cli', 'hosts.js')), ...require(path.join(dist, 'cli', 'worker-output.js')) };
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
  const r = await spawnAndCollect('/bin/sh', ['-c', `printf '%s\\0' ${words.map(ssh.shellQuote).join(' ')}`]);
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
  const job = startProcess('/bin/sh', ['-c', line], { stdin: 'pipe', timeoutMs: 20000 });
  if (env !== null) job.child.stdin.write(ssh.envLine(env));
  return job;
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
  while (!/pids \d+ \d+/.test(job.stdout)) await sleep(20);
  const pids = job.stdout.match(/pids (\d+) (\d+)/).slice(1).map(Number);
  job.child.stdin.write('SIGUSR2\n');
  while (!/got SIGUSR2/.test(job.stdout)) await sleep(20);
  job.child.stdin.write('SIGTERM\n');
  while (!/ignoring SIGTERM/.test(job.stdout)) await sleep(20);
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

// ---------------------------------------------------------------------------
// Job size, output files and CPU binding: what users of mpirun, horovodrun and torchrun reach for.

const STATUS_CPUS = 'console.log(process.env.HORA_RANK, process.env.HORA_LOCAL_RANK, process.env.HORA_SIZE, ' +
  'require("fs").readFileSync("/proc/self/status", "utf8").match(/^Cpus_allowed_list:\\s*(\\S+)/m)[1])';

/** The CPUs this process may run on, from /proc/self/status ("0-3,8" -> [0, 1, 2, 3, 8]); null off Linux. */
function allowedCpus() {
  let text;
  try {
    text = fs.readFileSync('/proc/self/status', 'utf8');
  } catch {
    return null;
  }
  const list = /^Cpus_allowed_list:\s*(\S+)/m.exec(text)[1];
  return list.split(',').flatMap((part) => {
    const [a, b = a] = part.split('-').map(Number);
    return Array.from({ length: b - a + 1 }, (_, i) => a + i);
  });
}

/** This machine's cores as lscpu-style sysfs gives them: allowed CPUs grouped by (package, core id), in CPU order. */
function machineCores() {
  const cpus = allowedCpus();
  if (cpus === null) return null;
  const read = (cpu, name) => {
    try {
      return fs.readFileSync(`/sys/devices/system/cpu/cpu${cpu}/topology/${name}`, 'utf8').trim();
    } catch {
      return `cpu${cpu}`;
    }
  };
  const cores = new Map();
  for (const cpu of cpus) {
    const key = `${read(cpu, 'physical_package_id')}/${read(cpu, 'core_id')}`;
    cores.set(key, [...(cores.get(key) ?? []), cpu]);
  }
  return [...cores.values()];
}

const list = (cpus) => {
  const out = [];
  for (let i = 0; i < cpus.length; ) {
    let j = i;
    while (j + 1 < cpus.length && cpus[j + 1] === cpus[j] + 1) j++;
    out.push(j > i ? `${cpus[i]}-${cpus[j]}` : String(cpus[i]));
    i = j + 1;
  }
  return out.join(',');
};

const tasksetMissing = require('node:child_process').spawnSync('taskset', ['-V']).error ? 'taskset (util-linux) is not installed here' : false;
const notLinux = allowedCpus() === null ? 'no /proc/self/status: not Linux' : false;

t.test('without -np, -H or a hostfile, one worker per core of this machine, as mpirun; with -H the slots decide', { skip: notLinux }, async (t) => {
  const cores = machineCores().length;
  const r = await hora(['run', NODE, '-e', 'console.log(process.env.HORA_SIZE)']);
  t.equal(r.code, 0, r.stderr);
  t.same(r.stdout.split('\n').filter(Boolean).sort(), Array.from({ length: cores }, (_, rank) => `[${rank}] ${cores}`), `${cores} workers`);
  const slots = await hora(['run', '-H', 'localhost:3', NODE, '-e', 'console.log(process.env.HORA_SIZE)']);
  t.same(slots.stdout.split('\n').filter(Boolean).sort(), ['[0] 3', '[1] 3', '[2] 3'], 'the slots of -H decide');
});

t.test('torchrun\'s and mpirun\'s spellings that mean what hora run does', async (t) => {
  const file = path.join(os.tmpdir(), `hora-machinefile-${process.pid}`);
  fs.writeFileSync(file, 'localhost slots=2\n');
  t.teardown(() => fs.rmSync(file, { force: true }));
  const cases = [
    [['--nproc-per-node', '3'], 3],
    [['--nproc_per_node=2', '--nnodes', '1', '--standalone'], 2],
    [['--nnodes=1:1', '--nproc-per-node', '1'], 1],
    [['--host', 'localhost:2'], 2],
    [['-host', 'localhost:1,127.0.0.1:1', '--nnodes', '1'], 2],
    [['-H', 'localhost:1,127.0.0.1:1', '--simulate-hosts', '--nnodes', '2', '--nproc-per-node', '2'], 4],
    [['--machinefile', file, '--tag-output'], 2],
    [['-hostfile', file, '--np', '1'], 1],
  ];
  for (const [flags, size] of cases) {
    const r = await hora(['run', ...flags, NODE, '-e', 'console.log(process.env.HORA_SIZE)']);
    t.equal(r.code, 0, `${flags.join(' ')}: ${r.stderr}`);
    t.same(r.stdout.split('\n').filter(Boolean).sort(), Array.from({ length: size }, (_, rank) => `[${rank}] ${size}`), flags.join(' '));
  }
});

t.test('--output-filename DIR: each rank\'s stdout and stderr in DIR/rank.N/, the terminal output as without it', async (t) => {
  const dir = path.join(os.tmpdir(), `hora-output-${process.pid}`, 'nested');
  t.teardown(() => fs.rmSync(path.dirname(dir), { recursive: true, force: true }));
  const script = 'console.log("hello from", process.env.HORA_RANK); console.error("to stderr"); process.stdout.write("no newline")';
  const r = await hora(['run', '-np', '3', '--output-filename', dir, NODE, '-e', script]);
  t.equal(r.code, 0, r.stderr);
  t.same(r.stdout.split('\n').filter(Boolean).sort(), ['[0] hello from 0', '[0] no newline', '[1] hello from 1', '[1] no newline', '[2] hello from 2', '[2] no newline']);
  t.same(r.stderr.split('\n').filter(Boolean).sort(), ['[0] to stderr', '[1] to stderr', '[2] to stderr']);
  t.same(fs.readdirSync(dir).sort(), ['rank.0', 'rank.1', 'rank.2']);
  for (const rank of [0, 1, 2]) {
    t.equal(fs.readFileSync(path.join(dir, `rank.${rank}`, 'stdout'), 'utf8'), `hello from ${rank}\nno newline`, `rank ${rank}'s stdout, byte for byte`);
    t.equal(fs.readFileSync(path.join(dir, `rank.${rank}`, 'stderr'), 'utf8'), 'to stderr\n', `rank ${rank}'s stderr`);
  }
  // A failed job keeps what its workers wrote; a second job empties the files it writes.
  const failed = await hora(['run', '-np', '2', '--output-filename', dir, NODE, '-e', 'console.log("before", process.env.HORA_RANK); process.exit(3)']);
  t.equal(failed.code, 3);
  t.equal(fs.readFileSync(path.join(dir, 'rank.1', 'stdout'), 'utf8'), 'before 1\n');
  const blocked = path.join(os.tmpdir(), `hora-output-file-${process.pid}`);
  fs.writeFileSync(blocked, 'a file, not a folder');
  t.teardown(() => fs.rmSync(blocked, { force: true }));
  const bad = await hora(['run', '-np', '1', '--output-filename', blocked, NODE, '-e', '0']);
  t.equal(bad.code, 1);
  t.match(bad.stderr, `hora run: --output-filename ${blocked}: cannot make the folder`);
});

t.test('outputFolder: rank.N padded to the width of the largest rank (as horovodrun); worker.N in an elastic job', async (t) => {
  t.equal(run.outputFolder('/o', 3, 4), path.join('/o', 'rank.3'));
  t.equal(run.outputFolder('/o', 3, 11), path.join('/o', 'rank.03'));
  t.equal(run.outputFolder('/o', 10, 11), path.join('/o', 'rank.10'));
  t.equal(run.outputFolder('/o', 7, 101), path.join('/o', 'rank.007'));
  t.equal(run.outputFolder('/o', 0, 1), path.join('/o', 'rank.0'));
  t.equal(run.outputFolder('/o', 2, 4, 9), path.join('/o', 'worker.9'));
});

t.test('--bind-to core: each local rank on its core, round-robin past the last core, said once', { skip: notLinux || tasksetMissing }, async (t) => {
  const cores = machineCores();
  const none = await hora(['run', '-np', '2', NODE, '-e', STATUS_CPUS]);
  t.equal(none.code, 0, none.stderr);
  for (const line of none.stdout.split('\n').filter(Boolean)) t.equal(line.split(' ')[4], list(allowedCpus()), `unbound without --bind-to: ${line}`);

  // The launcher itself runs on two cores (taskset around it), so a third rank wraps to the first core.
  const two = cores.slice(0, 2);
  const launcher = two.flat().sort((a, b) => a - b);
  const np = two.length + 1;
  const r = await spawnAndCollect('taskset', ['-c', list(launcher), NODE, HORA, 'run', '-np', String(np), '--bind-to', 'core', NODE, '-e', STATUS_CPUS]);
  t.equal(r.code, 0, r.stderr);
  const bound = r.stdout.split('\n').filter(Boolean).map((l) => l.split(' ')).sort((a, b) => Number(a[1]) - Number(b[1]));
  t.equal(bound.length, np);
  for (const [, rank, localRank, , cpus] of bound) t.equal(cpus, list(two[Number(localRank) % two.length]), `rank ${rank} is bound to core ${Number(localRank) % two.length}`);
  const notes = r.stderr.split('\n').filter((l) => l.includes('round-robin'));
  t.equal(notes.length, 1, 'said once');
  t.match(notes[0], `hora run: --bind-to core: ${np} ranks on this machine, which has ${two.length} core(s) for them: binding round-robin`);

  // --map-by alone binds too; with as many ranks as cores, nothing to say.
  const mapped = await hora(['run', '-np', '1', '--map-by', 'socket', NODE, '-e', STATUS_CPUS]);
  t.equal(mapped.code, 0, mapped.stderr);
  t.equal(mapped.stdout.trim().split(' ')[4], list(cores[0]), 'rank 0 on the first core of the first socket');
  t.notMatch(mapped.stderr, /round-robin/);
});

t.test('bindingFor: map-by core takes cores in order, map-by socket one socket after another; both wrap', async (t) => {
  const { bindingFor, cpuList, wrapNote } = require(path.join(dist, 'cli', 'bind.js'));
  // Two sockets of two cores, two hardware threads each (as Linux numbers them: siblings apart).
  const cores = [{ socket: 0, cpus: [0, 4] }, { socket: 0, cpus: [1, 5] }, { socket: 1, cpus: [2, 6] }, { socket: 1, cpus: [3, 7] }];
  t.same([0, 1, 2, 3, 4].map((r) => bindingFor(cores, r, 'core')), [[0, 4], [1, 5], [2, 6], [3, 7], [0, 4]]);
  t.same([0, 1, 2, 3, 4].map((r) => bindingFor(cores, r, 'socket')), [[0, 4], [2, 6], [1, 5], [3, 7], [0, 4]]);
  t.equal(cpuList([8, 0, 1, 2, 5, 6]), '0-2,5-6,8');
  t.equal(wrapNote(4, 4, 'h'), undefined);
  t.match(wrapNote(5, 4, 'h'), /5 ranks on h, which has 4 core\(s\) for them: binding round-robin, up to 2 ranks on a core/);
});

t.test('remote wrapper with --bind-to core: taskset on the remote host binds the worker to its local rank\'s core', { skip: notLinux || tasksetMissing }, async (t) => {
  const cores = machineCores();
  const last = cores.length - 1;
  const line = ssh.remoteCommandLine('/', NODE, ['-e', STATUS_CPUS], NODE, 30000, { mapBy: 'core', localRank: last, localSize: cores.length });
  const r = await runRemoteLine(line, { HORA_RANK: '5', HORA_LOCAL_RANK: String(last), HORA_SIZE: '6' }).done;
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout.trim(), `5 ${last} 6 ${list(cores[last])}`);
  t.notMatch(r.stderr, /round-robin/);
  // Local rank 0 of a host with more ranks than cores says so, once for the host.
  const wrap = await runRemoteLine(ssh.remoteCommandLine('/', NODE, ['-e', STATUS_CPUS], NODE, 30000, { mapBy: 'core', localRank: 0, localSize: cores.length + 1 }),
    { HORA_RANK: '0', HORA_LOCAL_RANK: '0', HORA_SIZE: '1' }).done;
  t.equal(wrap.code, 0, wrap.stderr);
  t.match(wrap.stderr, `hora run: --bind-to core: ${cores.length + 1} ranks on ${os.hostname()}, which has ${cores.length} core(s) for them`);
});
