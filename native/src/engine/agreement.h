// Cross-rank agreement: before any data moves, the ranks check that they are running the same collective.
//
// Every rank contributes a fixed-size Proposal (sequence number, kind, op, dtype, count, root, a hash and
// the start of the name, or the reason its own call was invalid). The proposals are combined by recursive
// doubling with a combine() that is commutative, so every rank ends with the same Verdict: either all
// agree, or a description of the first disagreement (lowest ranks first) that names both sides. A
// disagreement fails this one collective on every rank with ERR_MISMATCH (or ERR_INVALID_ARGUMENT) and
// the communicator stays usable, because no data was exchanged. It also serves as the barrier.
//
// A fused run of allreduces proposes a digest of its layout (each tensor's name and count, in order; see
// layout.h) as its nameHash. When the only difference between two proposals is in their layouts (one of
// them fused), the verdict says so, and every rank, all being at this point of agree() whatever they
// run, takes part in a second round that exchanges the layouts, so that the error names the first tensor
// that differs as each rank has it. Only a failing agreement pays for that round.
//
// The name is the proposal's variable part. It travels as a digest (nameHash) and the first 31 bytes;
// when two proposals differ only in a name longer than that, every rank likewise takes part in a second
// round that exchanges the names whole, so the error shows both. A caller that must agree on more than
// the fixed fields (the pipeline's options, say) words it into the name: one digest compared on the way,
// the whole text shown only when the ranks differ.
//
// Join (hora.join(), Kind::kJoin): a rank that has run out of data proposes "joined" at every agreement
// until every rank has. combine() treats that proposal as a wildcard: it agrees with any collective of the
// same sequence number, and the verdict carries the live ranks' proposal, how many ranks contributed one,
// whether a broadcast's root is among them, and the rank that joined last (the latest joinedAt, the highest
// rank of a tie). A joined rank then runs the live proposal's algorithm with a neutral buffer (Joined,
// Communicator::serveJoined()); a verdict of joined ranks only ends the join. A small allreduce whose payload
// rode along cannot finish in the agreement while a rank has joined (that rank did not know the op in
// advance): agree() leaves the payload untouched and the caller runs the allreduce after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/layout.h"
#include "engine/work.h"
#include "transport/context.h"

namespace hora {

struct Proposal {
  uint64_t seq = 0;
  union {
    uint64_t count = 0;     // compared except for allgather, gather, scatter and alltoall, where ranks may differ
    uint64_t joinedAt;      // kJoin (which has no count): the sequence number of this rank's first join proposal
  };
  uint64_t nameHash = 0;
  int32_t root = 0;
  uint32_t numTensors = 1;  // tensors fused into this collective
  uint32_t group = 0;       // process group (engine/group.h); 0: the world
  uint8_t kind = 0;
  uint8_t op = 0;
  uint8_t dtype = 0;
  uint8_t compareCount = 1;
  uint8_t algorithm = 0;    // Algorithm forced for this collective (kAuto unless HORA_ALGO)
  uint8_t onDevice = 0;     // 1: GPU memory (every rank must agree: the device paths differ from the host's)
  uint8_t recvSplits = 0;   // 1: an alltoall whose caller gave recvSplits (every rank must agree)
  char name[32] = {};
  double prescale = 1;      // allreduce, reducescatter: prescaleFactor and postscaleFactor (1: none)
  double postscale = 1;
};

// Bytes that two ranks swap in their agreement's messages, each taken only when the agreement holds (a
// two-rank alltoall's first round: algorithms/collectives.h AlltoallFirstRound). out travels as the
// message's payload; the partner's payload goes to in when it has inBytes, the agreement holds, and no
// rank has joined; came then says so.
struct Swap {
  const uint8_t* out = nullptr;
  uint32_t outBytes = 0;
  uint8_t* in = nullptr;
  uint32_t inBytes = 0;
  bool came = false;
};

// What the ranks of an agreed collective learn of joined ranks (hora.join()); agree() fills it on success.
struct Joined {
  uint32_t contributors = 0;  // ranks whose proposal was not kJoin; the group's size when none has joined
  int32_t lastJoiner = -1;    // when contributors is 0: the rank (of this context) that joined last
  Proposal live;              // the verdict's proposal: the live ranks' collective (kJoin when all joined)
};

// An alltoall's part of the splits check, for rank `rank` of `size` with splits of 2 * size entries (sent,
// then expected; any other length: 0): a hash of each (from, to, count) it sends, less a hash of each it
// expects. Summed over every rank the parts cancel exactly when every count sent is the count expected; a
// wrong one leaves a sum of 0 only by a 64-bit hash collision. agree() sums them (see its splits).
uint64_t splitsDigest(const std::vector<uint64_t>& splits, int rank, int size);

// Describes a proposal for error messages: "allreduce 'grad/w' (float32 x 1024, op avg, #17)".
std::string describe(const Proposal& p);
// The same under a name given whole (the proposal holds only its first bytes).
std::string describe(const Proposal& p, const std::string& name);
// The most bytes of a name the second round of a disagreement on names shows (the rest as "...").
constexpr size_t kMaxAgreedNameBytes = 1024;
// The most bytes of an invalid call's reason the second round of an invalid verdict shows.
constexpr size_t kMaxReasonBytes = 4096;
// The proposal of the lone collective w; for a fused run, use proposalForRun.
Proposal proposalFor(const Work& w, uint64_t seq, size_t numTensors, uint64_t totalCount);
// The proposal of a run of allreduces fused into one: their total count, and their layout's digest.
Proposal proposalForRun(const Layout& run, uint64_t seq, uint64_t totalCount);

// Runs the agreement. invalidReason is non-empty when this rank's own call was invalid (kind kInvalid);
// a reason too long for the verdict's text is exchanged whole in a second round, as names are.
// Returns a transport failure as is; on disagreement returns kMismatch or kInvalidArgument with a message
// that names the ranks.
//
// Small allreduces ride along: when carriesPayload(mine), pass the data as payload and it comes back
// reduced over all ranks (not yet divided for avg), in the same single pass, halving the latency of the
// collectives that are pure latency. A scaled one (prescale or postscale not 1) comes back scaled and
// finished, avg's division included, as the allreduce would leave it.
//
// layout: the tensors this rank's collective carries, read only when the layouts (or the names) of the
// ranks differ; nullptr: the one tensor the proposal describes (its name as cut to fit the proposal).
//
// alike: when the verdict is kMismatch for layouts that differ but begin with the same tensors on every
// rank (the same collective, names, counts and dtype: one rank fused [a, b] where another has [a] alone
// and its b, say, was an invalid call), the number of those leading tensors; else 0. A caller that
// passes it runs those tensors as one allreduce (the payload did not ride along), completes them, and
// takes the rest up again; every rank computes the same number, so the ranks stay in step.
//
// splits: the Work::splits of an alltoall (mine.recvSplits: with the counts expected, whose check this rank's
// splitsDigest() is part of), read again only when the splits of the ranks do not match, for a second round
// that names the first rank and count that differ; nullptr or any other collective: no check.
//
// swap: two ranks only, and no payload: bytes swapped in the messages (see Swap).
//
// joined: filled when the agreement succeeds. While some rank has joined (contributors below the size) a
// payload did not ride along (it is left as it was), nor did a swap's, and alike is 0. A broadcast whose root has joined, a
// collective on GPU memory, and a prescaleFactor with op min, max or prod fail with ERR_INVALID_ARGUMENT on
// every rank while a rank has joined (the joined ranks' agree() returns the same).
Status agree(Context& ctx, const Proposal& mine, const std::string& invalidReason, uint8_t* payload = nullptr,
             const Layout* layout = nullptr, size_t* alike = nullptr, const std::vector<uint64_t>* splits = nullptr,
             Joined* joined = nullptr, Swap* swap = nullptr);
// chosen: the allreduce's algorithm when already chosen (Work::chosen), else kAuto, and then the choice is
// made here, only if the rest fits, and stored there; nullptr: chosen here and forgotten.
bool carriesPayload(const Proposal& p, const Context& ctx, Algorithm* chosen = nullptr);
// The same from the fields it reads, for a caller that has no proposal to hand.
bool carriesPayload(Kind kind, uint64_t count, DType dtype, bool onDevice, Algorithm algorithm, const Context& ctx,
                    Algorithm* chosen);
// Whether the next agreement would finish without waiting on a peer: a world of two ranks, whose partner's
// whole message for it (head, text, payload) has arrived, and has not joined (hora.join()). Takes nothing from the stream (TCP may read
// bytes into the pair's buffer); call only while no collective runs, as it uses the pair one would read.
bool partnerMessageArrived(Context& ctx);

}  // namespace hora
