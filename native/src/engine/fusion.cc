// Tensor fusion (Communicator::runBatch() decides which calls form a run): runs of small allreduces of one
// batch packed into one buffer, agreed on and reduced once, and copied back. Why fusion pays, and up to
// which size, is at fusable(); how a failed agreement of a run keeps the ranks in step, at runFused().
#include <cstring>

#include "engine/agreement.h"
#include "engine/communicator.h"
#include "reduce/reduce.h"

namespace hora {
namespace {

// Largest tensor that is fused with others (see fusable()).
constexpr size_t kFusionTensorMaxBytes = 128 * 1024;

}  // namespace

// Fusion trades two copies of a tensor (into the fusion buffer and back) for one collective's fixed
// cost. That pays for small tensors only: a collective costs some microseconds on shared memory and tens
// on TCP, which is the time to copy a few hundred KiB, so larger tensors go out on their own.
bool Communicator::fusable(const Work& w) const {
  const size_t bytes = w.count * dtypeSize(w.dtype);
  return w.kind == Kind::kAllreduce && w.device < 0 && options_.fusionBytes > 0 && w.count > 0 && bytes < options_.fusionBytes &&
         bytes <= kFusionTensorMaxBytes;
}

// Tensor fusion: pack the run of allreduces into one buffer, reduce it once, unpack. Every rank fuses the
// same runs because batches are formed by program order, or by name (see ts/dispatcher.ts), and the agreement
// checks the run tensor by tensor: a digest of the names and counts in order (engine/layout.h), so
// that no rank adds a tensor's elements to another's; a difference names the first tensor that differs.
//
// When the agreement fails (another rank's call at this position was invalid, or differs), the ranks may
// have grouped different numbers of calls, so the group cannot fail as a whole: every rank fails only the
// first call of its group, the one all ranks were checking at this position, and takes the rest up again.
// That keeps the ranks in step call by call. Where the ranks' runs begin with the same tensors (a rank's
// run was cut short by an invalid call after them, say), those are reduced and completed instead, and the
// rest taken up again (agree()'s alike). Returns the index of the first call not yet completed.
size_t Communicator::runFused(std::vector<std::shared_ptr<Work>>& batch, size_t begin, size_t end) {
  const Work& first = *batch[begin];
  Group& g = groupOf(first);
  Context& ctx = *g.ctx;
  const size_t elem = dtypeSize(first.dtype);
  size_t total = 0;
  for (size_t k = begin; k < end; ++k) total += batch[k]->count;
  WorkTimes group;
  if (options_.timeline) {
    group.started = monotonicNanos();
    group.fusedTensors = static_cast<uint32_t>(end - begin);
    takeKernelTime(nullptr);
  }
  if (fusionBuffer_.size() < total * elem) fusionBuffer_.resize(total * elem);
  uint8_t* buf = fusionBuffer_.data();
  size_t off = 0;
  for (size_t k = begin; k < end; ++k) {
    stamp(&batch[k]->times.copyInStart);
    memcpy(buf + off, batch[k]->data, batch[k]->count * elem);
    off += batch[k]->count * elem;
    stamp(&batch[k]->times.copyInEnd);
  }
  ctx.startDeadline();
  const Layout layout(&batch[begin], end - begin);
  Proposal proposal = proposalForRun(layout, g.seq++, total);
  group.seq = proposal.seq;
  stamp(&group.negotiateStart);
  Status st;
  size_t alike = 0;
  // The run's algorithm, chosen once for its total (again below if the run is cut to its alike tensors).
  Algorithm runs = Algorithm::kAuto;
  bool rodeAlong = carriesPayload(proposal, ctx, &runs);
  // How many ranks contributed (the others have joined: hora.join(); they run the total with a neutral buffer).
  Joined joined;
  joined.contributors = static_cast<uint32_t>(ctx.size());
  if (rodeAlong) {
    group.algorithm = kRodeAlong;
    st = agree(ctx, proposal, "", buf, &layout, &alike, nullptr, &joined);
    stamp(&group.negotiateEnd);
    // A rank has joined: the payload did not ride along, and the allreduce runs below.
    if (st.isOk() && joined.contributors < static_cast<uint32_t>(ctx.size())) {
      rodeAlong = false;
      group.algorithm = nullptr;
    }
    if (st.isOk() && rodeAlong && first.op == ReduceOp::kAvg && !first.scaling.active()) scaleForAvg(first.dtype, buf, total, ctx.size());
  } else {
    st = agree(ctx, proposal, "", nullptr, &layout, &alike, nullptr, &joined);
    stamp(&group.negotiateEnd);
  }
  if (!st.isOk() && alike > 0) {
    // Every rank's run begins with these tensors alike: reduce them (nothing rode along), and leave the rest.
    for (size_t k = begin + alike; k < end; ++k) batch[k]->times.copyInStart = batch[k]->times.copyInEnd = 0;
    end = begin + alike;
    total = 0;
    for (size_t k = begin; k < end; ++k) total += batch[k]->count;
    if (options_.timeline) group.fusedTensors = static_cast<uint32_t>(alike);
    rodeAlong = false;
    runs = Algorithm::kAuto;
    st = Status::ok();
  }
  // The fused tensors share the group's phases; each keeps its own copies.
  auto shareGroupTimes = [&](Work& w) {
    if (!options_.timeline) return;
    const WorkTimes own = w.times;
    w.times = group;
    w.times.enqueued = own.enqueued;
    w.times.copyInStart = own.copyInStart;
    w.times.copyInEnd = own.copyInEnd;
  };
  if (!st.isOk() && !isFatal(st.code())) {
    if (options_.timeline) takeKernelTime(&group);
    shareGroupTimes(*batch[begin]);
    for (size_t k = begin + 1; k < end; ++k) batch[k]->times.copyInStart = batch[k]->times.copyInEnd = 0;
    complete(batch[begin], st, st.isOk() ? std::string() : describeWork(first));
    return begin + 1;
  }
  if (st.isOk() && !rodeAlong) {
    AllreduceOptions o;
    o.data = buf;
    o.count = total;
    o.dtype = first.dtype;
    o.algorithm = first.algorithm;
    const JoinAdjusted a = adjustForJoin(first.op, first.scaling, joined.contributors, ctx.size());
    o.op = a.op;
    o.scaling = a.scaling;
    if (runs == Algorithm::kAuto) runs = chooseAllreduceAlgorithm(ctx, o);
    if (options_.timeline) group.algorithm = algorithmName(runs);
    o.algorithm = runs;
    st = allreduce(ctx, o);
    if (st.isOk()) scaleForAvg(first.dtype, buf, total, a.divideBy);
    stamp(&group.transferEnd);
  }
  if (options_.timeline) takeKernelTime(&group);
  off = 0;
  for (size_t k = begin; k < end; ++k) {
    Work& w = *batch[k];
    shareGroupTimes(w);
    stamp(&w.times.copyOutStart);
    if (st.isOk()) memcpy(w.data, buf + off, w.count * elem);
    stamp(&w.times.copyOutEnd);
    off += w.count * elem;
    w.fused = true;
    complete(batch[k], st, st.isOk() ? std::string()
                                     : describeWork(w) + " (fused with " + std::to_string(end - begin - 1) + " other tensors)");
  }
  return end;
}

}  // namespace hora
