// A single-producer, single-consumer ring of fixed-size slots in shared memory.
//
// The ring lives in the *receiver's* segment, so data already published stays readable after the sender
// exits. The producer copies a chunk into the next free slot and publishes it by advancing `head`; the
// consumer reads (or reduces) the slot in place and frees it by advancing `tail`. Slots hold at most
// kSlotBytes, a multiple of 8, and a message always starts at a fresh slot, so an element never
// straddles two slots. (The message channel's rings, read as a byte stream, are filled back to back by
// ShmPair::trySendv instead.) Several slots give several chunks in flight: while the consumer reduces
// one slot, the producer fills the next, which is the compute/communication overlap on shared memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hora {
namespace shm {

constexpr size_t kSlotBytes = 64 * 1024;
constexpr size_t kSlots = 8;

// The head word holds the number of slots published and, in its low kLengthBits, the length of the last
// of them: a consumer that keeps up (the usual case for small messages) learns the length of the slot it
// is about to read from the line it polls, without another trip to the producer's cache for lengths[].
constexpr unsigned kLengthBits = 20;
static_assert(kSlotBytes < (size_t(1) << kLengthBits), "a slot's length must fit the head word");
inline uint64_t packHead(uint64_t slots, size_t lastLength) { return slots << kLengthBits | lastLength; }
inline uint64_t slotsOf(uint64_t head) { return head >> kLengthBits; }
inline size_t lastLengthOf(uint64_t head) { return head & ((uint64_t(1) << kLengthBits) - 1); }

struct alignas(64) RingControl {
  std::atomic<uint64_t> head;  // packHead(slots published by the producer, the last one's length)
  char padHead[64 - sizeof(std::atomic<uint64_t>)];
  std::atomic<uint64_t> tail;  // slots released by the consumer
  char padTail[64 - sizeof(std::atomic<uint64_t>)];
  uint32_t lengths[kSlots];    // bytes used in each slot (written before head)
};

struct Ring {
  RingControl control;
  alignas(64) uint8_t slots[kSlots][kSlotBytes];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory rings need lock-free 64-bit atomics");
static_assert(kSlotBytes % 8 == 0, "an element must never straddle two slots");

constexpr size_t kRingBytes = (sizeof(Ring) + 4095) & ~size_t(4095);

}  // namespace shm
}  // namespace hora
