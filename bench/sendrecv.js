// Point-to-point latency and bandwidth between ranks 0 and 1, in the form of OSU's osu_latency and osu_bw:
//   node dist/ts/cli/main.js run -np 2 node bench/sendrecv.js [--max-bytes N] [--await]
//   HORA_TRANSPORT=tcp node dist/ts/cli/main.js run -np 2 node bench/sendrecv.js      (TCP on one host)
// latency: ping-pong, rank 0 sends and waits for the same size back; half the round trip, median of the
//          iterations (osu_latency reports the mean: both are printed).
// bandwidth: rank 0 posts a window of 64 sends, rank 1 64 receives, then rank 1 answers 4 bytes; bytes x
//          64 / time, best of the repetitions as in osu_bw's loop (mean reported beside it). The window's
//          arrays hold data, written once, on both sides (and in bench/mpi_pingpong.c): an array never
//          written is the kernel's one zero page, which a single-copy transfer (Open MPI's CMA) reads from
//          cache whatever the window's size, a speed no program with real data sees.
// Sizes double from 4 B to --max-bytes (default 64 MiB). By default the JS thread blocks in Work.wait(), as
// an MPI program blocks in MPI_Recv; --await awaits each Work instead (the event loop wakes on completion).
// Rank 0 prints one JSON line per size. bench/mpi_pingpong.c is the same program on Open MPI, and
// bench/sendrecv-compare.js runs the two alternately.
const hora = require('..');
const loops = require('./pingpong');

const WINDOW = 64;

function itersFor(bytes) {
  if (bytes <= 8192) return 2000;
  if (bytes <= 1 << 20) return 200;
  return 20;
}

async function main() {
  const args = process.argv.slice(2);
  const maxBytes = args.includes('--max-bytes') ? Number(args[args.indexOf('--max-bytes') + 1]) : 64 * 1024 * 1024;
  const useAwait = args.includes('--await');
  await hora.init();
  if (hora.size() !== 2) throw new Error('run with -np 2');
  const me = hora.rank(), peer = 1 - me;
  const done = useAwait ? async (w) => w : (w) => w.wait();
  const ack = new Uint8Array(4);
  // One round trip per i, times in µs per one-way trip from i = 0 on.
  const pingPongWaited = (buf, from, to, t) => loops.pingPongWaited(hora, buf, from, to, t);
  const pingPongAwaited = async (buf, from, to, t) => {
    for (let i = from; i < to; i++) {
      const t0 = process.hrtime.bigint();
      if (me === 0) {
        await hora.send(buf, { to: peer });
        await hora.recv(buf, { from: peer });
      } else {
        await hora.recv(buf, { from: peer });
        await hora.send(buf, { to: peer });
      }
      if (i >= 0) t[i] = Number(process.hrtime.bigint() - t0) / 2e3;
    }
  };
  const pingPong = useAwait ? pingPongAwaited : pingPongWaited;
  // Warm-up before the table, timed like a row (a store never made before would make V8 throw the
  // optimized loop away in the first row), then a pause for V8's compiler thread: otherwise the first row
  // runs, in part, before the loop is optimized (4 B took 7.5 µs as the first row, 1.9 µs as the fifth).
  await pingPong(new Uint8Array(4), 0, 3000, new Float64Array(3000));
  await new Promise((resolve) => setTimeout(resolve, 200));
  await hora.barrier();
  for (let bytes = 4; bytes <= maxBytes; bytes *= 2) {
    const buf = new Uint8Array(bytes).fill(me + 1);
    const iters = itersFor(bytes);
    const warmup = Math.max(2, iters >> 4);
    // Latency.
    const t = new Float64Array(iters);
    await pingPong(buf, -warmup, iters, t);
    const mean = t.reduce((s, v) => s + v, 0) / iters;
    t.sort();
    // Bandwidth.
    const reps = Math.max(3, Math.min(20, Math.floor((256 << 20) / (bytes * WINDOW))));
    // Each message of the window has its own array while they fit in 256 MiB; beyond that they share one
    // (the bytes are not checked), as bench/mpi_pingpong.c does.
    const shared = bytes * WINDOW > 256 * 1024 * 1024 ? new Uint8Array(bytes).fill(me + 1) : null;
    const window = Array.from({ length: WINDOW }, () => shared || new Uint8Array(bytes).fill(me + 1));
    let best = 0, sum = 0;
    for (let rep = -1; rep < reps; rep++) {
      await done(hora.barrier());
      const t0 = process.hrtime.bigint();
      if (me === 0) {
        const works = window.map((b) => hora.send(b, { to: peer, tag: 1 }));
        for (const w of works) await done(w);
        await done(hora.recv(ack, { from: peer, tag: 2 }));
      } else {
        const works = window.map((b) => hora.recv(b, { from: peer, tag: 1 }));
        for (const w of works) await done(w);
        await done(hora.send(ack, { to: peer, tag: 2 }));
      }
      const mbps = (bytes * WINDOW) / (Number(process.hrtime.bigint() - t0) / 1e9) / 1e6;
      if (rep >= 0) {
        best = Math.max(best, mbps);
        sum += mbps;
      }
    }
    if (me === 0) {
      console.log(JSON.stringify({
        bytes, transport: process.env.HORA_TRANSPORT || 'auto', mode: useAwait ? 'await' : 'wait',
        latency_us: { median: +t[iters >> 1].toFixed(2), mean: +mean.toFixed(2) },
        bandwidth_MBps: { best: +best.toFixed(1), mean: +(sum / reps).toFixed(1) },
      }));
    }
  }
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
