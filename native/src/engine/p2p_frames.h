// The frames of the point-to-point protocol (the protocol itself is described in p2p.h).
//
// Every frame opens with a fixed 32-byte header, encoded field by field, little-endian, so decoding never
// reads past it; an EAGER or DATA frame is followed by its payload. What a header says is checked by the
// receiver (p2p_receive.cc), which knows what it expects: nothing from the network is trusted.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hora {
namespace p2p {

enum class FrameType : uint8_t {
  kEager = 1,  // sender -> receiver: a small message, its payload follows
  kRts = 2,    // sender -> receiver: a large message is ready (request to send); no payload
  kCts = 3,    // receiver -> sender: the RTS `seq` matched a receive; send its DATA (clear to send)
  kData = 4,   // sender -> receiver: the payload of RTS `seq`
  kAck = 5,    // receiver -> sender: the EAGER `seq` matched a receive and was delivered
  kNack = 6,   // receiver -> sender: `seq` matched a receive of another dtype or count (carried here)
  kRtsHead = 7,   // sender -> receiver: an RTS followed by the first kHeadBytes of the payload
  kDataTail = 8,  // sender -> receiver: the rest of RTS_HEAD `seq`'s payload, from byte kHeadBytes on
};
constexpr uint8_t kMaxFrameType = 8;

// How much of a large message travels with its RTS_HEAD, ahead of the receiver's CTS.
constexpr size_t kHeadBytes = 64 * 1024;

constexpr size_t kHeaderBytes = 32;

struct FrameHeader {
  FrameType type = FrameType::kEager;
  uint8_t dtype = 0;   // EAGER, RTS, DATA: the sender's dtype; NACK: the receiver's
  int32_t tag = 0;
  uint64_t seq = 0;    // the sender's sequence number of the message, per (sender, receiver)
  uint64_t count = 0;  // elements; NACK: the receiver's count
  uint32_t group = 0;  // EAGER, RTS, DATA: the process group the message belongs to (0: the world)
};

inline void putLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline uint64_t getLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// Layout: type u8, dtype u8, 2 zero bytes, tag i32, seq u64, count u64, group u32, 4 zero bytes.
inline void encodeHeader(const FrameHeader& h, uint8_t out[kHeaderBytes]) {
  for (size_t i = 0; i < kHeaderBytes; ++i) out[i] = 0;
  out[0] = static_cast<uint8_t>(h.type);
  out[1] = h.dtype;
  putLe(out + 4, static_cast<uint32_t>(h.tag), 4);
  putLe(out + 8, h.seq, 8);
  putLe(out + 16, h.count, 8);
  putLe(out + 24, h.group, 4);
}

// False when the type is unknown (the stream cannot be trusted past this point).
inline bool decodeHeader(const uint8_t in[kHeaderBytes], FrameHeader* h) {
  if (in[0] == 0 || in[0] > kMaxFrameType) return false;
  h->type = static_cast<FrameType>(in[0]);
  h->dtype = in[1];
  h->tag = static_cast<int32_t>(static_cast<uint32_t>(getLe(in + 4, 4)));
  h->seq = getLe(in + 8, 8);
  h->count = getLe(in + 16, 8);
  h->group = static_cast<uint32_t>(getLe(in + 24, 4));
  return true;
}

}  // namespace p2p
}  // namespace hora
