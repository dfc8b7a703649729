// FNV-1a, 64-bit: a stable hash of short strings (job ids, collective names) that every rank computes alike.
#pragma once

#include <cstdint>
#include <string>

namespace hora {

inline uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace hora
