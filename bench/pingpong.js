// The ping-pong loop of bench/sendrecv.js and bench/pingpong-ab.js (and the window of its --window), with
// Work.wait(): ranks 0 and 1 send `buf` to each other and back, round trips `from` to `to` - 1, and t[i]
// gets round trip i's half in µs (negative i: warm-up, not recorded). A plain loop, as MPI_Send/MPI_Recv are called in C: an `await` on
// the value wait() returns would still suspend the function once per call, a cost of the benchmark and
// not of the messages.
'use strict';

function pingPongWaited(hora, buf, from, to, t) {
  const me = hora.rank(), peer = 1 - me;
  for (let i = from; i < to; i++) {
    const t0 = process.hrtime.bigint();
    if (me === 0) {
      hora.send(buf, { to: peer }).wait();
      hora.recv(buf, { from: peer }).wait();
    } else {
      hora.recv(buf, { from: peer }).wait();
      hora.send(buf, { to: peer }).wait();
    }
    if (i >= 0) t[i] = Number(process.hrtime.bigint() - t0) / 2e3;
  }
}

// One window in the form of osu_bw, with Work.wait(): rank 0 sends every array of `window` to rank 1 (tag
// 1), rank 1 receives into its own, then answers 4 bytes (tag 2). Returns the window's time in seconds.
function windowWaited(hora, window, ack) {
  const me = hora.rank(), peer = 1 - me;
  hora.barrier().wait();
  const t0 = process.hrtime.bigint();
  const works = window.map((b) => (me === 0 ? hora.send(b, { to: peer, tag: 1 }) : hora.recv(b, { from: peer, tag: 1 })));
  for (const w of works) w.wait();
  if (me === 0) hora.recv(ack, { from: peer, tag: 2 }).wait();
  else hora.send(ack, { to: peer, tag: 2 }).wait();
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

module.exports = { pingPongWaited, windowWaited };
