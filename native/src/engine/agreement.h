// Cross-rank agreement: before any data moves, the ranks check that they are running the same collective.
//
// Every rank contributes a fixed-size Proposal (sequence number, kind, op, dtype, count, root, a hash and
// the start of the name, or the reason its own call was invalid). The proposals are combined by recursive
// doubling with a combine() that is commutative, so every rank ends with the same Verdict: either all
// agree, or a description of the first disagreement (lowest ranks first) that names both sides. A
// disagreement fails this one collective on every rank with ERR_MISMATCH (or ERR_INVALID_ARGUMENT) and
// the communicator stays usable, because no data was exchanged. It also serves as the barrier.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "engine/work.h"
#include "transport/context.h"

namespace hora {

struct Proposal {
  uint64_t seq = 0;
  uint64_t count = 0;       // compared except for allgather, where ranks may differ
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
  char name[32] = {};
  double prescale = 1;      // allreduce, reducescatter: prescaleFactor and postscaleFactor (1: none)
  double postscale = 1;
};

// Describes a proposal for error messages: "allreduce 'grad/w' (float32 x 1024, op avg, #17)".
std::string describe(const Proposal& p);
Proposal proposalFor(const Work& w, uint64_t seq, size_t numTensors, uint64_t totalCount);

// Runs the agreement. invalidReason is non-empty when this rank's own call was invalid (kind kInvalid).
// Returns a transport failure as is; on disagreement returns kMismatch or kInvalidArgument with a message
// that names the ranks.
//
// Small allreduces ride along: when carriesPayload(mine), pass the data as payload and it comes back
// reduced over all ranks (not yet divided for avg), in the same single pass, halving the latency of the
// collectives that are pure latency. A scaled one (prescale or postscale not 1) comes back scaled and
// finished, avg's division included, as the allreduce would leave it.
Status agree(Context& ctx, const Proposal& mine, const std::string& invalidReason, uint8_t* payload = nullptr);
bool carriesPayload(const Proposal& p, const Context& ctx);
// Whether the next agreement would finish without waiting on a peer: a world of two ranks, whose partner's
// whole message for it (head, text, payload) has arrived. Takes nothing from the stream (TCP may read
// bytes into the pair's buffer); call only while no collective runs, as it uses the pair one would read.
bool partnerMessageArrived(Context& ctx);

}  // namespace hora
