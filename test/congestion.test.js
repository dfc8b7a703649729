'use strict';
// TCP connections between two ranks of one host use Reno, which does not pace, from their first packet
// (a pacing congestion control such as BBR slowed a 1 MiB message over loopback by 3.5x;
// native/src/transport/tcp/connect.cc). Read back with `ss` inside each rank. Between hosts the system's
// choice stays: test/cluster-allreduce.test.js checks that on a simulated cluster.
const t = require('tap');
const path = require('node:path');
const { runJob, tail } = require('./support/hora-job');
const { ssMissing, rankToRankEnds } = require('./support/congestion');

const WORKER = path.join(__dirname, 'workers', 'congestion-worker.js');

t.test('ranks of one host over TCP: both ends of every connection between them use Reno', { skip: ssMissing() }, async (t) => {
  const job = await runJob(3, WORKER, { env: { HORA_TRANSPORT: 'tcp' } });
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  const ends = rankToRankEnds(job.reports);
  // Three pairs, each with a connection for collectives and one for messages: 12 ends at least.
  t.ok(ends.length >= 12, `both ends of the connections between the 3 ranks are listed (${ends.length})`, { reports: job.reports });
  t.same(ends.filter((e) => e.cc !== 'reno'), [], 'every one uses reno');
});
