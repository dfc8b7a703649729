'use strict';
// ElasticState's in-memory reshard (adapters/tfjs/elastic-shards.ts reshard) with made-up blocks, at 4 ranks:
// the blocks of a commit cut for an older world (of `from` ranks), each old block q held by rank holder[q]
// (the other ranks joined later and hold none), entries of lengths 0 to 11 (some shorter than the world).
// Each rank reports what the alltoall gave it for its block of the new world, and what it should be.
// Usage: node elastic-shards-worker.js <scenario>
const hora = require('../../dist/ts/index.js');
const { reshard } = require('../../dist/adapters/tfjs/elastic-shards.js');
const { runScenarios } = require('../support/worker-util');

const LENGTHS = [0, 1, 2, 3, 7, 10, 11];

/** Reduce-scatter's cut (ts/internal blockRange): the first count % size blocks one element longer. */
function blockRange(count, size, rank) {
  const base = Math.floor(count / size), extra = count % size;
  const begin = rank * base + Math.min(rank, extra);
  return [begin, begin + base + (rank < extra ? 1 : 0)];
}

/** Entry i's whole values: distinct everywhere, so a value in the wrong place shows. */
const whole = (i, g) => Float32Array.from({ length: g }, (_, k) => i * 1000 + k + 0.5);

async function run(rank, size, from, holder) {
  const q = holder.indexOf(rank);
  const entries = { 'zero/iterations': Float64Array.of(17) };
  LENGTHS.forEach((g, i) => {
    if (q === -1) return;
    const [b, e] = blockRange(g, from, q);
    entries[`zero/slot/${i}`] = { data: whole(i, g).slice(b, e), globalLength: g, offset: b };
  });
  const blocks = q === -1 ? null : { entries, size: from, rank: q };
  const record = {
    commit: q === -1 ? 0 : 5, size: q === -1 ? size : from, rank: q === -1 ? rank : q, slots: q === -1 ? 0 : LENGTHS.length,
    layout: q === -1 ? [] : LENGTHS.map((g, i) => [`zero/slot/${i}`, g]),
    replicated: q === -1 ? [] : [['zero/iterations', 'Float64Array', [17]]],
  };
  let restored = null;
  let recut = 0;
  const sharded = {
    checkpointEntries: async () => entries,
    restoreCheckpoint: async (e) => { restored = e; },
    shardCut: () => ({ size, rank }),
    recut: () => { recut++; },
  };
  const state = { model: { weights: [] }, reshards: [], blocks, reloadCheckpoint: async () => { throw new Error('no checkpoint should be read'); } };
  const reloaded = await reshard(state, sharded, record, 0, rank, size);
  const got = {};
  const want = {};
  LENGTHS.forEach((g, i) => {
    const k = `zero/slot/${i}`;
    const [b, e] = blockRange(g, size, rank);
    got[k] = restored && restored[k] ? { data: Array.from(restored[k].data), globalLength: restored[k].globalLength, offset: restored[k].offset } : null;
    want[k] = { data: Array.from(whole(i, g).slice(b, e)), globalLength: g, offset: b };
  });
  return {
    reloaded, recut, reshards: state.reshards, cut: { size: state.blocks.size, rank: state.blocks.rank },
    iterations: restored && Array.from(restored['zero/iterations']), got, want,
  };
}

runScenarios(hora, {
  // 3 ranks grown to 4: old blocks 0, 1, 2 on ranks 2, 0, 3; rank 1 joined.
  grow3to4: (rank, size) => run(rank, size, 3, [2, 0, 3]),
  // 1 rank grown to 4: rank 0 holds the one block.
  grow1to4: (rank, size) => run(rank, size, 1, [0]),
  // The same 4 ranks, renumbered: every block moves.
  renumbered: (rank, size) => run(rank, size, 4, [1, 0, 3, 2]),
});
