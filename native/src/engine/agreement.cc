#include "engine/agreement.h"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/recursive_doubling.h"
#include "common/hash.h"
#include "engine/agreement_internal.h"
#include "engine/group.h"
#include "reduce/reduce.h"

namespace hora {

using agreement::Message;
using agreement::VerdictState;
using agreement::hasRoot;
using agreement::isJoin;

namespace {

bool sameCollective(const Proposal& a, const Proposal& b) {
  return a.seq == b.seq && a.group == b.group && a.kind == b.kind && a.op == b.op && a.dtype == b.dtype && a.root == b.root &&
         a.algorithm == b.algorithm && a.onDevice == b.onDevice && a.recvSplits == b.recvSplits &&
         a.numTensors == b.numTensors && a.nameHash == b.nameHash && (!a.compareCount || a.count == b.count) &&
         a.prescale == b.prescale && a.postscale == b.postscale;
}

// Whether a and b differ only in the tensors they carry, one of them being a fused run: the same fused
// allreduce split into different tensors (their names, counts, order or number).
bool differInLayoutOnly(const Proposal& a, const Proposal& b) {
  if (a.numTensors <= 1 && b.numTensors <= 1) return false;
  Proposal same = b;
  same.numTensors = a.numTensors;
  same.nameHash = a.nameHash;
  same.count = a.count;
  return a.kind == static_cast<uint8_t>(Kind::kAllreduce) && sameCollective(a, same);
}

// Whether the proposal holds its name cut (or just fits): only the whole name then tells it apart.
bool nameCut(const Proposal& p) { return strnlen(p.name, sizeof(p.name)) == sizeof(p.name) - 1; }

// Whether a and b are the same lone collective under two names that their proposals do not show whole.
bool differInNameOnly(const Proposal& a, const Proposal& b) {
  if (a.numTensors > 1 || b.numTensors > 1 || a.nameHash == b.nameHash || !(nameCut(a) || nameCut(b))) return false;
  Proposal same = b;
  same.nameHash = a.nameHash;
  return sameCollective(a, same);
}

// A join proposal agrees with any collective at the same place of the same group's order.
bool joinAgrees(const Proposal& a, const Proposal& b) { return a.seq == b.seq && a.group == b.group; }

// The join counters of two disjoint sets of ranks, combined (the same on both sides: sums and a maximum).
struct JoinCounters {
  uint32_t contributors, rootsLive;
  int32_t lastJoiner;
  uint64_t lastJoinedAt;
};

JoinCounters joinCounters(const Message& a, const Message& b) {
  const bool aLater = a.lastJoinedAt > b.lastJoinedAt || (a.lastJoinedAt == b.lastJoinedAt && a.lastJoiner > b.lastJoiner);
  return {a.contributors + b.contributors, a.rootsLive + b.rootsLive, aLater ? a.lastJoiner : b.lastJoiner,
          aLater ? a.lastJoinedAt : b.lastJoinedAt};
}

void setJoinCounters(Message* out, const JoinCounters& c) {
  out->contributors = c.contributors;
  out->rootsLive = c.rootsLive;
  out->lastJoiner = c.lastJoiner;
  out->lastJoinedAt = c.lastJoinedAt;
}

void mergeJoinCounters(Message* out, const Message& a, const Message& b) { setJoinCounters(out, joinCounters(a, b)); }

void setText(Message* m, const std::string& s) {
  size_t n = s.size() < sizeof(m->text) - 1 ? s.size() : sizeof(m->text) - 1;
  memcpy(m->text, s.data(), n);
  m->text[n] = '\0';
}

// Commutative in the sense that matters: combine(lower, higher) is computed identically on both sides.
// out is neither input.
void combine(Message* out, const Message* lower, const Message* higher) {
  Message& result = *out;
  if (lower->state != 0 || higher->state != 0) {
    // Keep the verdict that involves the lowest rank; invalid input beats a mismatch it may have caused.
    const uint8_t invalid = static_cast<uint8_t>(VerdictState::kInvalid);
    const Message* pick;
    if (lower->state == 0) {
      pick = higher;
    } else if (higher->state == 0) {
      pick = lower;
    } else if ((lower->state == invalid) != (higher->state == invalid)) {
      pick = lower->state == invalid ? lower : higher;
    } else {
      pick = lower->culprit <= higher->culprit ? lower : higher;
    }
    result = *pick;
  } else if ((isJoin(lower->proposal) || isJoin(higher->proposal)) && joinAgrees(lower->proposal, higher->proposal)) {
    // The wildcard: the verdict carries a live proposal when there is one (the lowest rank's of two joins).
    result = isJoin(lower->proposal) && !isJoin(higher->proposal) ? *higher : *lower;
    mergeJoinCounters(&result, *lower, *higher);
  } else if (!sameCollective(lower->proposal, higher->proposal)) {
    result = *lower;
    result.state = static_cast<uint8_t>(differInLayoutOnly(lower->proposal, higher->proposal) ? VerdictState::kLayout
                                        : differInNameOnly(lower->proposal, higher->proposal) ? VerdictState::kName
                                                                                              : VerdictState::kMismatch);
    result.culprit = lower->proposer < higher->proposer ? lower->proposer : higher->proposer;
    setText(&result, "rank " + std::to_string(lower->proposer) + " submitted " + describe(lower->proposal) +
                         " but rank " + std::to_string(higher->proposer) + " submitted " +
                         describe(higher->proposal));
  } else {
    result = lower->proposer <= higher->proposer ? *lower : *higher;
    mergeJoinCounters(&result, *lower, *higher);
  }
  result.splitsSum = lower->splitsSum + higher->splitsSum;
}

// combine() of two messages without a verdict, neither a join, that propose the same collective, into
// mine: what combine() leaves in its out, less the copies of whole messages.
void mergeAgreeing(Message* mine, const Message& theirs) {
  const JoinCounters counters = joinCounters(*mine, theirs);
  const uint64_t splitsSum = mine->splitsSum + theirs.splitsSum;
  if (theirs.proposer < mine->proposer) *mine = theirs;
  setJoinCounters(mine, counters);
  mine->splitsSum = splitsSum;
}

// A factor as JS would print it: the fewest digits that read back as the same double.
std::string shortest(double v) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace

std::string describe(const Proposal& p) { return describe(p, std::string(p.name, strnlen(p.name, sizeof(p.name)))); }

std::string describe(const Proposal& p, const std::string& name) {
  Kind kind = static_cast<Kind>(p.kind);
  std::string s = kindName(kind);
  if (!name.empty()) s += " '" + name + "'";
  if (kind != Kind::kBarrier && kind != Kind::kInvalid && kind != Kind::kJoin) {
    s += " (" + std::string(dtypeName(static_cast<DType>(p.dtype))) + " x " + std::to_string(p.count);
    if (kind == Kind::kAllreduce || kind == Kind::kReduceScatter || kind == Kind::kReduce) {
      s += std::string(", op ") + opName(static_cast<ReduceOp>(p.op));
      if (p.prescale != 1) s += ", prescaleFactor " + shortest(p.prescale);
      if (p.postscale != 1) s += ", postscaleFactor " + shortest(p.postscale);
    }
    if (kind == Kind::kBroadcast || kind == Kind::kReduce || kind == Kind::kGather || kind == Kind::kScatter) {
      s += ", root " + std::to_string(p.root);
    }
    if (p.recvSplits) s += ", recvSplits given";
    if (p.numTensors > 1) s += ", " + std::to_string(p.numTensors) + " fused tensors";
    s += p.onDevice ? ", in GPU memory)" : ")";
  }
  s += " as collective #" + std::to_string(p.seq);
  if (p.group != 0) s += " of group " + std::to_string(p.group);
  return s;
}

Proposal proposalFor(const Work& w, uint64_t seq, size_t numTensors, uint64_t totalCount) {
  Proposal p;
  p.seq = seq;
  p.kind = static_cast<uint8_t>(w.kind);
  const bool reduces = w.kind == Kind::kAllreduce || w.kind == Kind::kReduceScatter || w.kind == Kind::kReduce;
  p.op = static_cast<uint8_t>(reduces ? w.op : ReduceOp::kSum);
  p.dtype = static_cast<uint8_t>(w.dtype);
  p.root = w.kind == Kind::kBroadcast || w.kind == Kind::kReduce || w.kind == Kind::kGather || w.kind == Kind::kScatter ? w.root : 0;
  p.count = w.kind == Kind::kBarrier || w.kind == Kind::kJoin ? 0 : totalCount;
  // Ranks bring their own counts to these; an alltoall's splits are checked apart (splitsDigest).
  p.compareCount = w.kind == Kind::kAllgather || w.kind == Kind::kGather || w.kind == Kind::kAlltoall || w.kind == Kind::kScatter ? 0 : 1;
  p.numTensors = static_cast<uint32_t>(numTensors);
  p.group = w.group != nullptr ? w.group->id : 0;
  p.algorithm = static_cast<uint8_t>(w.algorithm);
  p.onDevice = w.device >= 0 ? 1 : 0;
  if (reduces) {
    p.prescale = w.scaling.pre;
    p.postscale = w.scaling.post;
  }
  p.nameHash = numTensors > 1 ? 0 : fnv1a64(w.name);  // a fused run's: proposalForRun()
  // The name as error messages show it, cut to fit (name is zero-filled); no string is built for it.
  const char* prefix = numTensors > 1 ? "fused:" : "";
  const size_t lead = strlen(prefix), room = sizeof(p.name) - 1;
  memcpy(p.name, prefix, lead);
  const size_t n = w.name.size() < room - lead ? w.name.size() : room - lead;
  memcpy(p.name + lead, w.name.data(), n);
  return p;
}

namespace {

uint64_t edgeHash(int from, int to, uint64_t count) {
  const uint64_t fields[] = {static_cast<uint64_t>(from), static_cast<uint64_t>(to), count};
  return fnv1a64(fields, sizeof(fields));
}

}  // namespace

uint64_t splitsDigest(const std::vector<uint64_t>& splits, int rank, int size) {
  if (splits.size() != 2 * static_cast<size_t>(size)) return 0;
  uint64_t sum = 0;
  for (int q = 0; q < size; ++q) sum += edgeHash(rank, q, splits[q]) - edgeHash(q, rank, splits[size + q]);
  return sum;
}

Proposal proposalForRun(const Layout& run, uint64_t seq, uint64_t totalCount) {
  Proposal p = proposalFor(run[0], seq, run.size(), totalCount);
  p.nameHash = layoutDigest(run);
  return p;
}

namespace {

// How a partner's payload is taken in once its message has arrived.
enum class Take { kDiscard, kReduce, kCopy };

// One step: send this rank's message and payload and receive the partner's message; then take in its
// payload, whose length comes from its message and is bounds-checked before a byte is read. When the
// partner's payload is to be combined, it is reduced straight out of the transport (the shared-memory
// slot or the TCP read-ahead buffer), without an intermediate copy. decide() looks at the partner's
// message and says how to take its payload.
//
// On the wire a message is its head (everything before the text), then the text only when the message
// carries a verdict (state != 0), then the payload. Head, text and a payload of up to kCoalesceBytes go
// out in one gathered write (Pair::trySendTwo: one shared-memory slot, or one sendmsg()), the payload
// straight from its buffer: one write, and usually one read, for the allreduces that are pure latency.
// Larger payloads go as a second send, also straight from their buffer.
constexpr size_t kHeadBytes = offsetof(Message, text);
constexpr size_t kCoalesceBytes = 4096;

template <typename Decide>
Status exchange(Context& ctx, int partner, const Message& out, const uint8_t* payload, Message* in, bool send,
                bool recv, uint8_t* into, ReduceOp op, DType dtype, const ScaledStep* scaled, Decide&& decide) {
  alignas(64) static thread_local uint8_t wire[sizeof(Message)];
  SendOp sends[2] = {{ctx.pair(partner), wire, 0}, {ctx.pair(partner), payload, out.payloadBytes}};
  int numSends = 0;
  if (send) {
    // A message without a verdict is its head, sent straight from out; what the pair does not take now
    // goes on from a copy (out may change before it is sent: decide() merges the partner's message in).
    const bool whole = out.state != 0;
    size_t n = kHeadBytes;
    const uint8_t* head = reinterpret_cast<const uint8_t*>(&out);
    if (whole) {
      memcpy(wire, &out, kHeadBytes);
      memcpy(wire + n, out.text, sizeof(out.text));
      n += sizeof(out.text);
      head = wire;
    }
    numSends = 1;
    sends[0].len = n;
    size_t taken = 0;
    if (out.payloadBytes > 0 && out.payloadBytes <= kCoalesceBytes) {
      // One gathered write, straight from the payload's buffer; what does not fit now goes on below.
      HORA_RETURN_IF_ERROR(sends[0].pair->trySendTwo(head, n, payload, out.payloadBytes, &taken));
    } else {
      HORA_RETURN_IF_ERROR(sends[0].pair->trySend(head, n, &taken));
      if (out.payloadBytes > 0) numSends = 2;
    }
    const size_t headTaken = taken < n ? taken : n;
    sends[0].done = headTaken;
    sends[1].done = taken - headTaken;
    if (sends[1].done < sends[1].len) numSends = 2;
    if (!whole && headTaken < n) memcpy(wire + headTaken, head + headTaken, n - headTaken);
  }
  RecvOp head{ctx.pair(partner), reinterpret_cast<uint8_t*>(in), kHeadBytes};
  HORA_RETURN_IF_ERROR(ctx.progress(sends, numSends, &head, recv ? 1 : 0));
  if (!recv) return Status::ok();
  if (in->state != 0) {
    RecvOp text{ctx.pair(partner), reinterpret_cast<uint8_t*>(in->text), sizeof(in->text)};
    HORA_RETURN_IF_ERROR(ctx.progress(nullptr, 0, &text, 1));
    in->text[sizeof(in->text) - 1] = '\0';
  } else {
    in->text[0] = '\0';
  }
  const size_t inBytes = in->payloadBytes;
  if (inBytes > kSmallAllreduceBytes) {
    return Status(Code::kInternal, "rank " + std::to_string(partner) + " sent a malformed agreement message (" +
                                       std::to_string(inBytes) + " payload bytes)", partner);
  }
  if (inBytes == 0) return Status::ok();
  Take take = decide(*in);
  RecvOp body{ctx.pair(partner), take == Take::kDiscard ? threadScratch(kSmallAllreduceBytes) : into, inBytes};
  if (take == Take::kReduce) {
    body.reduce = true;
    body.op = op;
    body.dtype = dtype;
    body.scaled = scaled;
  }
  return ctx.progress(nullptr, 0, &body, 1);
}

// Recursive doubling (see algorithms/recursive_doubling.h for how it works) over a message whose payload
// length may differ between ranks that disagree. The payload is only ever combined while every message
// seen so far agrees, so it ends as the reduction over all ranks exactly when the verdict is "agreed".
// Reduction order does not matter for identical results: every kernel is commutative bit for bit. Scaled
// (prescaleFactor, postscaleFactor), the steps scale as recursiveDoubling's do (algorithms/recursive_doubling.h):
// an operand still a rank's own input by pre, and the last round finishes.
//
// swap (two ranks, whose one step is the exchange below; payload is then swap->out, and nothing is reduced):
// the partner's payload goes to swap->in instead, when it has swap->inBytes and the two messages agree.
Status disseminate(Context& ctx, Message* msg, uint8_t* payload, ReduceOp op, DType dtype, const Scaling& scaling,
                   Swap* swap = nullptr) {
  const int size = ctx.size(), rank = ctx.rank();
  if (size == 1) return Status::ok();
  const RecursiveDoublingSchedule plan(size);
  Message theirs;
  const uint32_t mine = msg->payloadBytes;
  // What a partner's payload must measure to be taken, and where it goes.
  const uint32_t expected = swap != nullptr ? swap->inBytes : mine;
  uint8_t* into = swap != nullptr ? swap->in : payload;
  // Merging messages and deciding on the payload go together: reduce only when both sides agreed so far,
  // their combination still agrees, and the sizes match (which agreement implies).
  auto mergeWith = [&](bool theyAreLower) {
    return [&, theyAreLower](const Message& m) {
      bool reduce;
      if (msg->state == 0 && m.state == 0 && !isJoin(msg->proposal) && !isJoin(m.proposal) &&
          sameCollective(msg->proposal, m.proposal)) {
        // The usual case, two messages that agree: combine() without its copies, in place.
        mergeAgreeing(msg, m);
        reduce = m.payloadBytes == expected && expected > 0 && (swap == nullptr || msg->splitsSum == 0);
      } else {
        Message combined;
        combine(&combined, theyAreLower ? &m : msg, theyAreLower ? msg : &m);
        reduce = msg->state == 0 && m.state == 0 && combined.state == 0 && m.payloadBytes == expected && expected > 0 &&
                 swap == nullptr;
        *msg = combined;
      }
      msg->payloadBytes = mine;
      if (reduce && swap != nullptr) {
        swap->came = true;
        return Take::kCopy;
      }
      return reduce ? Take::kReduce : Take::kDiscard;
    };
  };
  auto finish = [&](bool theyAreLower, const Message& m) {
    // A partner with no payload never reaches the decide() step; merge its message here.
    if (m.payloadBytes == 0) mergeWith(theyAreLower)(m);
  };

  if (plan.sitsOut(rank)) {
    auto noDecision = [](const Message&) { return Take::kDiscard; };
    HORA_RETURN_IF_ERROR(exchange(ctx, rank + 1, *msg, payload, &theirs, true, false, nullptr, op, dtype, nullptr, noDecision));
    // The final result comes back; it is taken only when everyone agreed (then it has this rank's size).
    auto takeResult = [&](const Message& m) {
      return m.state == 0 && m.payloadBytes == mine && mine > 0 ? Take::kCopy : Take::kDiscard;
    };
    HORA_RETURN_IF_ERROR(exchange(ctx, rank + 1, *msg, payload, &theirs, false, true, payload, op, dtype, nullptr, takeResult));
    *msg = theirs;
    msg->payloadBytes = mine;
    return Status::ok();
  }
  const bool scaled = scaling.active();
  ScaledStep step;  // set only when scaled: an unscaled agreement does no work for it
  if (plan.foldsIn(rank)) {
    if (scaled) step = scaledStep(scaling, true, true, false, op, size);
    HORA_RETURN_IF_ERROR(exchange(ctx, rank - 1, *msg, payload, &theirs, false, true, payload, op, dtype,
                                  scaled ? &step : nullptr, mergeWith(true)));
    finish(true, theirs);
  }
  const int newRank = plan.renumbered(rank);
  for (int mask = 1; mask < plan.pof2; mask <<= 1) {
    const int newPartner = newRank ^ mask;
    const int partner = plan.actual(newPartner);
    // exchange() copies this rank's message out before decide() merges the partner's into it.
    if (scaled) {
      step = scaledStep(scaling, mask == 1 && !plan.foldsIn(rank), mask == 1 && !plan.foldsIn(partner), mask * 2 >= plan.pof2,
                        op, size);
    }
    HORA_RETURN_IF_ERROR(exchange(ctx, partner, *msg, payload, &theirs, true, true, into, op, dtype,
                                  scaled ? &step : nullptr, mergeWith(newPartner < newRank)));
    finish(newPartner < newRank, theirs);
  }
  if (plan.foldsIn(rank)) {
    auto noDecision = [](const Message&) { return Take::kDiscard; };
    HORA_RETURN_IF_ERROR(exchange(ctx, rank - 1, *msg, payload, &theirs, true, false, nullptr, op, dtype, nullptr, noDecision));
  }
  return Status::ok();
}

}  // namespace

bool partnerMessageArrived(Context& ctx) {
  if (ctx.size() != 2) return false;
  Pair* pair = ctx.pair(1 - ctx.rank());
  if (pair == nullptr) return false;
  const uint8_t* data = nullptr;
  size_t avail = 0;
  if (!pair->peek(kHeadBytes, &data, &avail).isOk() || avail < kHeadBytes) return false;
  // The three fields this needs, read where they lie (a whole Message made and filled cost more than the rest).
  uint32_t payloadBytes = 0;
  uint8_t kind = 0, state = 0;
  memcpy(&payloadBytes, data + offsetof(Message, payloadBytes), sizeof payloadBytes);
  memcpy(&kind, data + offsetof(Message, proposal) + offsetof(Proposal, kind), sizeof kind);
  memcpy(&state, data + offsetof(Message, state), sizeof state);
  if (payloadBytes > kSmallAllreduceBytes) return false;
  // A partner that has joined (hora.join()) turns a small allreduce into an agreement and an allreduce, and
  // the second waits on the partner: it goes to the communication thread.
  if (kind == static_cast<uint8_t>(Kind::kJoin)) return false;
  const size_t whole = kHeadBytes + (state != 0 ? sizeof(Message::text) : 0) + payloadBytes;
  return pair->peek(whole, &data, &avail).isOk() && avail >= whole;
}

bool carriesPayload(const Proposal& p, const Context& ctx, Algorithm* chosen) {
  return carriesPayload(static_cast<Kind>(p.kind), p.count, static_cast<DType>(p.dtype), p.onDevice != 0,
                        static_cast<Algorithm>(p.algorithm), ctx, chosen);
}

bool carriesPayload(Kind kind, uint64_t count, DType dtype, bool onDevice, Algorithm algorithm, const Context& ctx,
                    Algorithm* chosen) {
  if (kind != Kind::kAllreduce || count == 0 || onDevice) return false;
  if (count * dtypeSize(dtype) > kSmallAllreduceBytes) return false;
  // The exchange is recursive doubling: it carries the payload when that is the algorithm this
  // allreduce would run anyway (the same choice on every rank: the topology is the same everywhere).
  Algorithm mine = Algorithm::kAuto;
  if (chosen == nullptr) chosen = &mine;
  if (*chosen == Algorithm::kAuto) {
    AllreduceOptions o;
    o.count = count;
    o.dtype = dtype;
    o.algorithm = algorithm;
    *chosen = chooseAllreduceAlgorithm(ctx, o);
  }
  return *chosen == Algorithm::kRecursiveDoubling;
}

Status agree(Context& ctx, const Proposal& mine, const std::string& invalidReason, uint8_t* payload,
             const Layout* layout, size_t* alike, const std::vector<uint64_t>* splits, Joined* joined, Swap* swap) {
  size_t ignored = 0;
  if (alike == nullptr) alike = &ignored;
  *alike = 0;
  Message msg;
  msg.proposal = mine;
  // Messages name world ranks, also inside a process group.
  msg.proposer = ctx.worldRank(ctx.rank());
  msg.culprit = msg.proposer;
  if (splits != nullptr && mine.recvSplits && mine.kind == static_cast<uint8_t>(Kind::kAlltoall)) {
    msg.splitsSum = splitsDigest(*splits, ctx.rank(), ctx.size());
  }
  // Reduce a private copy: if a later step finds a disagreement, the caller's buffer is left untouched.
  // Two ranks take one step, which reduces only when the two proposals agree, and that is the verdict:
  // they reduce into the caller's buffer at once.
  alignas(64) static thread_local uint8_t work[kSmallAllreduceBytes];
  uint8_t* userPayload = payload;
  if (payload != nullptr) {
    msg.payloadBytes = static_cast<uint32_t>(mine.count * dtypeSize(static_cast<DType>(mine.dtype)));
    if (ctx.size() > 2) {
      memcpy(work, payload, msg.payloadBytes);
      payload = work;
    }
  }
  if (swap != nullptr && (payload != nullptr || ctx.size() != 2)) swap = nullptr;
  if (swap != nullptr) {
    swap->came = false;
    msg.payloadBytes = swap->outBytes;
    // Only sent: the partner's bytes go to swap->in.
    payload = const_cast<uint8_t*>(swap->out);
  }
  const bool joinedHere = isJoin(mine);
  msg.contributors = joinedHere ? 0 : 1;
  msg.rootsLive = hasRoot(mine.kind) && mine.root == ctx.rank() ? 1 : 0;
  if (joinedHere) {
    msg.lastJoiner = ctx.rank();
    msg.lastJoinedAt = mine.joinedAt;
  }
  if (mine.kind == static_cast<uint8_t>(Kind::kInvalid)) {
    msg.state = static_cast<uint8_t>(VerdictState::kInvalid);
    setText(&msg, "rank " + std::to_string(msg.proposer) + " made an invalid call: " + invalidReason);
  }
  Scaling scaling;
  scaling.pre = mine.prescale;
  scaling.post = mine.postscale;
  HORA_RETURN_IF_ERROR(disseminate(ctx, &msg, payload, static_cast<ReduceOp>(mine.op), static_cast<DType>(mine.dtype), scaling, swap));
  // A group of one combines nothing: its payload is scaled alone.
  if (ctx.size() == 1 && payload != nullptr && scaling.active()) scaleAlone(static_cast<DType>(mine.dtype), payload, mine.count, scaling);
  msg.text[sizeof(msg.text) - 1] = '\0';
  switch (static_cast<VerdictState>(msg.state)) {
    case VerdictState::kAgreed: {
      const bool someJoined = msg.contributors < static_cast<uint32_t>(ctx.size());
      if (joined != nullptr) {
        joined->contributors = msg.contributors;
        joined->lastJoiner = msg.lastJoiner;
        joined->live = msg.proposal;
      }
      if (someJoined && msg.contributors > 0) HORA_RETURN_IF_ERROR(agreement::refusedWhileJoined(ctx, msg));
      if (!someJoined && userPayload != nullptr && payload != userPayload) memcpy(userPayload, work, msg.payloadBytes);
      // Every rank has the same sum, so every rank takes part in the second round, or none does.
      if (msg.splitsSum != 0) {
        if (splits != nullptr) return agreement::explainSplits(ctx, *splits, msg);
        return Status(Code::kMismatch, "the alltoall's splits and recvSplits do not match across ranks, in " + describe(msg.proposal), -1);
      }
      return Status::ok();
    }
    case VerdictState::kInvalid:
      // A reason cut to fit the text is exchanged whole (every rank sees the same text, so all take part).
      if (strlen(msg.text) == sizeof(msg.text) - 1) return agreement::explainInvalid(ctx, invalidReason, msg);
      return Status(Code::kInvalidArgument, msg.text, msg.culprit);
    case VerdictState::kLayout: return agreement::explainLayouts(ctx, mine, layout, msg, alike);
    case VerdictState::kName: return agreement::explainNames(ctx, mine, layout, msg);
    default: return Status(Code::kMismatch, msg.text, -1);
  }
}

}  // namespace hora
