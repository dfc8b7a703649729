// FNV-1a, 64-bit: a stable hash of short strings (job ids, collective names) that every rank computes alike.
// The standard parameters (offset basis 14695981039346656037, prime 1099511628211); native/test/hash_test.cc
// checks the published test vectors.
#pragma once

#include <cstdint>
#include <string>

namespace hora {

inline uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace hora
