// The tensors one collective carries, in order: the run of allreduces fused into one, or the lone tensor
// of any other collective.
//
// The agreement (agreement.h) compares a fused run's layout by a digest: every tensor's name and count in
// order. Equal digests mean the ranks fused the same tensors in the same order, so each rank's share of
// the fused buffer is the same tensor everywhere; the total count and dtype alone would let two ranks
// that fused [a, b] and [b, a] (or [2, 3] and [3, 2] elements) add unrelated elements. When digests
// differ, the ranks exchange their layouts as LayoutEntry records (fixed size, checked on arrival) and
// every rank words the same message from them: the first tensor that differs, as each rank has it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/work.h"

namespace hora {

// A view of the Works a collective carries; it owns nothing and lives as long as the call it is given to.
class Layout {
 public:
  explicit Layout(const Work& lone) : lone_(&lone), size_(1) {}
  Layout(const std::shared_ptr<Work>* run, size_t size) : run_(run), size_(size) {}
  size_t size() const { return size_; }
  const Work& operator[](size_t i) const { return run_ != nullptr ? *run_[i] : *lone_; }

 private:
  const std::shared_ptr<Work>* run_ = nullptr;
  const Work* lone_ = nullptr;
  size_t size_ = 0;
};

// The names and counts of the layout's tensors, in order, hashed into one word (FNV-1a over each
// tensor's name hash and count): what a fused run's Proposal carries as its nameHash.
uint64_t layoutDigest(const Layout& layout);

// One tensor as it travels in the exchange of layouts. Everything in it came from the network on
// arrival: describe() bounds nameBytes and the dtype before using them.
struct LayoutEntry {
  uint64_t nameHash = 0;  // fnv1a64 of the whole name ("" when unnamed)
  uint64_t count = 0;
  uint8_t dtype = 0;
  uint8_t nameBytes = 0;  // bytes of name that are used
  uint8_t nameCut = 0;    // 1: the name is longer than name holds, and is shown cut
  char name[45] = {};
};
static_assert(sizeof(LayoutEntry) == 64, "a LayoutEntry is one wire record of 64 bytes");

LayoutEntry layoutEntry(const Work& w);
bool sameTensor(const LayoutEntry& a, const LayoutEntry& b);

// A rank's layout as exchanged: how many tensors it carries, and the first `shown` of them.
struct LayoutView {
  int rank = 0;              // world rank, as messages name ranks
  uint64_t numTensors = 0;   // every tensor of its run
  const LayoutEntry* entries = nullptr;
  size_t shown = 0;          // entries present: numTensors, or fewer past kMaxLayoutEntries
};
// Entries each rank sends at most: enough to name the first difference of any realistic run while the
// exchange stays small (64 KiB a rank).
constexpr size_t kMaxLayoutEntries = 1024;

// Whether the two layouts differ in what is shown (or in their number of tensors).
bool layoutsDiffer(const LayoutView& a, const LayoutView& b);

// The number of leading tensors that every one of the n layouts shows alike.
size_t commonPrefix(const LayoutView* views, size_t n);

// Names the first tensor that differs between two ranks' layouts of the collective #seq (of group, 0: the
// world), e.g. "rank 0 and rank 1 fused different tensors into allreduce #5: tensor 1 of 2 is 'grad_b'
// (float64 x 2) on rank 0 but 'grad_a' (float64 x 2) on rank 1". Computed alike on every rank.
std::string describeLayoutDifference(uint64_t seq, uint32_t group, const LayoutView& a, const LayoutView& b);

}  // namespace hora
