'use strict';
// Lists the TCP sockets this rank holds, each with its congestion control as `ss -tinp` reports it, after
// a collective and a message have crossed every connection between the ranks; the system's default
// (/proc/sys/net/ipv4/tcp_congestion_control) comes with them. The test pairs the ranks' lists: a socket
// whose two ends belong to two ranks is a data-plane connection (only hora's core connects rank to rank).
// Writes $HORA_TEST_RESULT_DIR/rank-<rank>.json.
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const hora = require('../../dist/ts/index.js');

/** `ss -tinpH` entries of this process: local and peer address:port, congestion control. */
function socketsOfThisProcess() {
  const lines = execFileSync('ss', ['-tinpH'], { encoding: 'utf8' }).split('\n');
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    const head = lines[i];
    if (!head || /^\s/.test(head) || !head.includes(`pid=${process.pid},`)) continue;
    const cols = head.trim().split(/\s+/);
    const info = /^\s/.test(lines[i + 1] || '') ? lines[i + 1] : '';
    const cc = /(?:^|\s)([a-z][a-z0-9_]*) wscale:/.exec(info);
    out.push({ local: cols[3], peer: cols[4], cc: cc ? cc[1] : null });
  }
  return out;
}

(async () => {
  await hora.init();
  const rank = hora.rank(), size = hora.size();
  await hora.allreduce(new Float32Array(1 << 18));
  const to = (rank + 1) % size, from = (rank + size - 1) % size;
  const sent = hora.send(new Float32Array(1 << 18).fill(rank), { to });
  await hora.recv(new Float32Array(1 << 18), { from });
  await sent;
  const report = {
    rank,
    system: fs.readFileSync('/proc/sys/net/ipv4/tcp_congestion_control', 'utf8').trim(),
    sockets: socketsOfThisProcess(),
  };
  // Every rank lists its sockets before any rank closes one.
  await hora.barrier();
  fs.writeFileSync(path.join(process.env.HORA_TEST_RESULT_DIR, `rank-${rank}.json`), JSON.stringify(report));
  await hora.shutdown();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
