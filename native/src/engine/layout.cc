#include "engine/layout.h"

#include <cstring>

#include "common/hash.h"
#include "common/types.h"

namespace hora {
namespace {

constexpr uint64_t kFnvPrime = 1099511628211ull;

// FNV-1a continued over the 8 bytes of v, low byte first (the same on every host).
uint64_t mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
  return h;
}

std::string describeEntry(const LayoutEntry& e) {
  std::string s;
  const size_t n = e.nameBytes < sizeof(e.name) ? e.nameBytes : sizeof(e.name);
  if (n == 0 && !e.nameCut) {
    s = "unnamed";
  } else {
    s = "'";
    for (size_t i = 0; i < n; ++i) {
      const unsigned char c = static_cast<unsigned char>(e.name[i]);
      s += c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c);
    }
    s += e.nameCut ? "...'" : "'";
  }
  const char* dtype = e.dtype < kNumDTypes ? dtypeName(static_cast<DType>(e.dtype)) : "unknown-dtype";
  return s + " (" + dtype + " x " + std::to_string(e.count) + ")";
}

std::string tensorOf(size_t i, uint64_t numTensors) {
  return "tensor " + std::to_string(i + 1) + " of " + std::to_string(numTensors);
}

std::string rankName(int rank) { return "rank " + std::to_string(rank); }

}  // namespace

uint64_t layoutDigest(const Layout& layout) {
  uint64_t h = fnv1a64(std::string());  // FNV-1a's offset basis
  for (size_t i = 0; i < layout.size(); ++i) {
    h = mix(h, fnv1a64(layout[i].name));
    h = mix(h, layout[i].count);
  }
  return h;
}

LayoutEntry layoutEntry(const Work& w) {
  LayoutEntry e;
  e.nameHash = fnv1a64(w.name);
  e.count = w.count;
  e.dtype = static_cast<uint8_t>(w.dtype);
  size_t n = w.name.size();
  if (n > sizeof(e.name)) {
    n = sizeof(e.name);
    // Cut at a character's start, not inside a UTF-8 sequence (continuation bytes are 10xxxxxx).
    while (n > 0 && (static_cast<unsigned char>(w.name[n]) & 0xC0) == 0x80) --n;
    e.nameCut = 1;
  }
  memcpy(e.name, w.name.data(), n);
  e.nameBytes = static_cast<uint8_t>(n);
  return e;
}

bool sameTensor(const LayoutEntry& a, const LayoutEntry& b) {
  return a.nameHash == b.nameHash && a.count == b.count && a.dtype == b.dtype;
}

bool layoutsDiffer(const LayoutView& a, const LayoutView& b) {
  if (a.numTensors != b.numTensors || a.shown != b.shown) return true;
  for (size_t i = 0; i < a.shown; ++i) {
    if (!sameTensor(a.entries[i], b.entries[i])) return true;
  }
  return false;
}

size_t commonPrefix(const LayoutView* views, size_t n) {
  if (n == 0) return 0;
  size_t k = views[0].shown;
  for (size_t v = 1; v < n; ++v) {
    size_t i = 0;
    while (i < k && i < views[v].shown && sameTensor(views[0].entries[i], views[v].entries[i])) ++i;
    k = i;
  }
  return k;
}

std::string describeLayoutDifference(uint64_t seq, uint32_t group, const LayoutView& a, const LayoutView& b) {
  std::string s = rankName(a.rank) + " and " + rankName(b.rank) + " fused different tensors into allreduce #" +
                  std::to_string(seq);
  if (group != 0) s += " of group " + std::to_string(group);
  s += ": ";
  const size_t common = a.shown < b.shown ? a.shown : b.shown;
  for (size_t i = 0; i < common; ++i) {
    if (sameTensor(a.entries[i], b.entries[i])) continue;
    s += tensorOf(i, a.numTensors) + " is " + describeEntry(a.entries[i]) + " on " + rankName(a.rank) + " but ";
    if (b.numTensors != a.numTensors) s += tensorOf(i, b.numTensors) + " is ";
    return s + describeEntry(b.entries[i]) + " on " + rankName(b.rank);
  }
  // The shown tensors agree: one rank has more of them, or they differ past what was exchanged.
  const uint64_t fewer = a.numTensors < b.numTensors ? a.numTensors : b.numTensors;
  const LayoutView& more = a.numTensors > b.numTensors ? a : b;
  const LayoutView& less = a.numTensors > b.numTensors ? b : a;
  if (a.numTensors != b.numTensors && fewer == common && more.shown > common) {
    return s + tensorOf(common, more.numTensors) + " is " + describeEntry(more.entries[common]) + " on " +
           rankName(more.rank) + " but " + rankName(less.rank) + " fused only " + std::to_string(less.numTensors);
  }
  return s + "their first " + std::to_string(common) + " tensors are the same; they differ after those (" +
         std::to_string(a.numTensors) + " tensors on " + rankName(a.rank) + ", " + std::to_string(b.numTensors) +
         " on " + rankName(b.rank) + ")";
}

}  // namespace hora
