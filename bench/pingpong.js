// The ping-pong loop of bench/sendrecv.js and bench/pingpong-ab.js, with Work.wait(): ranks 0 and 1 send
// `buf` to each other and back, round trips `from` to `to` - 1, and t[i] gets round trip i's half in µs
// (negative i: warm-up, not recorded). A plain loop, as MPI_Send/MPI_Recv are called in C: an `await` on
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

module.exports = { pingPongWaited };
