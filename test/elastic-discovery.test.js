'use strict';
// hora run --host-discovery-script: workers follow the hosts a script lists. Every host here is a loopback
// address of this machine; --simulate-hosts makes each one a host of its own (its own HORA_HOST_ID).
// The script prints a file the test rewrites while the job runs; a file holding FAIL makes it fail.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { WORKER, NODE, expectedChecksum, hora, checkClean, checkFinished } = require('./support/elastic-job');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-discovery-'));
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));

let scripts = 0;
/** A discovery script printing `hosts` (rewritten with set()), and the file it reads. */
function discovery(hosts) {
  const n = ++scripts;
  const file = path.join(dir, `hosts-${n}`);
  const script = path.join(dir, `discover-${n}.sh`);
  // The file is replaced whole (rename) and the script reads it once, so a run of the script that
  // overlaps set() sees the old list or the new one, never an empty file or FAIL printed as a host.
  const set = (text) => {
    fs.writeFileSync(`${file}.new`, text);
    fs.renameSync(`${file}.new`, file);
  };
  set(hosts);
  fs.writeFileSync(script, `#!/bin/sh\nhosts=$(cat '${file}')\ncase "$hosts" in *FAIL*) echo 'cannot reach the cluster API' >&2; exit 3;; esac\nprintf '%s\\n' "$hosts"\n`, { mode: 0o755 });
  return { script, set };
}

const STEPS = 400;
const EXPECTED = expectedChecksum(STEPS);
const env = { ELASTIC_STEPS: String(STEPS), ELASTIC_STEP_MS: '20' };
// Waits until `pattern` has been seen on the launcher's output, then runs `then` (once).
function when(pattern, then) {
  let done = false;
  return (line, child) => {
    if (done || !pattern.test(line)) return;
    done = true;
    then(child);
  };
}

t.test('a host the script adds gets a worker that joins at the next commit; a failing script is retried with a warning', async (t) => {
  const d = discovery('localhost:2\n');
  const steps = [
    when(/^\[0\] step 30 size 2 /, () => d.set('FAIL\n')),
    when(/--host-discovery-script .* exited with 3/, () => d.set('localhost:2\n127.0.0.2:1\n')),
  ];
  const r = await hora(['run', '--min-np', '2', '--max-np', '3', '--host-discovery-script', d.script, NODE, WORKER], env,
    { onLine: (line, child) => steps.forEach((s) => s(line, child)) });
  checkFinished(t, r, 3, { steps: STEPS, expected: EXPECTED });
  t.match(r.stderr, /exited with 3; it must exit 0 after printing "host:slots" lines; its stderr: cannot reach the cluster API \(failed 1 time\(s\) in a row; retrying every 1 s, keeping the hosts it listed last\)/,
    'the failed run is reported with its stderr');
  t.match(r.stderr, /works again after \d+ failed run\(s\)/);
  t.match(r.stderr, /starting worker 2 on 127\.0\.0\.2 \(a free slot the discovery script lists\)/);
  for (const x of r.results) t.equal(x.size, 3, `worker ${x.workerId} ends in a world of 3`);
  const joiner = r.results.find((x) => x.workerId === 2);
  t.ok(joiner && joiner.executed < STEPS, 'the new worker got the state by sync, not by training from step 0');
  t.ok(r.results.every((x) => x.workerId === 2 || x.resets === 1), 'the old workers re-formed once, at a commit');
  t.ok(r.results.every((x) => x.workerId === 2 || x.executed === STEPS), 'the join rolled nothing back');
  checkClean(t, r);
});

t.test('a failed host is blacklisted; below --min-np the job waits until the script lists a new host (Horovod #3494)', async (t) => {
  const d = discovery('127.0.0.2:1\n127.0.0.3:1\n');
  // Worker 1 runs on 127.0.0.3 and dies; the script keeps listing that host, and later adds 127.0.0.4.
  const steps = [when(/host 127\.0\.0\.3 is blacklisted/, () => setTimeout(() => d.set('127.0.0.2:1\n127.0.0.3:1\n127.0.0.4:1\n'), 2500))];
  // Later 127.0.0.3 leaves the list (it comes back as a new machine after that).
  steps.push(when(/^\[0\] step 200 size 2 /, () => d.set('127.0.0.2:1\n127.0.0.4:1\n')));
  const r = await hora(['run', '--min-np', '2', '--simulate-hosts', '--host-discovery-script', d.script, NODE, WORKER],
    { ...env, ELASTIC_KILL: '1:23:SIGKILL' }, { onLine: (line, child) => steps.forEach((s) => s(line, child)) });
  checkFinished(t, r, 2, { steps: STEPS, expected: EXPECTED });
  t.same(r.results.map((x) => x.workerId).sort(), [0, 2], 'worker 2 took the place of worker 1');
  t.match(r.stderr, /worker 1 was killed by SIGKILL; the job goes on without it/);
  t.match(r.stderr, /host 127\.0\.0\.3 is blacklisted after worker 1's failure: no new worker starts there/);
  t.notMatch(r.stderr, /starting worker \d+ on 127\.0\.0\.3/, 'no worker went to the blacklisted host');
  t.match(r.stderr, /starting worker 2 on 127\.0\.0\.4/);
  t.match(r.stderr, /the world re-formed with 2 rank\(s\)/);
  t.match(r.stderr, /blacklisted host 127\.0\.0\.3 left the discovery script's list; if it comes back it gets workers again/);
  checkClean(t, r);
});

t.test('a host that leaves the list has its worker stopped, is not blacklisted, and may come back', async (t) => {
  const d = discovery('127.0.0.2:1\n127.0.0.3:1\n127.0.0.4:1\n');
  const steps = [
    when(/^\[0\] step 30 size 3 /, () => d.set('127.0.0.2:1\n127.0.0.3:1\n')),
    when(/^\[0\] step \d+ size 2 /, () => d.set('127.0.0.2:1\n127.0.0.3:1\n127.0.0.4:1\n')),
  ];
  const r = await hora(['run', '--min-np', '2', '--simulate-hosts', '--host-discovery-script', d.script, NODE, WORKER], env,
    { onLine: (line, child) => steps.forEach((s) => s(line, child)) });
  checkFinished(t, r, 3, { steps: STEPS, expected: EXPECTED });
  t.match(r.stderr, /the discovery script no longer lists 127\.0\.0\.4: stopping a worker there/);
  t.notMatch(r.stderr, /blacklisted/, 'a host that left the list is not blacklisted');
  t.match(r.stderr, /starting worker 3 on 127\.0\.0\.4/, 'the host got a worker again when it came back');
  t.same(r.results.map((x) => x.workerId).sort(), [0, 1, 3]);
  checkClean(t, r);
});

t.test('a bad discovery script or option is refused before anything starts, naming it', async (t) => {
  const bad = (name, text, mode = 0o755) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, text, { mode });
    return file;
  };
  const fails = bad('fails.sh', '#!/bin/sh\necho "no credentials for the cluster API" >&2\nexit 4\n');
  const garbage = bad('garbage.sh', '#!/bin/sh\necho "localhost:2"\necho "node 7 slots"\n');
  const zero = bad('zero.sh', '#!/bin/sh\necho "localhost:0"\n');
  const empty = bad('empty.sh', '#!/bin/sh\necho "# nothing yet"\n');
  const plain = bad('plain.sh', '#!/bin/sh\necho localhost:2\n', 0o644);
  const ok = bad('ok.sh', '#!/bin/sh\necho localhost:2\n');
  const missing = path.join(dir, 'missing.sh');
  const cases = [
    [['--min-np', '1', '--host-discovery-script', missing], /--host-discovery-script ".*missing\.sh" is invalid: expected an executable file \(ENOENT/],
    [['--min-np', '1', '--host-discovery-script', plain], /--host-discovery-script ".*plain\.sh" is invalid: expected an executable file \(it is not executable/],
    [['--min-np', '1', '--host-discovery-script', fails], /--host-discovery-script .*fails\.sh: exited with 4; it must exit 0 .*its stderr: no credentials for the cluster API/],
    [['--min-np', '1', '--host-discovery-script', garbage], /--host-discovery-script .*garbage\.sh output line 2 "node 7 slots" is invalid: expected "host" or "host:slots"/],
    [['--min-np', '1', '--host-discovery-script', zero], /output line 1 "localhost:0" is invalid: expected at least 1 slot for localhost/],
    [['--min-np', '1', '--host-discovery-script', empty], /empty\.sh: printed no host/],
    [['--min-np', '1', '-H', 'localhost:2', '--host-discovery-script', ok], /expected either -H or a discovery script, not both/],
    [['--host-discovery-script', ok], /--host-discovery-script ".*ok\.sh" is invalid: expected to come with --min-np/],
    [['-np', '3', '--min-np', '1', '--host-discovery-script', ok], /-np "3" is invalid: expected at most 2, the slots given by the hosts that --host-discovery-script .*ok\.sh lists/],
  ];
  for (const [args, pattern] of cases) {
    const r = await hora(['run', ...args, NODE, '-e', 'console.log("started")']);
    t.equal(r.code, 2, args.join(' '));
    t.match(r.stderr, pattern);
    t.notMatch(r.stdout, /started/, 'no worker started');
  }
});
