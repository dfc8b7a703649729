// The second rounds of an agreement (see agreement.h): run by every rank when the first round's verdict
// calls for one, they exchange what the fixed-size proposal could not carry (layouts, whole names, whole
// reasons, an alltoall's splits) so that the error names what differs as each rank has it; and the checks of
// an agreed collective while a rank has joined (hora.join()).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "common/hash.h"
#include "engine/agreement_internal.h"

namespace hora {
namespace agreement {
namespace {

// What every rank's proposal must share for the ranks to run the tensors their layouts have alike: all
// of sameCollective() but the layout's own fields (numTensors, nameHash, count).
uint64_t collectiveSignature(const Proposal& p) {
  const uint64_t fields[] = {p.seq, static_cast<uint32_t>(p.root), p.group,
                             uint64_t(p.kind) | uint64_t(p.op) << 8 | uint64_t(p.dtype) << 16 |
                                 uint64_t(p.compareCount) << 24 | uint64_t(p.algorithm) << 32 | uint64_t(p.onDevice) << 40};
  return fnv1a64(fields, sizeof(fields));
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

}  // namespace

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

}  // namespace agreement
}  // namespace hora
