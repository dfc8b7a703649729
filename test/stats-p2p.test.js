'use strict';
// Point-to-point traffic in the figures the launcher shows (dashboard, status line): each rank's Stats counts
// its send and recv calls and their bytes, outside the collectives' order; a pipeline stage's waits for its
// messages are communication time of its training steps.
const t = require('tap');
const path = require('node:path');
const { runScenario } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'stats-p2p-worker.js');
const kind = (stats, name) => stats.kinds.find((k) => k.kind === name);
const counted = (stats, name) => kind(stats, name) ?? { count: 0, bytes: 0 };

t.test('send and recv are counted with their bytes, on the rank that made each call, and take no sequence number', async (t) => {
  const { results: [sender, receiver] } = await runScenario(t, 2, WORKER, 'messages');
  t.same(kind(sender, 'send'), { kind: 'send', count: 5, bytes: 20000, busyUs: 0 }, 'rank 0: 5 sends of 4000 bytes');
  t.notOk(kind(sender, 'recv'), 'rank 0 received nothing');
  t.same(kind(receiver, 'recv'), { kind: 'recv', count: 5, bytes: 20000, busyUs: 0 }, 'rank 1: 5 receives of 4000 bytes');
  t.notOk(kind(receiver, 'send'), 'rank 1 sent nothing');
  for (const s of [sender, receiver]) {
    t.same([s.submitted, s.completed], [1, 1], 'the allreduce alone is in the order of collectives the stall inspector compares');
    t.match(kind(s, 'allreduce'), { count: 1, bytes: 40 });
  }
});

t.test('a pipeline stage that waits for its messages spends that time communicating, as its steps report it', async (t) => {
  const { results } = await runScenario(t, 2, WORKER, 'pipeline');
  for (const [rank, s] of results.entries()) {
    if (!s) continue;
    t.ok(counted(s, 'send').count > 0 && counted(s, 'send').bytes > 0, `rank ${rank}: sends counted (${JSON.stringify(kind(s, 'send'))})`);
    t.ok(counted(s, 'recv').count > 0 && counted(s, 'recv').bytes > 0, `rank ${rank}: receives counted (${JSON.stringify(kind(s, 'recv'))})`);
    t.equal(s.steps, 6, `rank ${rank}: one step per batch`);
    const idle = 1 - s.pipeline.busyUs / s.pipeline.wallUs;
    const comm = s.commWaitUs / s.stepUs;
    t.ok(Math.abs(comm - idle) < 0.2, `rank ${rank}: communication ${comm.toFixed(3)} of its steps, as much as the stage idles (${idle.toFixed(3)})`);
  }
  const light = results[1];
  t.ok(light && 1 - light.pipeline.busyUs / light.pipeline.wallUs > 0.5, 'stage 1 (one small layer) idles most of each batch');
  t.ok(light && light.commWaitUs / light.stepUs > 0.5, 'and the step split says so: mostly communication');
});
