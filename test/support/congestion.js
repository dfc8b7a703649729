'use strict';
// Pairs the socket lists of test/workers/congestion-worker.js: the connections whose two ends belong to
// two ranks of the job, each end with its rank and congestion control.
const { spawnSync } = require('node:child_process');

/** Why `ss` cannot list sockets here ('' when it can). */
function ssMissing() {
  return spawnSync('ss', ['-V'], { encoding: 'utf8' }).status === 0 ? '' : 'no ss here (Debian: iproute2)';
}

/** [{rank, peerRank, local, peer, cc}] for every end of every connection between two ranks. */
function rankToRankEnds(reports) {
  const owner = new Map();
  reports.forEach((r, rank) => { for (const s of r ? r.sockets : []) owner.set(s.local, rank); });
  const ends = [];
  reports.forEach((r, rank) => {
    for (const s of r ? r.sockets : []) {
      const peerRank = owner.get(s.peer);
      if (peerRank !== undefined && peerRank !== rank) ends.push({ rank, peerRank, ...s });
    }
  });
  return ends;
}

module.exports = { ssMissing, rankToRankEnds };
