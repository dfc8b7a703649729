// What the files of the agreement (agreement.cc: the first round; agreement_rounds.cc: the second rounds
// that name a disagreement, and the checks of a collective while a rank has joined) share and nothing else
// uses: the message that travels, and the functions of the second rounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/agreement.h"
#include "engine/layout.h"
#include "transport/context.h"

namespace hora {
namespace agreement {

// kLayout: a mismatch in the tensors of a fused run only; agree() then exchanges the layouts to name them.
// kName: a mismatch in the name only, one of them longer than the proposal holds; agree() then exchanges
// the names whole to show them.
enum class VerdictState : uint8_t { kAgreed = 0, kMismatch = 1, kInvalid = 2, kLayout = 3, kName = 4 };

// What travels: the proposal of the lowest rank in the group so far, and the group's verdict.
struct Message {
  Proposal proposal;
  uint64_t splitsSum = 0;     // the sum of the splitsDigest() of every rank combined so far
  // Join (hora.join()), summed or kept over the ranks combined so far: how many proposed a collective (not
  // kJoin); how many of those are the root of the broadcast they propose; the rank that joined last (of
  // this context; -1: none), with its joinedAt.
  uint64_t lastJoinedAt = 0;
  uint32_t contributors = 0;
  uint32_t rootsLive = 0;
  int32_t lastJoiner = -1;
  int32_t proposer = 0;       // rank whose proposal this is
  int32_t culprit = 0;        // lowest rank involved in the disagreement; orders verdicts deterministically
  uint32_t payloadBytes = 0;  // bytes of reduced data that follow this message on the wire
  uint8_t state = 0;          // a VerdictState
  // The verdict's words; read only when state != 0. On a cache line of its own: the wire's head is everything
  // before it (192 bytes), so a payload that follows the head in a shared-memory slot starts on a cache line
  // too (a 1-4 KiB allreduce is 2-4% faster so than after a 137-byte head; bench/small-latency-ab.js).
  alignas(64) char text[400];
  Message() { text[0] = '\0'; }
  // Copies the text only when there is a verdict: an agreed message is its head.
  Message(const Message& m) { *this = m; }
  Message& operator=(const Message& m) {
    memcpy(static_cast<void*>(this), &m, m.state != 0 ? sizeof(Message) : offsetof(Message, text) + 1);
    return *this;
  }
};

inline bool isJoin(const Proposal& p) { return p.kind == static_cast<uint8_t>(Kind::kJoin); }

// The kinds whose proposal names a root (broadcast, reduce, gather, scatter).
inline bool hasRoot(uint8_t kind) {
  const Kind k = static_cast<Kind>(kind);
  return k == Kind::kBroadcast || k == Kind::kReduce || k == Kind::kGather || k == Kind::kScatter;
}

// The second rounds (agreement_rounds.cc), each run by every rank of a verdict that calls for it: see there.
Status explainLayouts(Context& ctx, const Proposal& mine, const Layout* layout, const Message& verdict, size_t* alike);
Status explainNames(Context& ctx, const Proposal& mine, const Layout* layout, const Message& verdict);
Status explainInvalid(Context& ctx, const std::string& invalidReason, const Message& verdict);
Status refusedWhileJoined(Context& ctx, const Message& verdict);
Status explainSplits(Context& ctx, const std::vector<uint64_t>& splits, const Message& verdict);

}  // namespace agreement
}  // namespace hora
