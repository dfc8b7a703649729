// Single copy between ranks of one host: the receiver reads a block straight out of the sender's memory
// (process_vm_readv) instead of the sender copying it into a ring slot and the receiver copying it out.
//
// The sender describes its block in a ReadOffer that travels through the pair (the ring), the receiver
// reads it with readOffer() and answers through the pair whether it could; until that answer the sender
// keeps the block as it is (the algorithm waits for it). The kernel may refuse: a Yama ptrace_scope of 2
// or 3, a seccomp profile without process_vm_readv, ranks in different pid namespaces (the pid names
// another process or none). Whatever refuses, readOffer() says no and the block then moves through the
// ring as before; the offer's cookie (a random word of the sender's process, read in the same call as the
// block) makes sure the bytes came from the sender and not from another process with its pid.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hora {
namespace shm {

// Blocks from this size up are offered for a single copy (below it the offer's round trip costs more
// than the copy it saves).
constexpr size_t kSingleCopyMinBytes = 16 * 1024;

enum class OfferMode : uint32_t {
  kRead = 0x52454144,  // read the block from the sender's memory, then answer
  kRing = 0x52494e47,  // the sender does not offer: the block follows through the ring, no answer
};

struct ReadOffer {
  uint32_t mode = 0;        // OfferMode
  uint32_t pid = 0;         // the sender's process
  uint64_t address = 0;     // the block, in the sender's memory
  uint64_t bytes = 0;
  uint64_t cookieAddress = 0;  // the sender's cookie word, read after the block
  uint64_t cookie = 0;         // its value
};
static_assert(sizeof(ReadOffer) == 40, "a ReadOffer is sent as it is laid out");

// An offer of [data, data + bytes) from this process (mode kRead), or the word that the block comes
// through the ring (kRing).
ReadOffer makeOffer(const uint8_t* data, size_t bytes, OfferMode mode);
// Reads an offer's block into dst (offer.bytes bytes): true when every byte came, with the sender's cookie.
// False when the kernel refused or the process is not the sender (dst may then hold part of anything).
bool readOffer(const ReadOffer& offer, uint8_t* dst);

}  // namespace shm
}  // namespace hora
