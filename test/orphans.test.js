'use strict';
// A launcher killed outright (SIGKILL: no chance to stop anyone) leaves no worker running: each worker
// notices that its control connection to the launcher closed and exits.
const t = require('tap');
const path = require('node:path');
const { HORA, NODE, ROOT, startProcess } = require('./support/hora-job');

const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

t.test('hora run SIGKILLed: its idle workers exit within seconds', async (t) => {
  const launcher = startProcess(NODE, [HORA, 'run', '-np', '3', '--', NODE, path.join(__dirname, 'workers', 'idle-worker.js')], { cwd: ROOT });
  const readyPids = () => new Set([...launcher.stdout.matchAll(/ready pid (\d+)/g)].map((m) => Number(m[1])));
  if (!(await launcher.waitFor(() => readyPids().size === 3, 30000))) throw new Error(`workers did not start: ${launcher.stdout}`);
  const pids = readyPids();
  launcher.kill('SIGKILL');
  const killedAt = Date.now();
  while ([...pids].some(alive) && Date.now() - killedAt < 10000) await new Promise((r) => setTimeout(r, 100));
  const left = [...pids].filter(alive);
  t.same(left, [], `no worker left ${((Date.now() - killedAt) / 1000).toFixed(1)} s after the launcher was killed`);
  for (const pid of left) process.kill(pid, 'SIGKILL');
});
