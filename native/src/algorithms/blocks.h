// How a buffer of `count` elements is cut into one block per rank: the first count % size blocks get one
// element more. Every algorithm that splits work by rank uses this, so ranks agree on the boundaries.
#pragma once

#include <cstddef>

namespace hora {

inline size_t blockStart(size_t count, int size, int block) {
  size_t base = count / size, extra = count % size;
  size_t b = static_cast<size_t>(block);
  return b * base + (b < extra ? b : extra);
}

inline size_t blockCount(size_t count, int size, int block) {
  return blockStart(count, size, block + 1) - blockStart(count, size, block);
}

inline int wrapRank(int r, int size) { return ((r % size) + size) % size; }

}  // namespace hora
