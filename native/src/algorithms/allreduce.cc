#include <cstdio>
#include <string>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"
#include "algorithms/cost.h"
#include "algorithms/recursive_doubling.h"
#include "algorithms/ring.h"
#include "common/log.h"
#include "reduce/reduce.h"

namespace hora {
namespace {

// Ring allreduce: a ring reduce-scatter leaves rank r with block r reduced over all ranks, and a ring
// allgather passes the finished blocks around (ring.h). Each link carries 2(p-1)/p of the buffer, the minimum.
Status ringAllreduce(Context& ctx, const AllreduceOptions& o) {
  ReduceScatterOptions rs;
  rs.data = o.data;
  rs.count = o.count;
  rs.dtype = o.dtype;
  rs.op = o.op;
  rs.scaling = o.scaling;
  HORA_RETURN_IF_ERROR(reduceScatter(ctx, rs));
  return ringAllgather(ctx, worldRing(ctx), o.data, o.count, o.dtype);
}

Status recursiveDoublingAllreduce(Context& ctx, const AllreduceOptions& o) {
  const size_t bytes = o.count * dtypeSize(o.dtype);
  uint8_t* scratch = threadScratch(bytes);
  const bool scaled = o.scaling.active();
  auto combine = [&](uint8_t* out, const uint8_t* lower, const uint8_t* higher, const DoublingStep& at) {
    if (!scaled) {
      ctx.timedReduce([&] { reduceTwo(o.op, o.dtype, out, lower, higher, o.count); });
      return;
    }
    const ScaledStep step = scaledStep(o.scaling, at.lowerRaw, at.higherRaw, at.last, o.op, ctx.size());
    ctx.timedReduce([&] { reduceTwoScaled(o.op, o.dtype, out, lower, higher, o.count, step); });
  };
  HORA_RETURN_IF_ERROR(recursiveDoubling(ctx, o.data, bytes, scratch, combine));
  // Scaled, the last combine divided already.
  if (o.op == ReduceOp::kAvg && !scaled) scaleForAvg(o.dtype, o.data, o.count, ctx.size());
  return Status::ok();
}

Status notScalable(DType dtype) {
  return Status(Code::kInvalidArgument, std::string("prescaleFactor and postscaleFactor apply to float dtypes; this is ") +
                                            dtypeName(dtype));
}

Status notUniform(const Topology& t) {
  std::string sizes;
  for (size_t h = 0; h < t.hostSizes.size(); ++h) sizes += (h ? ", " : "") + std::to_string(t.hostSizes[h]);
  return Status(Code::kInvalidArgument, "the hierarchical allreduce needs the same number of ranks on every host; "
                                        "the hosts have " + sizes + " (use HORA_TOPOLOGY with HORA_ALGO=multidim, or ring)");
}

}  // namespace

namespace {

// On one host the choice is by size alone, at a threshold measured on shared memory and loopback TCP.
Algorithm chooseOnOneHost(const Context& ctx, size_t count, size_t bytes) {
  // The ring needs at least one element per block to pay off; tiny buffers are pure latency.
  if (bytes <= kSmallAllreduceBytes || count < static_cast<size_t>(ctx.size())) return Algorithm::kRecursiveDoubling;
  return Algorithm::kRing;
}

std::string seconds(double s) {
  char buf[32];
  if (s < 1e-3) snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1) snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// Across hosts, by the cost model (cost.h), logged at INFO once per power-of-two size.
Algorithm chooseByCost(const Context& ctx, size_t count, size_t bytes) {
  const Topology& t = ctx.topology();
  CostEstimate e = estimateAllreduce(t, bytes);
  Algorithm best = Algorithm::kRing;
  double bestTime = e.ring;
  // Below one element per rank the ring and the grids would move empty blocks; recursive doubling it is.
  if (e.recursiveDoubling < bestTime || count < static_cast<size_t>(ctx.size())) {
    best = Algorithm::kRecursiveDoubling;
    bestTime = e.recursiveDoubling;
  }
  if (count >= static_cast<size_t>(ctx.size())) {
    if (e.hierarchical >= 0 && e.hierarchical < bestTime) {
      best = Algorithm::kHierarchical;
      bestTime = e.hierarchical;
    }
    if (e.multiDim >= 0 && e.multiDim < bestTime) {
      best = Algorithm::kMultiDim;
      bestTime = e.multiDim;
    }
  }
  if (logEnabled(LogLevel::kInfo) && t.noteChoice(bytes)) {
    std::string why = std::string("ring ") + seconds(e.ring) + ", recursive_doubling " + seconds(e.recursiveDoubling);
    if (e.hierarchical >= 0) why += ", hierarchical " + seconds(e.hierarchical);
    if (e.multiDim >= 0) why += ", multidim " + describeGrid(t.grid) + " " + seconds(e.multiDim);
    HORA_INFO("allreduce of %zu bytes: %s, the least predicted time (%s)", bytes, algorithmName(best), why.c_str());
  }
  return best;
}

}  // namespace

Algorithm chooseAllreduceAlgorithm(const Context& ctx, const AllreduceOptions& o) {
  if (o.algorithm != Algorithm::kAuto) return o.algorithm;
  const size_t bytes = o.count * dtypeSize(o.dtype);
  return ctx.topology().measured ? chooseByCost(ctx, o.count, bytes) : chooseOnOneHost(ctx, o.count, bytes);
}

Status allreduce(Context& ctx, const AllreduceOptions& o) {
  if (o.scaling.active() && !scalable(o.dtype)) return notScalable(o.dtype);
  // Alone, there is no reduction step to scale in.
  if (ctx.size() == 1) scaleAlone(o.dtype, o.data, o.count, o.scaling);
  if (ctx.size() == 1 || o.count == 0) return Status::ok();
  const Topology& t = ctx.topology();
  switch (chooseAllreduceAlgorithm(ctx, o)) {
    case Algorithm::kRing: return ringAllreduce(ctx, o);
    case Algorithm::kHierarchical:
      if (hierarchicalPhases(t).empty() && t.size > 1) return notUniform(t);
      return gridAllreduce(ctx, t.hierarchicalGrid(), o);
    case Algorithm::kMultiDim:
      if (!t.grid.empty()) return gridAllreduce(ctx, t.grid, o);
      if (hierarchicalPhases(t).empty()) return notUniform(t);
      return gridAllreduce(ctx, t.hierarchicalGrid(), o);
    default: return recursiveDoublingAllreduce(ctx, o);
  }
}

Status reduceScatter(Context& ctx, const ReduceScatterOptions& o) {
  const int p = ctx.size(), r = ctx.rank();
  if (o.scaling.active() && !scalable(o.dtype)) return notScalable(o.dtype);
  if (p == 1) scaleAlone(o.dtype, o.data, o.count, o.scaling);
  if (p == 1 || o.count == 0) return Status::ok();
  HORA_RETURN_IF_ERROR(ringReduceScatter(ctx, worldRing(ctx), o.data, o.count, o.dtype, o.op, o.scaling));
  if (o.op == ReduceOp::kAvg && !o.scaling.active()) {
    const size_t elem = dtypeSize(o.dtype);
    scaleForAvg(o.dtype, o.data + blockStart(o.count, p, r) * elem, blockCount(o.count, p, r), p);
  }
  return Status::ok();
}

uint8_t* threadScratch(size_t bytes) {
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}

}  // namespace hora
