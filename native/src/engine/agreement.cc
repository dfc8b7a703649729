#include "engine/agreement.h"

#include <cstring>

#include "algorithms/recursive_doubling.h"

namespace hora {
namespace {

enum class VerdictState : uint8_t { kAgreed = 0, kMismatch = 1, kInvalid = 2 };

// What travels: the proposal of the lowest rank in the group so far, and the group's verdict.
struct Message {
  Proposal proposal;
  int32_t proposer = 0;  // rank whose proposal this is
  uint8_t state = 0;
  int32_t culprit = 0;   // lowest rank involved in the disagreement; orders verdicts deterministically
  char text[400] = {};
};

uint64_t hashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool sameCollective(const Proposal& a, const Proposal& b) {
  return a.seq == b.seq && a.kind == b.kind && a.op == b.op && a.dtype == b.dtype && a.root == b.root &&
         a.numTensors == b.numTensors && a.nameHash == b.nameHash && (!a.compareCount || a.count == b.count);
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
    const Message* pick;
    if (lower->state != higher->state && lower->state != 0 && higher->state != 0) {
      pick = lower->state == static_cast<uint8_t>(VerdictState::kInvalid) ? lower : higher;
    } else if (lower->state == 0) {
      pick = higher;
    } else if (higher->state == 0) {
      pick = lower;
    } else {
      pick = lower->culprit <= higher->culprit ? lower : higher;
    }
    result = *pick;
  } else if (!sameCollective(lower->proposal, higher->proposal)) {
    result = *lower;
    result.state = static_cast<uint8_t>(VerdictState::kMismatch);
    result.culprit = lower->proposer < higher->proposer ? lower->proposer : higher->proposer;
    setText(&result, "rank " + std::to_string(lower->proposer) + " submitted " + describe(lower->proposal) +
                         " but rank " + std::to_string(higher->proposer) + " submitted " +
                         describe(higher->proposal));
  } else {
    result = lower->proposer <= higher->proposer ? *lower : *higher;
  }
  *out = result;
}

}  // namespace

std::string describe(const Proposal& p) {
  Kind kind = static_cast<Kind>(p.kind);
  std::string s = kindName(kind);
  if (p.name[0] != '\0') s += std::string(" '") + std::string(p.name, strnlen(p.name, sizeof(p.name))) + "'";
  if (kind != Kind::kBarrier && kind != Kind::kInvalid) {
    s += " (" + std::string(dtypeName(static_cast<DType>(p.dtype))) + " x " + std::to_string(p.count);
    if (kind == Kind::kAllreduce || kind == Kind::kReduceScatter) {
      s += std::string(", op ") + opName(static_cast<ReduceOp>(p.op));
    }
    if (kind == Kind::kBroadcast) s += ", root " + std::to_string(p.root);
    if (p.numTensors > 1) s += ", " + std::to_string(p.numTensors) + " fused tensors";
    s += ")";
  }
  s += " as collective #" + std::to_string(p.seq);
  return s;
}

Proposal proposalFor(const Work& w, uint64_t seq, size_t numTensors, uint64_t totalCount) {
  Proposal p;
  p.seq = seq;
  p.kind = static_cast<uint8_t>(w.kind);
  p.op = static_cast<uint8_t>(w.kind == Kind::kAllreduce || w.kind == Kind::kReduceScatter ? w.op : ReduceOp::kSum);
  p.dtype = static_cast<uint8_t>(w.dtype);
  p.root = w.kind == Kind::kBroadcast ? w.root : 0;
  p.count = w.kind == Kind::kBarrier ? 0 : totalCount;
  p.compareCount = w.kind == Kind::kAllgather ? 0 : 1;
  p.numTensors = static_cast<uint32_t>(numTensors);
  p.nameHash = numTensors > 1 ? 0 : hashName(w.name);
  std::string shown = numTensors > 1 ? "fused:" + w.name : w.name;
  strncpy(p.name, shown.c_str(), sizeof(p.name) - 1);
  return p;
}

Status agree(Context& ctx, const Proposal& mine, const std::string& invalidReason) {
  Message msg;
  msg.proposal = mine;
  msg.proposer = ctx.rank();
  msg.culprit = ctx.rank();
  Message scratch;
  if (mine.kind == static_cast<uint8_t>(Kind::kInvalid)) {
    msg.state = static_cast<uint8_t>(VerdictState::kInvalid);
    setText(&msg, "rank " + std::to_string(ctx.rank()) + " made an invalid call: " + invalidReason);
  }
  HORA_RETURN_IF_ERROR(recursiveDoubling(ctx, reinterpret_cast<uint8_t*>(&msg), sizeof(msg),
                                         reinterpret_cast<uint8_t*>(&scratch),
                                         [](uint8_t* out, const uint8_t* lower, const uint8_t* higher) {
                                           combine(reinterpret_cast<Message*>(out),
                                                   reinterpret_cast<const Message*>(lower),
                                                   reinterpret_cast<const Message*>(higher));
                                         }));
  msg.text[sizeof(msg.text) - 1] = '\0';
  switch (static_cast<VerdictState>(msg.state)) {
    case VerdictState::kAgreed: return Status::ok();
    case VerdictState::kInvalid: return Status(Code::kInvalidArgument, msg.text, msg.culprit);
    default: return Status(Code::kMismatch, msg.text, -1);
  }
}

}  // namespace hora
