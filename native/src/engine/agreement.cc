#include "engine/agreement.h"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/recursive_doubling.h"
#include "common/hash.h"
#include "engine/group.h"
#include "reduce/reduce.h"

namespace hora {
namespace {

// kLayout: a mismatch in the tensors of a fused run only; agree() then exchanges the layouts to name them.
// kName: a mismatch in the name only, one of them longer than the proposal holds; agree() then exchanges
// the names whole to show them.
enum class VerdictState : uint8_t { kAgreed = 0, kMismatch = 1, kInvalid = 2, kLayout = 3, kName = 4 };

// What travels: the proposal of the lowest rank in the group so far, and the group's verdict.
struct Message {
  Proposal proposal;
  int32_t proposer = 0;  // rank whose proposal this is
  uint8_t state = 0;
  int32_t culprit = 0;   // lowest rank involved in the disagreement; orders verdicts deterministically
  uint32_t payloadBytes = 0;  // bytes of reduced data that follow this message on the wire
  // Join (hora.join()), summed or kept over the ranks combined so far: how many proposed a collective (not
  // kJoin); how many of those are the root of the broadcast they propose; the rank that joined last (of
  // this context; -1: none), with its joinedAt.
  uint32_t contributors = 0;
  uint32_t rootsLive = 0;
  int32_t lastJoiner = -1;
  uint64_t lastJoinedAt = 0;
  uint64_t splitsSum = 0;     // the sum of the splitsDigest of every rank combined so far
  char text[400];             // the verdict's words; read only when state != 0
  Message() { text[0] = '\0'; }
  // Copies the text only when there is a verdict: an agreed message is its head.
  Message(const Message& m) { *this = m; }
  Message& operator=(const Message& m) {
    memcpy(static_cast<void*>(this), &m, m.state != 0 ? sizeof(Message) : offsetof(Message, text) + 1);
    return *this;
  }
};

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

bool isJoin(const Proposal& p) { return p.kind == static_cast<uint8_t>(Kind::kJoin); }

// The kinds whose proposal names a root (broadcast, reduce, gather, scatter).
bool hasRoot(uint8_t kind) {
  const Kind k = static_cast<Kind>(kind);
  return k == Kind::kBroadcast || k == Kind::kReduce || k == Kind::kGather || k == Kind::kScatter;
}

// A join proposal agrees with any collective at the same place of the same group's order.
bool joinAgrees(const Proposal& a, const Proposal& b) { return a.seq == b.seq && a.group == b.group; }

// The join counters of two disjoint sets of ranks, combined (the same on both sides: sums and a maximum).
void mergeJoinCounters(Message* out, const Message& a, const Message& b) {
  out->contributors = a.contributors + b.contributors;
  out->rootsLive = a.rootsLive + b.rootsLive;
  const bool aLater = a.lastJoinedAt > b.lastJoinedAt || (a.lastJoinedAt == b.lastJoinedAt && a.lastJoiner > b.lastJoiner);
  out->lastJoiner = aLater ? a.lastJoiner : b.lastJoiner;
  out->lastJoinedAt = aLater ? a.lastJoinedAt : b.lastJoinedAt;
}

void setText(Message* m, const std::string& s) {
  size_t n = s.size() < sizeof(m->text) - 1 ? s.size() : sizeof(m->text) - 1;
  memcpy(m->text, s.data(), n);
  m->text[n] = '\0';
}

// Commutative in the sense that matters: combine(lower, higher) is computed identically on both sides.
void combine(Message* out, const Message* lower, const Message* higher) {
  Message result;
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
  *out = result;
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
  return fnv1a64(std::string(reinterpret_cast<const char*>(fields), sizeof(fields)));
}

}  // namespace

uint64_t splitsDigest(const Work& w, int rank, int size) {
  if (w.kind != Kind::kAlltoall || w.splits.size() != 2 * static_cast<size_t>(size)) return 0;
  uint64_t sum = 0;
  for (int q = 0; q < size; ++q) sum += edgeHash(rank, q, w.splits[q]) - edgeHash(q, rank, w.splits[size + q]);
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
    size_t n = kHeadBytes;
    memcpy(wire, &out, kHeadBytes);
    if (out.state != 0) {
      memcpy(wire + n, out.text, sizeof(out.text));
      n += sizeof(out.text);
    }
    numSends = 1;
    sends[0].len = n;
    if (out.payloadBytes > 0 && out.payloadBytes <= kCoalesceBytes) {
      // One gathered write, straight from the payload's buffer; what does not fit now goes on below.
      size_t taken = 0;
      HORA_RETURN_IF_ERROR(sends[0].pair->trySendTwo(wire, n, payload, out.payloadBytes, &taken));
      const size_t headTaken = taken < n ? taken : n;
      sends[0].done = headTaken;
      sends[1].done = taken - headTaken;
      numSends = sends[1].done < sends[1].len ? 2 : 1;
    } else if (out.payloadBytes > 0) {
      numSends = 2;
    }
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
Status disseminate(Context& ctx, Message* msg, uint8_t* payload, ReduceOp op, DType dtype, const Scaling& scaling) {
  const int size = ctx.size(), rank = ctx.rank();
  if (size == 1) return Status::ok();
  const RecursiveDoublingSchedule plan(size);
  Message theirs;
  const uint32_t mine = msg->payloadBytes;
  // Merging messages and deciding on the payload go together: reduce only when both sides agreed so far,
  // their combination still agrees, and the sizes match (which agreement implies).
  auto mergeWith = [&](bool theyAreLower) {
    return [&, theyAreLower](const Message& m) {
      Message combined;
      combine(&combined, theyAreLower ? &m : msg, theyAreLower ? msg : &m);
      bool reduce = msg->state == 0 && m.state == 0 && combined.state == 0 && m.payloadBytes == mine && mine > 0;
      combined.payloadBytes = mine;
      *msg = combined;
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
    // This rank's message must go out before it is merged with the partner's: send a copy.
    Message outgoing = *msg;
    if (scaled) {
      step = scaledStep(scaling, mask == 1 && !plan.foldsIn(rank), mask == 1 && !plan.foldsIn(partner), mask * 2 >= plan.pof2,
                        op, size);
    }
    HORA_RETURN_IF_ERROR(exchange(ctx, partner, outgoing, payload, &theirs, true, true, payload, op, dtype,
                                  scaled ? &step : nullptr, mergeWith(newPartner < newRank)));
    finish(newPartner < newRank, theirs);
  }
  if (plan.foldsIn(rank)) {
    auto noDecision = [](const Message&) { return Take::kDiscard; };
    HORA_RETURN_IF_ERROR(exchange(ctx, rank - 1, *msg, payload, &theirs, true, false, nullptr, op, dtype, nullptr, noDecision));
  }
  return Status::ok();
}

// What every rank's proposal must share for the ranks to run the tensors their layouts have alike: all
// of sameCollective() but the layout's own fields (numTensors, nameHash, count).
uint64_t collectiveSignature(const Proposal& p) {
  const uint64_t fields[] = {p.seq, static_cast<uint32_t>(p.root), p.group,
                             uint64_t(p.kind) | uint64_t(p.op) << 8 | uint64_t(p.dtype) << 16 |
                                 uint64_t(p.compareCount) << 24 | uint64_t(p.algorithm) << 32 | uint64_t(p.onDevice) << 40};
  return fnv1a64(std::string(reinterpret_cast<const char*>(fields), sizeof(fields)));
}

// The second round of an agreement whose verdict is that layouts differ (kLayout), run by every rank:
// each sends its number of tensors and collective signature, then its layout (up to kMaxLayoutEntries
// tensors), to all; each words the same message from them, comparing every rank's layout with the first
// rank's, and finds the leading tensors that every rank has alike (*alike). Nothing from the network
// sizes an allocation past kMaxLayoutEntries entries a rank.
Status explainLayouts(Context& ctx, const Proposal& mine, const Layout* layout, const Message& verdict, size_t* alike) {
  const int p = ctx.size();
  struct Head {
    uint64_t numTensors;
    uint64_t signature;
  };
  std::vector<Head> heads(p);
  // A joined rank (hora.join()) carries no tensors: a head of none, left out of the comparison below.
  const bool joinedHere = isJoin(mine);
  heads[ctx.rank()] = {joinedHere ? 0 : layout != nullptr ? layout->size() : 1, joinedHere ? 0 : collectiveSignature(mine)};
  AllgatherOptions h;
  h.output = reinterpret_cast<uint8_t*>(heads.data());
  h.bytesPerRank.assign(p, sizeof(Head));
  HORA_RETURN_IF_ERROR(allgather(ctx, h));
  auto shownOf = [](uint64_t n) { return static_cast<size_t>(n < kMaxLayoutEntries ? n : kMaxLayoutEntries); };
  AllgatherOptions o;
  o.bytesPerRank.resize(p);
  std::vector<size_t> first(p + 1, 0);
  for (int i = 0; i < p; ++i) {
    o.bytesPerRank[i] = shownOf(heads[i].numTensors) * sizeof(LayoutEntry);
    first[i + 1] = first[i] + shownOf(heads[i].numTensors);
  }
  std::vector<LayoutEntry> entries(first[p]);
  LayoutEntry* own = entries.data() + first[ctx.rank()];
  for (size_t i = 0; i < shownOf(heads[ctx.rank()].numTensors); ++i) {
    if (layout != nullptr) {
      own[i] = layoutEntry((*layout)[i]);
      continue;
    }
    Work lone;  // the proposal's tensor, its name as the proposal holds it
    lone.name.assign(mine.name, strnlen(mine.name, sizeof(mine.name)));
    lone.count = mine.count;
    lone.dtype = static_cast<DType>(mine.dtype);
    own[i] = layoutEntry(lone);
  }
  o.output = reinterpret_cast<uint8_t*>(entries.data());
  HORA_RETURN_IF_ERROR(allgather(ctx, o));
  // The live ranks' views; while a rank has joined, none runs the tensors alike (the joined one could not).
  std::vector<LayoutView> views;
  bool sameCollective = true;
  for (int i = 0; i < p; ++i) {
    sameCollective &= heads[i].numTensors > 0 && heads[i].signature == heads[0].signature;
    if (heads[i].numTensors == 0) continue;
    LayoutView v;
    v.rank = ctx.worldRank(i);
    v.numTensors = heads[i].numTensors;
    v.entries = entries.data() + first[i];
    v.shown = shownOf(heads[i].numTensors);
    views.push_back(v);
  }
  *alike = sameCollective ? commonPrefix(views.data(), views.size()) : 0;
  for (size_t i = 1; i < views.size(); ++i) {
    if (layoutsDiffer(views[0], views[i])) {
      const Proposal& at = verdict.proposal;  // the same on every rank
      return Status(Code::kMismatch, describeLayoutDifference(at.seq, at.group, views[0], views[i]), -1);
    }
  }
  // The layouts differ past what was exchanged (or a digest collided): the first round's words.
  return Status(Code::kMismatch, verdict.text, -1);
}

// Every rank's `fixed` and its `text` (cut to cap bytes) to all, in two allgathers: the fixed parts with
// each text's length, then the texts. texts[i] ends in "..." where rank i's was cut; a peer's length is
// never trusted past cap, so nothing from the network sizes an allocation past cap a rank.
template <typename Fixed>
Status allgatherWithText(Context& ctx, const Fixed& fixed, const std::string& text, size_t cap,
                         std::vector<Fixed>* fixedAll, std::vector<std::string>* texts) {
  const int p = ctx.size();
  struct Head {
    Fixed fixed;
    uint64_t bytes;
  };
  std::vector<Head> heads(p);
  heads[ctx.rank()].fixed = fixed;
  heads[ctx.rank()].bytes = text.size();
  AllgatherOptions h;
  h.output = reinterpret_cast<uint8_t*>(heads.data());
  h.bytesPerRank.assign(p, sizeof(Head));
  HORA_RETURN_IF_ERROR(allgather(ctx, h));
  AllgatherOptions o;
  o.bytesPerRank.resize(p);
  std::vector<size_t> first(p + 1, 0);
  for (int i = 0; i < p; ++i) {
    o.bytesPerRank[i] = heads[i].bytes < cap ? heads[i].bytes : cap;
    first[i + 1] = first[i] + o.bytesPerRank[i];
  }
  std::string all(first[p], '\0');
  memcpy(&all[first[ctx.rank()]], text.data(), o.bytesPerRank[ctx.rank()]);
  o.output = reinterpret_cast<uint8_t*>(&all[0]);
  HORA_RETURN_IF_ERROR(allgather(ctx, o));
  fixedAll->resize(p);
  texts->resize(p);
  for (int i = 0; i < p; ++i) {
    (*fixedAll)[i] = heads[i].fixed;
    (*texts)[i] = all.substr(first[i], first[i + 1] - first[i]) + (heads[i].bytes > cap ? "..." : "");
  }
  return Status::ok();
}

// The second round of an agreement whose verdict is that names differ (kName), run by every rank: each
// sends its proposal and its whole name (up to kMaxAgreedNameBytes) to all; each words the same message
// from them, naming the first rank whose collective differs from the first rank's, with both names whole.
// This is the proposal's variable part: a caller that must agree on more than fits a Proposal (the
// pipeline's per-batch terms, say) puts it in the name, which travels as a digest and is exchanged whole
// only when the ranks disagree.
Status explainNames(Context& ctx, const Proposal& mine, const Layout* layout, const Message& verdict) {
  const std::string own = layout != nullptr && layout->size() == 1 ? (*layout)[0].name
                                                                  : std::string(mine.name, strnlen(mine.name, sizeof(mine.name)));
  std::vector<Proposal> proposals;
  std::vector<std::string> names;
  HORA_RETURN_IF_ERROR(allgatherWithText(ctx, mine, own, kMaxAgreedNameBytes, &proposals, &names));
  // The first live rank's call is the one compared (a joined rank, hora.join(), proposes no name).
  int base = 0;
  while (base < ctx.size() - 1 && isJoin(proposals[base])) ++base;
  for (int i = base + 1; i < ctx.size(); ++i) {
    if (isJoin(proposals[i]) || (names[i] == names[base] && proposals[i].nameHash == proposals[base].nameHash)) continue;
    return Status(Code::kMismatch, "rank " + std::to_string(ctx.worldRank(base)) + " submitted " + describe(proposals[base], names[base]) +
                                       " but rank " + std::to_string(ctx.worldRank(i)) + " submitted " +
                                       describe(proposals[i], names[i]), -1);
  }
  return Status(Code::kMismatch, verdict.text, -1);
}

// The second round of an agreement whose verdict is an invalid call whose reason did not fit the verdict's
// text, run by every rank (all have the same verdict): each sends its own reason (up to kMaxReasonBytes) to
// all, and the error gives the culprit's whole. A caller may so fail a collective with as long a reason as
// it has (the pipeline passes its stage's error on this way).
Status explainInvalid(Context& ctx, const std::string& invalidReason, const Message& verdict) {
  std::vector<uint8_t> unused;
  std::vector<std::string> reasons;
  HORA_RETURN_IF_ERROR(allgatherWithText(ctx, uint8_t(0), invalidReason, kMaxReasonBytes, &unused, &reasons));
  for (int i = 0; i < ctx.size(); ++i) {
    if (ctx.worldRank(i) != verdict.culprit || reasons[i].empty()) continue;
    return Status(Code::kInvalidArgument, "rank " + std::to_string(verdict.culprit) + " made an invalid call: " + reasons[i],
                  verdict.culprit);
  }
  return Status(Code::kInvalidArgument, verdict.text, verdict.culprit);
}

// The collectives that cannot run while a rank has joined, from the verdict (the same on every rank, so every
// rank, the joined ones too, returns the same error): a broadcast whose root has joined (it has nothing to
// send), one on GPU memory (a joined rank has no device buffer to take part with), a prescaleFactor with op
// min, max or prod (a neutral element scaled is no longer neutral), and a kind that a joined rank does not
// know how to take part in (Communicator::serveJoined() lists those it does).
Status refusedWhileJoined(Context& ctx, const Message& verdict) {
  const Proposal& p = verdict.proposal;
  const std::string which = describe(p) + ", while " + std::to_string(ctx.size() - verdict.contributors) + " of " +
                            std::to_string(ctx.size()) + " ranks have joined (hora.join())";
  switch (static_cast<Kind>(p.kind)) {
    case Kind::kAllreduce:
    case Kind::kBroadcast:
    case Kind::kAllgather:
    case Kind::kReduceScatter:
    case Kind::kReduce:
    case Kind::kGather:
    case Kind::kScatter:
    case Kind::kAlltoall:
    case Kind::kBarrier:
    case Kind::kInvalid:
      break;
    default:
      return Status(Code::kInvalidArgument, which + ": a rank that has joined cannot take part in a " + kindName(static_cast<Kind>(p.kind)), -1);
  }
  if (hasRoot(p.kind) && verdict.rootsLive == 0) {
    const int root = p.root >= 0 && p.root < ctx.size() ? ctx.worldRank(p.root) : p.root;
    const bool sends = p.kind == static_cast<uint8_t>(Kind::kBroadcast) || p.kind == static_cast<uint8_t>(Kind::kScatter);
    return Status(Code::kInvalidArgument, which + ": its root, rank " + std::to_string(root) + ", has joined and " +
                                              (sends ? "has nothing to send" : "takes no result") + "; choose a root that has not joined", root);
  }
  if (p.recvSplits) {
    // What a live rank sends a joined one, the joined rank cannot expect: its part of the check is unknown.
    return Status(Code::kInvalidArgument, which + ": an alltoall with recvSplits does not run while a rank has joined " +
                                              "(leave recvSplits out: the counts are then exchanged, the joined rank's being 0)", -1);
  }
  if (p.onDevice) {
    return Status(Code::kInvalidArgument, which + ": collectives on GPU memory do not run while a rank has joined", -1);
  }
  const ReduceOp op = static_cast<ReduceOp>(p.op);
  const bool reduces = p.kind == static_cast<uint8_t>(Kind::kAllreduce) || p.kind == static_cast<uint8_t>(Kind::kReduceScatter) ||
                       p.kind == static_cast<uint8_t>(Kind::kReduce);
  if (reduces && p.prescale != 1 && (op == ReduceOp::kMin || op == ReduceOp::kMax || op == ReduceOp::kProd)) {
    return Status(Code::kInvalidArgument, which + ": a prescaleFactor with op " + opName(op) +
                                              " does not run while a rank has joined (its neutral element, scaled, is no longer neutral)", -1);
  }
  return Status::ok();
}

// The second round of an alltoall whose splits do not match (the digests of every rank do not cancel),
// run by every rank (all have the same sum): each sends its splits (sent, then expected) to all, and every
// rank names the same first count that differs. A rank's splits are 2 * size entries (execute() refused
// any other before the agreement), so nothing from the network sizes an allocation.
Status explainSplits(Context& ctx, const std::vector<uint64_t>& splits, const Message& verdict) {
  const int p = ctx.size();
  std::vector<uint64_t> all(2 * static_cast<size_t>(p) * p, 0);
  memcpy(all.data() + 2 * static_cast<size_t>(p) * ctx.rank(), splits.data(), 2 * p * sizeof(uint64_t));
  AllgatherOptions o;
  o.output = reinterpret_cast<uint8_t*>(all.data());
  o.bytesPerRank.assign(p, 2 * p * sizeof(uint64_t));
  HORA_RETURN_IF_ERROR(allgather(ctx, o));
  const std::string what = describe(verdict.proposal);
  for (int to = 0; to < p; ++to) {
    for (int from = 0; from < p; ++from) {
      const uint64_t sent = all[2 * static_cast<size_t>(p) * from + to];
      const uint64_t expected = all[2 * static_cast<size_t>(p) * to + p + from];
      if (sent == expected) continue;
      return Status(Code::kMismatch, "rank " + std::to_string(ctx.worldRank(from)) + " sends " + std::to_string(sent) +
                                         " elements to rank " + std::to_string(ctx.worldRank(to)) + " (its options.splits), but rank " +
                                         std::to_string(ctx.worldRank(to)) + " expects " + std::to_string(expected) +
                                         " from it (its options.recvSplits), in " + what, -1);
    }
  }
  return Status(Code::kMismatch, "the alltoall's splits and recvSplits do not match across ranks, in " + what, -1);
}

}  // namespace

bool partnerMessageArrived(Context& ctx) {
  if (ctx.size() != 2) return false;
  Pair* pair = ctx.pair(1 - ctx.rank());
  if (pair == nullptr) return false;
  const uint8_t* data = nullptr;
  size_t avail = 0;
  if (!pair->peek(kHeadBytes, &data, &avail).isOk() || avail < kHeadBytes) return false;
  Message head;
  memcpy(static_cast<void*>(&head), data, kHeadBytes);
  if (head.payloadBytes > kSmallAllreduceBytes) return false;
  // A partner that has joined (hora.join()) turns a small allreduce into an agreement and an allreduce, and
  // the second waits on the partner: it goes to the communication thread.
  if (isJoin(head.proposal)) return false;
  const size_t whole = kHeadBytes + (head.state != 0 ? sizeof(head.text) : 0) + head.payloadBytes;
  return pair->peek(whole, &data, &avail).isOk() && avail >= whole;
}

bool carriesPayload(const Proposal& p, const Context& ctx, Algorithm* chosen) {
  if (p.kind != static_cast<uint8_t>(Kind::kAllreduce) || p.count == 0 || p.onDevice) return false;
  if (p.count * dtypeSize(static_cast<DType>(p.dtype)) > kSmallAllreduceBytes) return false;
  // The exchange is recursive doubling: it carries the payload when that is the algorithm this
  // allreduce would run anyway (the same choice on every rank: the topology is the same everywhere).
  Algorithm mine = Algorithm::kAuto;
  if (chosen == nullptr) chosen = &mine;
  if (*chosen == Algorithm::kAuto) {
    AllreduceOptions o;
    o.count = p.count;
    o.dtype = static_cast<DType>(p.dtype);
    o.algorithm = static_cast<Algorithm>(p.algorithm);
    *chosen = chooseAllreduceAlgorithm(ctx, o);
  }
  return *chosen == Algorithm::kRecursiveDoubling;
}

Status agree(Context& ctx, const Proposal& mine, const std::string& invalidReason, uint8_t* payload,
             const Layout* layout, size_t* alike, const std::vector<uint64_t>* splits, Joined* joined) {
  size_t ignored = 0;
  if (alike == nullptr) alike = &ignored;
  *alike = 0;
  Message msg;
  msg.proposal = mine;
  // Messages name world ranks, also inside a process group.
  msg.proposer = ctx.worldRank(ctx.rank());
  msg.culprit = msg.proposer;
  msg.splitsSum = mine.splitsDigest;
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
  HORA_RETURN_IF_ERROR(disseminate(ctx, &msg, payload, static_cast<ReduceOp>(mine.op), static_cast<DType>(mine.dtype), scaling));
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
      if (someJoined && msg.contributors > 0) HORA_RETURN_IF_ERROR(refusedWhileJoined(ctx, msg));
      if (!someJoined && userPayload != nullptr && payload != userPayload) memcpy(userPayload, work, msg.payloadBytes);
      // Every rank has the same sum, so every rank takes part in the second round, or none does.
      if (msg.splitsSum != 0) {
        if (splits != nullptr) return explainSplits(ctx, *splits, msg);
        return Status(Code::kMismatch, "the alltoall's splits and recvSplits do not match across ranks, in " + describe(msg.proposal), -1);
      }
      return Status::ok();
    }
    case VerdictState::kInvalid:
      // A reason cut to fit the text is exchanged whole (every rank sees the same text, so all take part).
      if (strlen(msg.text) == sizeof(msg.text) - 1) return explainInvalid(ctx, invalidReason, msg);
      return Status(Code::kInvalidArgument, msg.text, msg.culprit);
    case VerdictState::kLayout: return explainLayouts(ctx, mine, layout, msg, alike);
    case VerdictState::kName: return explainNames(ctx, mine, layout, msg);
    default: return Status(Code::kMismatch, msg.text, -1);
  }
}

}  // namespace hora
