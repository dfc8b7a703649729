// Recursive doubling: the latency-optimal exchange for small messages, for any world size.
//
// How it works. Let pof2 be the largest power of two <= size and rem = size - pof2. First the ranks below
// 2*rem pair up: each even one hands its buffer to the odd one above it and sits out. The remaining pof2
// ranks then run lg(pof2) rounds; in round k a rank swaps its whole buffer with the rank whose (renumbered)
// index differs in bit k, and both combine the two. Finally each odd rank below 2*rem hands the result back
// to the even rank that sat out. Cost: lg(p) alpha + lg(p) n beta, plus two steps when p is not a power of two.
//
// Identical results on every rank: combine() always receives the lower-numbered group's data as its first
// operand, so both sides of a swap compute exactly the same thing, whatever the operator's rounding.
#pragma once

#include <cstdint>

#include "transport/context.h"

namespace hora {

// Who pairs with whom, for any world size (see "How it works" above).
struct RecursiveDoublingSchedule {
  int pof2 = 1;  // largest power of two <= size
  int rem = 0;   // size - pof2: the ranks that fold in first

  explicit RecursiveDoublingSchedule(int size) {
    while (pof2 * 2 <= size) pof2 *= 2;
    rem = size - pof2;
  }
  // Even ranks below 2*rem hand their data to rank + 1 and sit the rounds out.
  bool sitsOut(int rank) const { return rank < 2 * rem && rank % 2 == 0; }
  // Odd ranks below 2*rem take their even neighbour's data in before the rounds.
  bool foldsIn(int rank) const { return rank < 2 * rem && rank % 2 == 1; }
  // Index among the pof2 ranks that take part in the rounds, and back.
  int renumbered(int rank) const { return rank < 2 * rem ? rank / 2 : rank - rem; }
  int actual(int newRank) const { return newRank < rem ? newRank * 2 + 1 : newRank + rem; }
};

// Where a combine() of recursiveDoubling stands, for a scaled allreduce (reduce/reduce.h ScaledStep): an
// operand is raw while it is still a rank's own input, never combined; the last combine of a rank that
// takes part in the rounds completes the reduction. Both sides of a swap see the same step.
struct DoublingStep {
  bool lowerRaw = false;
  bool higherRaw = false;
  bool last = false;
};

// combine(out, lower, higher, step) writes the combination of two buffers of `bytes` each; out may alias
// either.
template <typename Combine>
Status recursiveDoubling(Context& ctx, uint8_t* data, size_t bytes, uint8_t* scratch, Combine&& combine) {
  const int size = ctx.size();
  const int rank = ctx.rank();
  if (size == 1) return Status::ok();
  const RecursiveDoublingSchedule plan(size);
  if (plan.sitsOut(rank)) {
    SendOp give{ctx.pair(rank + 1), data, bytes};
    HORA_RETURN_IF_ERROR(ctx.progress(&give, 1, nullptr, 0));
    RecvOp result{ctx.pair(rank + 1), data, bytes};
    return ctx.progress(nullptr, 0, &result, 1);
  }
  if (plan.foldsIn(rank)) {
    RecvOp take{ctx.pair(rank - 1), scratch, bytes};
    HORA_RETURN_IF_ERROR(ctx.progress(nullptr, 0, &take, 1));
    combine(data, scratch, data, DoublingStep{true, true, false});
  }
  const int newRank = plan.renumbered(rank);
  for (int mask = 1; mask < plan.pof2; mask <<= 1) {
    const int newPartner = newRank ^ mask;
    const int partner = plan.actual(newPartner);
    HORA_RETURN_IF_ERROR(ctx.sendRecv(partner, data, bytes, partner, scratch, bytes));
    // In the first round a buffer is raw unless its rank folded its neighbour's in.
    const bool mineRaw = mask == 1 && !plan.foldsIn(rank), theirsRaw = mask == 1 && !plan.foldsIn(partner);
    const bool last = mask * 2 >= plan.pof2;
    if (newPartner < newRank) {
      combine(data, scratch, data, DoublingStep{theirsRaw, mineRaw, last});
    } else {
      combine(data, data, scratch, DoublingStep{mineRaw, theirsRaw, last});
    }
  }
  if (plan.foldsIn(rank)) {
    SendOp back{ctx.pair(rank - 1), data, bytes};
    HORA_RETURN_IF_ERROR(ctx.progress(&back, 1, nullptr, 0));
  }
  return Status::ok();
}

}  // namespace hora
