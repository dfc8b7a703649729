// What the files of PointToPoint (p2p.cc, p2p_send.cc, p2p_receive.cc) share and nothing else uses: how a
// message is named in an error, and a size computed from a header's count without overflowing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/types.h"
#include "engine/group.h"
#include "engine/p2p_frames.h"
#include "engine/work.h"

namespace hora {
namespace p2p {

// "4 x float32".
inline std::string describeMessage(uint64_t count, uint8_t dtype) {
  const char* name = dtype < kNumDTypes ? dtypeName(static_cast<DType>(dtype)) : "unknown dtype";
  return std::to_string(count) + " x " + name;
}

// The process group a message travels in (0: the world).
inline uint32_t groupOf(const Work& w) { return w.group != nullptr ? w.group->id : 0; }

// The header of a frame that carries or announces w's message (EAGER, RTS, RTS_HEAD, DATA, DATA_TAIL).
inline FrameHeader messageHeader(FrameType type, const Work& w, uint64_t seq) {
  FrameHeader h;
  h.type = type;
  h.dtype = static_cast<uint8_t>(w.dtype);
  h.tag = w.tag;
  h.group = groupOf(w);
  h.seq = seq;
  h.count = w.count;
  return h;
}

// "tag 3", or "tag 3 of group 1" for a process group's message.
inline std::string tagText(uint32_t group, int32_t tag) {
  return "tag " + std::to_string(tag) + (group != 0 ? " of group " + std::to_string(group) : "");
}

// count elements of elem bytes: *bytes, or false where that does not fit a size_t.
inline bool multiplyFits(uint64_t count, size_t elem, size_t* bytes) {
  if (elem != 0 && count > SIZE_MAX / elem) return false;
  *bytes = static_cast<size_t>(count * elem);
  return true;
}

}  // namespace p2p
}  // namespace hora
