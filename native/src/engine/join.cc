// hora.join() in the engine: a joined rank's loop of agreements (runJoin()), its part in the live ranks'
// collectives with a neutral contribution (serveJoined()), and how avg divides while ranks have joined
// (adjustForJoin(), which the live ranks' collectives use too). The agreement's side is in agreement.cc.
#include <vector>

#include "algorithms/blocks.h"
#include "engine/agreement.h"
#include "engine/communicator.h"
#include "reduce/reduce.h"

namespace hora {
namespace {

// A joined rank's first step of an allgather or gather: it brings 0 elements, and learns every rank's bytes.
Status noBlockOfMine(Context& ctx, size_t elem, std::vector<size_t>* bytesPerRank, uint64_t* total) {
  std::vector<uint64_t> counts;
  HORA_RETURN_IF_ERROR(allgatherCounts(ctx, 0, elem, &counts, total));
  bytesPerRank->resize(ctx.size());
  for (int i = 0; i < ctx.size(); ++i) (*bytesPerRank)[i] = counts[i] * elem;
  return Status::ok();
}

}  // namespace

// While ranks have joined (hora.join()), avg divides by the ranks that contributed: the reduction runs as a
// sum, and the result is divided after it (divideBy), or with factors the division joins postscaleFactor.
// Live and joined ranks make the same change from the same verdict, so they run the same steps.
JoinAdjusted adjustForJoin(ReduceOp op, const Scaling& scaling, uint32_t contributors, int size) {
  JoinAdjusted a{op, scaling, 0};
  if (op != ReduceOp::kAvg || contributors == 0 || contributors >= static_cast<uint32_t>(size)) return a;
  a.op = ReduceOp::kSum;
  if (scaling.active()) {
    a.scaling.post = scaling.post / contributors;
  } else {
    a.divideBy = static_cast<int>(contributors);
  }
  return a;
}

// A joined rank proposes "joined" at every agreement of its group (the wildcard of agreement.h) until the
// verdict is that every rank has; each live collective meanwhile it runs with a neutral contribution
// (serveJoined()), under its own deadline as the live ranks' collectives are. A failure among the live
// ranks (a mismatch, an invalid call, a broadcast whose root is this rank) is theirs: the join goes on.
// A transport failure (a peer lost, a deadline passed) ends it. Resolves to the rank that joined last.
Status Communicator::runJoin(Work& w) {
  Group& g = groupOf(w);
  Context& ctx = *g.ctx;
  const uint64_t joinedAt = g.seq;
  struct Free {
    std::vector<uint8_t>* buffer;
    ~Free() { std::vector<uint8_t>().swap(*buffer); }
  } freeAfter{&neutral_};
  for (bool first = true;; first = false) {
    if (!first) ctx.startDeadline();
    Proposal mine = proposalFor(w, g.seq++, 1, 0);
    mine.joinedAt = joinedAt;
    w.times.seq = mine.seq;
    Joined joined;
    const Status agreed = agree(ctx, mine, "", nullptr, nullptr, nullptr, nullptr, &joined);
    if (!agreed.isOk()) {
      if (isFatal(agreed.code())) return agreed;
      continue;
    }
    if (joined.contributors == 0) {
      w.lastJoined = joined.lastJoiner;
      return Status::ok();
    }
    HORA_RETURN_IF_ERROR(serveJoined(ctx, joined));
  }
}

Status Communicator::serveJoined(Context& ctx, const Joined& joined) {
  const Proposal& p = joined.live;
  const DType dtype = static_cast<DType>(p.dtype);
  const size_t elem = dtypeSize(dtype), bytes = p.count * elem;
  const ReduceOp op = static_cast<ReduceOp>(p.op);
  switch (static_cast<Kind>(p.kind)) {
    case Kind::kAllreduce:
    case Kind::kReduceScatter:
    case Kind::kReduce: {
      // This rank sends the op's identity (a reduce's root is live: the agreement refused a joined one).
      Scaling scaling;
      scaling.pre = p.prescale;
      scaling.post = p.postscale;
      const JoinAdjusted a = adjustForJoin(op, scaling, joined.contributors, ctx.size());
      if (neutral_.size() < bytes) neutral_.resize(bytes);
      fillIdentity(op, dtype, neutral_.data(), p.count);
      if (p.kind == static_cast<uint8_t>(Kind::kReduce)) {
        ReduceOptions o;
        o.input = neutral_.data();
        o.count = p.count;
        o.dtype = dtype;
        o.op = a.op;
        o.algorithm = static_cast<Algorithm>(p.algorithm);
        o.scaling = a.scaling;
        o.root = p.root;
        return reduce(ctx, o);
      }
      if (p.kind == static_cast<uint8_t>(Kind::kReduceScatter)) {
        ReduceScatterOptions o;
        o.data = neutral_.data();
        o.count = p.count;
        o.dtype = dtype;
        o.op = a.op;
        o.scaling = a.scaling;
        return reduceScatter(ctx, o);
      }
      // The algorithm the live ranks chose, from the same fields (a fused run's: its total count).
      AllreduceOptions o;
      o.data = neutral_.data();
      o.count = p.count;
      o.dtype = dtype;
      o.algorithm = static_cast<Algorithm>(p.algorithm);
      o.algorithm = chooseAllreduceAlgorithm(ctx, o);
      o.op = a.op;
      o.scaling = a.scaling;
      return allreduce(ctx, o);
    }
    case Kind::kAllgather: {
      // Nothing from this rank; what the others gathered is discarded.
      AllgatherOptions o;
      uint64_t total = 0;
      HORA_RETURN_IF_ERROR(noBlockOfMine(ctx, elem, &o.bytesPerRank, &total));
      if (neutral_.size() < total * elem) neutral_.resize(total * elem);
      o.output = neutral_.data();
      return allgather(ctx, o);
    }
    case Kind::kBroadcast: {
      // The agreement refused a broadcast whose root has joined: the root is live, and this rank receives.
      if (neutral_.size() < bytes) neutral_.resize(bytes);
      BroadcastOptions o;
      o.data = neutral_.data();
      o.bytes = bytes;
      o.root = p.root;
      return broadcast(ctx, o);
    }
    case Kind::kGather: {
      // Nothing from this rank to the (live) root.
      GatherOptions o;
      uint64_t total = 0;
      HORA_RETURN_IF_ERROR(noBlockOfMine(ctx, elem, &o.bytesPerRank, &total));
      o.root = p.root;
      return gather(ctx, o);
    }
    case Kind::kAlltoall:
    case Kind::kScatter: {
      // Nothing from this rank (its counts are 0; the agreement refused recvSplits); what comes is discarded.
      const bool scatter = p.kind == static_cast<uint8_t>(Kind::kScatter);
      const std::vector<uint64_t> none(ctx.size(), 0);
      std::vector<uint64_t> counts;
      uint64_t total = 0;
      HORA_RETURN_IF_ERROR(alltoallCounts(ctx, none, scatter ? p.root : -1, elem, &counts, &total));
      if (neutral_.size() < total * elem) neutral_.resize(total * elem);
      AlltoallOptions o;
      o.singleCopy = options_.shmSingleCopy;
      o.output = neutral_.data();
      o.sendBytes.assign(ctx.size(), 0);
      o.recvBytes.resize(ctx.size());
      for (int i = 0; i < ctx.size(); ++i) o.recvBytes[i] = counts[i] * elem;
      return alltoall(ctx, o);
    }
    case Kind::kBarrier:
    case Kind::kInvalid:
      return Status::ok();
    default:
      return Status(Code::kInternal, "a rank that has joined cannot take part in " + describe(p));
  }
}

}  // namespace hora
