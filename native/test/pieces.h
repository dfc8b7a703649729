// Random runs of pieces of a byte stream, for the tests of the pairs' gathered writes (trySendv).
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "transport/pair.h"

namespace hora {
namespace testing {

// Fills iov with up to `most` pieces of `stream` from `at` on: each empty one time in `emptyOneIn`,
// otherwise shorter than `longest` bytes. Returns how many; *offered gets the bytes of the first
// Pair::kMaxSendPieces of them, the most one call may take.
template <typename Rng>
int cutPieces(std::vector<uint8_t>& stream, size_t at, Rng& rng, int emptyOneIn, size_t longest, iovec* iov, int most,
              size_t* offered) {
  int n = 0;
  *offered = 0;
  for (size_t next = at; n < most && next < stream.size(); ++n) {
    const size_t len = rng() % emptyOneIn == 0 ? 0 : std::min<size_t>(stream.size() - next, rng() % longest);
    iov[n] = {stream.data() + next, len};
    next += len;
    if (n < Pair::kMaxSendPieces) *offered += len;
  }
  return n;
}

}  // namespace testing
}  // namespace hora
