// What the cross-rank consistency check costs a small allreduce.
//
// Every collective starts with the agreement (engine/agreement.cc), and an allreduce of at most 64 KiB
// rides inside it: its data travels with the proposal in one recursive-doubling pass. The same allreduce
// without any check would be a plain recursive doubling of the data alone. This bench times both on the
// same connections, two ranks as two threads of this process, over shared memory and over TCP, in
// alternating rounds, and prints the median per-round ratio and the median difference in microseconds.
//
//   bash bench/agreement.sh            (builds into /tmp/hora-agreement-bench and runs)
//   /tmp/hora-agreement-bench/agreement_bench [ROUNDS] [ITERS]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/collectives.h"
#include "engine/agreement.h"
#include "engine/work.h"
#include "transport/context.h"

using namespace hora;

namespace {

using Clock = std::chrono::steady_clock;

struct Pair2 {
  std::unique_ptr<Context> ctx[2];
};

bool connectTwo(bool tcp, Pair2* w) {
  std::vector<PeerInfo> peers(2);
  for (int r = 0; r < 2; ++r) {
    w->ctx[r] = std::make_unique<Context>(r, 2, 30000);
    int port = 0;
    if (!w->ctx[r]->listen("127.0.0.1", &port).isOk()) return false;
    peers[r] = PeerInfo{r, "host0", "127.0.0.1", port, r};
  }
  const std::string jobId = "agreement-bench-" + std::to_string(getpid()) + (tcp ? "-tcp" : "-shm");
  Status st[2];
  std::thread t1([&] { st[1] = w->ctx[1]->connect(peers, jobId, "agreement-bench", tcp ? TransportChoice::kTcp : TransportChoice::kAuto); });
  st[0] = w->ctx[0]->connect(peers, jobId, "agreement-bench", tcp ? TransportChoice::kTcp : TransportChoice::kAuto);
  t1.join();
  return st[0].isOk() && st[1].isOk();
}

// Runs iters 8-byte allreduces on both ranks; returns rank 0's mean microseconds per allreduce.
double timeRound(Pair2& w, bool checked, int iters, uint64_t* seq) {
  double us = 0;
  auto body = [&](int r) {
    Context& c = *w.ctx[r];
    double x = r + 1;
    Work work;
    work.kind = Kind::kAllreduce;
    work.op = ReduceOp::kSum;
    work.dtype = DType::kFloat64;
    work.count = 1;
    work.name = "grad";
    uint64_t s = *seq;
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      c.startDeadline();
      Status st;
      if (checked) {
        st = agree(c, proposalFor(work, s++, 1, 1), "", reinterpret_cast<uint8_t*>(&x));
      } else {
        AllreduceOptions o;
        o.data = reinterpret_cast<uint8_t*>(&x);
        o.count = 1;
        o.dtype = DType::kFloat64;
        o.algorithm = Algorithm::kRecursiveDoubling;
        st = allreduce(c, o);
      }
      if (!st.isOk()) {
        std::fprintf(stderr, "rank %d: %s\n", r, st.message().c_str());
        std::exit(1);
      }
      x = r + 1;
    }
    if (r == 0) us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
  };
  std::thread t1(body, 1);
  body(0);
  t1.join();
  *seq += iters;
  return us;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20000;
  std::printf("%-4s %8s %12s %12s %10s %10s\n", "net", "rounds", "checked_us", "plain_us", "diff_us", "ratio");
  for (bool tcp : {false, true}) {
    Pair2 w;
    if (!connectTwo(tcp, &w)) {
      std::fprintf(stderr, "cannot connect the two ranks (%s)\n", tcp ? "tcp" : "shm");
      return 1;
    }
    uint64_t seq = 0;
    timeRound(w, true, iters / 4, &seq);  // warm up both paths
    timeRound(w, false, iters / 4, &seq);
    std::vector<double> checked, plain, diff, ratio;
    for (int k = 0; k < rounds; ++k) {
      // Alternate which goes first, so a drift in the machine's speed favours neither.
      double a, b;
      if (k % 2 == 0) {
        a = timeRound(w, true, iters, &seq);
        b = timeRound(w, false, iters, &seq);
      } else {
        b = timeRound(w, false, iters, &seq);
        a = timeRound(w, true, iters, &seq);
      }
      checked.push_back(a);
      plain.push_back(b);
      diff.push_back(a - b);
      ratio.push_back(a / b);
    }
    std::printf("%-4s %8d %12.2f %12.2f %10.2f %10.3f\n", tcp ? "tcp" : "shm", rounds, median(checked), median(plain),
                median(diff), median(ratio));
  }
  return 0;
}
