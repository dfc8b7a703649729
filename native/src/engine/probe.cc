#include "engine/probe.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/collectives.h"
#include "common/log.h"

namespace hora {
namespace {

constexpr int kPings = 16;
constexpr int kBulkRounds = 3;
// beta comes from the difference between two transfer sizes, which cancels alpha and any burst allowance
// of a rate limiter (a token bucket lets its first few tens of KB through at full speed).
constexpr size_t kSmallBulk = 1 << 20;
constexpr size_t kLargeBulk = 4 << 20;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Status sendTo(Context& ctx, int peer, const uint8_t* data, size_t len) {
  SendOp op{ctx.pair(peer), data, len};
  return ctx.progress(&op, 1, nullptr, 0);
}

Status recvFrom(Context& ctx, int peer, uint8_t* data, size_t len) {
  RecvOp op{ctx.pair(peer), data, len};
  return ctx.progress(nullptr, 0, &op, 1);
}

// The fastest of a few sends of `bytes`, each answered by 8 bytes.
Status timeBulk(Context& ctx, int peer, std::vector<uint8_t>& bulk, size_t bytes, double* best) {
  uint8_t small[8] = {0};
  *best = 1e30;
  for (int i = 0; i < kBulkRounds; ++i) {
    auto t0 = Clock::now();
    HORA_RETURN_IF_ERROR(sendTo(ctx, peer, bulk.data(), bytes));
    HORA_RETURN_IF_ERROR(recvFrom(ctx, peer, small, sizeof small));
    *best = std::min(*best, since(t0));
  }
  return Status::ok();
}

// Rank 0's side: alpha = half the median round trip of 8 bytes; beta = the extra time of a 4 MiB transfer
// over a 1 MiB one, per byte.
Status measure(Context& ctx, int peer, LinkCost* out) {
  uint8_t small[8] = {0};
  std::vector<uint8_t> bulk(kLargeBulk, 0);
  std::vector<double> trips;
  for (int i = 0; i < kPings; ++i) {
    auto t0 = Clock::now();
    HORA_RETURN_IF_ERROR(sendTo(ctx, peer, small, sizeof small));
    HORA_RETURN_IF_ERROR(recvFrom(ctx, peer, small, sizeof small));
    trips.push_back(since(t0));
  }
  std::sort(trips.begin(), trips.end());
  double small1 = 0, large = 0;
  HORA_RETURN_IF_ERROR(timeBulk(ctx, peer, bulk, kSmallBulk, &small1));
  HORA_RETURN_IF_ERROR(timeBulk(ctx, peer, bulk, kLargeBulk, &large));
  out->alpha = trips[trips.size() / 2] / 2;
  out->beta = std::max(large - small1, 1e-12 * kLargeBulk) / (kLargeBulk - kSmallBulk);
  return Status::ok();
}

// The peer's side of measure().
Status answer(Context& ctx, int peer) {
  uint8_t small[8];
  std::vector<uint8_t> bulk(kLargeBulk);
  for (int i = 0; i < kPings; ++i) {
    HORA_RETURN_IF_ERROR(recvFrom(ctx, peer, small, sizeof small));
    HORA_RETURN_IF_ERROR(sendTo(ctx, peer, small, sizeof small));
  }
  for (size_t bytes : {kSmallBulk, kLargeBulk}) {
    for (int i = 0; i < kBulkRounds; ++i) {
      HORA_RETURN_IF_ERROR(recvFrom(ctx, peer, bulk.data(), bytes));
      HORA_RETURN_IF_ERROR(sendTo(ctx, peer, small, sizeof small));
    }
  }
  return Status::ok();
}

// First rank (other than `except`) on host h, or -1.
int firstOnHost(const Topology& t, int h, int except) {
  for (int r = 0; r < t.size; ++r) {
    if (t.hostOf[r] == h && r != except) return r;
  }
  return -1;
}

std::string describe(const LinkCost& c) {
  char buf[96];
  snprintf(buf, sizeof buf, "alpha %.1f us, %.3f GB/s", c.alpha * 1e6, c.beta > 0 ? 1e-9 / c.beta : 0.0);
  return buf;
}

}  // namespace

Status completeTopology(Context& ctx, const std::vector<int>& grid, const LinkOverride& local,
                        const LinkOverride& cross) {
  Topology t = ctx.topology();
  t.grid = grid;
  if (t.numHosts > 1) {
    ctx.startDeadline();
    const int localPeer = firstOnHost(t, t.hostOf[0], 0);
    const int crossPeer = firstOnHost(t, 1, 0);  // rank 0 is on host 0
    double figures[4] = {0, 0, 0, 0};  // local alpha, beta, cross alpha, beta; rank 0's are broadcast
    const int r = ctx.rank();
    if (r == 0) {
      LinkCost l = local.cost, c = cross.cost;
      if (!local.set && localPeer >= 0) HORA_RETURN_IF_ERROR(measure(ctx, localPeer, &l));
      if (!cross.set) HORA_RETURN_IF_ERROR(measure(ctx, crossPeer, &c));
      // With one rank per host there is no same-host link to measure; nothing then uses its cost.
      double f[4] = {l.alpha, l.beta, c.alpha, c.beta};
      memcpy(figures, f, sizeof f);
    } else if (r == localPeer && !local.set) {
      HORA_RETURN_IF_ERROR(answer(ctx, 0));
    } else if (r == crossPeer && !cross.set) {
      HORA_RETURN_IF_ERROR(answer(ctx, 0));
    }
    BroadcastOptions b;
    b.data = reinterpret_cast<uint8_t*>(figures);
    b.bytes = sizeof figures;
    b.root = 0;
    HORA_RETURN_IF_ERROR(broadcast(ctx, b));
    t.local = {figures[0], figures[1]};
    t.cross = {figures[2], figures[3]};
    t.measured = true;
    if (r == 0) {
      HORA_INFO("links: same host %s (%s); across hosts %s (%s); %d hosts, ranks per host %s", describe(t.local).c_str(),
                local.set ? "HORA_COST_LOCAL" : localPeer >= 0 ? "measured" : "none", describe(t.cross).c_str(),
                cross.set ? "HORA_COST_CROSS" : "measured", t.numHosts,
                t.uniform() ? std::to_string(t.ranksPerHost()).c_str() : "uneven");
    }
  }
  ctx.setTopology(std::move(t));
  return Status::ok();
}

}  // namespace hora
