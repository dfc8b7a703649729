// What each kind of collective runs once its agreement is done (Communicator::execute() agrees, then calls
// runOnDevice() or runOnHost()): the algorithms of native/src/algorithms, with the results a Work carries.
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/blocks.h"
#include "common/log.h"
#include "engine/agreement.h"
#include "engine/communicator.h"
#include "reduce/reduce.h"

namespace hora {
namespace {

// An agreed alltoall or scatter: the counts (exchanged, or the recvSplits the agreement checked), the
// output sized by them, then the pairwise exchange (algorithms/alltoall.cc) into it.
// firstRound: a two-rank alltoall's first round, when its agreement made it (else nullptr).
Status runAlltoall(Context& ctx, Work& w, bool singleCopy, const AlltoallFirstRound* firstRound) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t elem = dtypeSize(w.dtype);
  // The thread's, its arrays kept between calls: a small alltoall allocated them anew each time.
  thread_local AlltoallOptions o;
  o.sendBytes.assign(p, 0);
  o.recvBytes.assign(p, 0);
  if (w.kind == Kind::kAlltoall || r == w.root) {
    for (int q = 0; q < p; ++q) o.sendBytes[q] = w.splits[q] * elem;
  }
  uint64_t total = 0;
  if (w.kind == Kind::kAlltoall && w.splits.size() == 2 * static_cast<size_t>(p)) {
    for (int q = 0; q < p; ++q) {
      const uint64_t c = w.splits[p + q];
      if (c > (uint64_t(1) << 40) / elem) return Status(Code::kInvalidArgument, "recvSplits of " + std::to_string(c) + " elements is past 2^40 bytes");
      o.recvBytes[q] = c * elem;
      total += c;
    }
    // Into out, the counts that came are the recvSplits the caller gave (ts/alltoall.ts): no result carries them.
    if (!w.outGiven) w.gatheredCounts.assign(w.splits.begin() + p, w.splits.end());
  } else {
    std::vector<uint64_t> send(p, 0);
    if (w.kind == Kind::kAlltoall || r == w.root) send.assign(w.splits.begin(), w.splits.begin() + p);
    HORA_RETURN_IF_ERROR(alltoallCounts(ctx, send, w.kind == Kind::kScatter ? w.root : -1, elem, &w.gatheredCounts, &total));
    for (int q = 0; q < p; ++q) o.recvBytes[q] = w.gatheredCounts[q] * elem;
  }
  o.singleCopy = singleCopy;
  o.firstRound = firstRound;
  o.input = w.data;
  if (w.kind == Kind::kAlltoall && w.outGiven) {
    // The caller's array (ts/alltoall.ts sized it by recvSplits, which the agreement checked).
    if (w.outBytes != total * elem) {
      return Status(Code::kInvalidArgument, "its out array holds " + std::to_string(w.outBytes) + " bytes, but " +
                                                std::to_string(total * elem) + " come to it");
    }
    o.output = w.out;
  } else {
    w.gathered.resize(total * elem);
    o.output = w.gathered.data();
  }
  return alltoall(ctx, o);
}

}  // namespace

// A collective on GPU memory (cuda/collectives.h): the kinds it has, in the world only, unscaled.
Status Communicator::runOnDevice(Context& ctx, Work& w) {
  if (w.kind == Kind::kReduce || w.kind == Kind::kGather || w.kind == Kind::kAlltoall || w.kind == Kind::kScatter) {
    return Status(Code::kInvalidArgument, std::string(kindName(w.kind)) + " takes host memory only");
  }
  if (w.group != nullptr) return Status(Code::kInvalidArgument, "group collectives take host memory only");
  if (w.scaling.active()) return Status(Code::kInvalidArgument, "prescaleFactor and postscaleFactor take host memory only");
  if (device_ == nullptr) device_.reset(new cuda::DeviceCollectives(ctx_, {options_.transport, options_.ipcSlots, options_.nccl}));
  cuda::DeviceWork d;
  d.kind = w.kind;
  d.op = w.op;
  d.dtype = w.dtype;
  d.algorithm = w.algorithm;
  d.root = w.root;
  d.data = w.data;
  d.count = w.count;
  d.out = w.out;
  d.device = w.device;
  d.stream = w.stream;
  Status st = device_->run(d);
  w.gatheredCounts = std::move(d.gatheredCounts);
  w.gatheredDevice = d.gatheredDevice;
  if (options_.timeline) w.times.algorithm = device_->path();
  return st;
}

// A collective on host memory, agreed; joined is the agreement's word on who contributes (hora.join()).
Status Communicator::runOnHost(Context& ctx, Work& w, const Joined& joined) {
  const int p = ctx.size(), r = ctx.rank();
  if ((w.kind == Kind::kReduce || w.kind == Kind::kGather) && (w.root < 0 || w.root >= p)) {
    return Status(Code::kInvalidArgument, "root " + std::to_string(w.root) + " is not a rank of " + std::to_string(p));
  }
  switch (w.kind) {
    case Kind::kAllreduce: {
      AllreduceOptions o;
      o.data = w.data;
      o.count = w.count;
      o.dtype = w.dtype;
      o.op = w.op;
      o.algorithm = w.algorithm;
      o.scaling = w.scaling;
      // Chosen once per Work (Work::chosen): here, unless the agreement's check chose it already.
      if (w.chosen == Algorithm::kAuto) w.chosen = chooseAllreduceAlgorithm(ctx, o);
      HORA_TRACE("allreduce '%s' %zu x %s with %s", w.name.c_str(), w.count, dtypeName(w.dtype), algorithmName(w.chosen));
      if (options_.timeline) w.times.algorithm = algorithmName(w.chosen);
      o.algorithm = w.chosen;
      const JoinAdjusted a = adjustForJoin(w.op, w.scaling, joined.contributors, p);
      o.op = a.op;
      o.scaling = a.scaling;
      HORA_RETURN_IF_ERROR(allreduce(ctx, o));
      scaleForAvg(w.dtype, w.data, w.count, a.divideBy);
      return Status::ok();
    }
    case Kind::kBroadcast: {
      BroadcastOptions o;
      o.data = w.data;
      o.bytes = w.count * dtypeSize(w.dtype);
      o.root = w.root;
      return broadcast(ctx, o);
    }
    case Kind::kReduceScatter: {
      const size_t elem = dtypeSize(w.dtype);
      uint8_t* scratch = threadScratch(w.count * elem);
      memcpy(scratch, w.data, w.count * elem);
      ReduceScatterOptions o;
      o.data = scratch;
      o.count = w.count;
      o.dtype = w.dtype;
      const JoinAdjusted a = adjustForJoin(w.op, w.scaling, joined.contributors, p);
      o.op = a.op;
      o.scaling = a.scaling;
      HORA_RETURN_IF_ERROR(reduceScatter(ctx, o));
      memcpy(w.out, scratch + blockStart(w.count, p, r) * elem, blockCount(w.count, p, r) * elem);
      scaleForAvg(w.dtype, w.out, blockCount(w.count, p, r), a.divideBy);
      return Status::ok();
    }
    case Kind::kAllgather: {
      const size_t elem = dtypeSize(w.dtype);
      // First the counts (every rank may contribute a different number of elements), then the data.
      uint64_t total = 0;
      HORA_RETURN_IF_ERROR(allgatherCounts(ctx, w.count, elem, &w.gatheredCounts, &total));
      w.gathered.resize(total * elem);
      AllgatherOptions o;
      o.bytesPerRank.resize(p);
      size_t before = 0;
      for (int i = 0; i < p; ++i) {
        o.bytesPerRank[i] = w.gatheredCounts[i] * elem;
        if (i < r) before += o.bytesPerRank[i];
      }
      if (w.count > 0) memcpy(w.gathered.data() + before, w.data, w.count * elem);
      o.output = w.gathered.data();
      return allgather(ctx, o);
    }
    case Kind::kReduce: {
      ReduceOptions o;
      o.input = w.data;
      o.output = r == w.root ? w.out : nullptr;
      o.count = w.count;
      o.dtype = w.dtype;
      o.op = w.op;
      o.algorithm = w.algorithm;
      o.scaling = w.scaling;
      o.root = w.root;
      if (r == w.root && w.count > 0 && w.out == nullptr) return Status(Code::kInternal, "the root's reduce has no out array");
      if (options_.timeline) w.times.algorithm = algorithmName(chooseReduceAlgorithm(ctx, o));
      const JoinAdjusted a = adjustForJoin(w.op, w.scaling, joined.contributors, p);
      o.op = a.op;
      o.scaling = a.scaling;
      HORA_RETURN_IF_ERROR(reduce(ctx, o));
      if (r == w.root) scaleForAvg(w.dtype, w.out, w.count, a.divideBy);
      return Status::ok();
    }
    case Kind::kGather: {
      const size_t elem = dtypeSize(w.dtype);
      // The counts first (ranks may contribute different numbers of elements), bounded on every rank alike.
      std::vector<uint64_t> counts;
      uint64_t total = 0;
      HORA_RETURN_IF_ERROR(allgatherCounts(ctx, w.count, elem, &counts, &total));
      GatherOptions o;
      o.input = w.data;
      o.root = w.root;
      o.bytesPerRank.resize(p);
      for (int i = 0; i < p; ++i) o.bytesPerRank[i] = counts[i] * elem;
      if (r == w.root) {
        w.gathered.resize(total * elem);
        w.gatheredCounts = std::move(counts);
      }
      o.output = w.gathered.data();
      return gather(ctx, o);
    }
    case Kind::kAlltoall:
    case Kind::kScatter:
      return runAlltoall(ctx, w, options_.shmSingleCopy, firstRound_.done ? &firstRound_ : nullptr);
    case Kind::kBarrier:
    case Kind::kInvalid:
      return Status::ok();
    case Kind::kSend:
    case Kind::kRecv:
    case Kind::kJoin:
      break;  // posted to p2p_, never queued; join: runJoin()
  }
  return Status(Code::kInternal, "unknown collective kind");
}

}  // namespace hora
