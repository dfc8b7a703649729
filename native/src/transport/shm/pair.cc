#include "transport/shm/pair.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/clock.h"
#include "transport/resync.h"

namespace hora {
namespace shm {

ShmPair::ShmPair(int peer, Ring* tx, Ring* rx, int tcpFd) : Pair(peer), tx_(tx), rx_(rx), tcpFd_(tcpFd) {}

ShmPair::~ShmPair() {
  if (tcpFd_ >= 0) close(tcpFd_);
}

void ShmPair::copyChunk(uint8_t* dst, const uint8_t* src, size_t n, size_t left) {
  // A chunk that does not go on from the last one starts a send: whether it is a long one is decided here.
  if (src != runEnd_) runIsLong_ = left > kStreamMaxBytes;
  runEnd_ = src + n;
  if (!runIsLong_) return copyToSlot(dst, src, n, true);
  // Only whole slots are timed; a part of one follows what they found.
  if (n < kSlotBytes) return copyToSlot(dst, src, n, longSends_.streaming());
  if (longSends_.stream()) return copyToSlot(dst, src, n, true);
  const int64_t start = monotonicNanos();
  copyToSlot(dst, src, n, false);
  longSends_.copied(n, monotonicNanos() - start);
}

// A small message costs its lines' trips between the cores: the writer's stores take each line of its
// slot out of the reader's cache (which read the slot a lap ago), and the reader then takes it back. Both
// trips are made while the core would otherwise wait:
//   - after publishing a slot of up to kPrepareBytes, the writer stores a byte to each line of the same
//     span of the next slot, if the reader has released it: the lines come over while this rank waits for
//     its partner, and a message of the same size then writes to lines this core holds. (PREFETCHW, the
//     instruction for this, left a 4 KiB copy into a slot as slow as without it on an AMD EPYC guest,
//     about 400 cycles; the stores brought it to 150-200, where a copy between two private buffers takes
//     about 100.) The next message is usually the same size: the agreement's head and a small
//     collective's payload, call after call.
//   - when the reader first sees a slot, it asks for all of its lines (up to kPrepareBytes) at once, rather
//     than one after another as its copy or reduction reaches them.
// Larger chunks are streamed past the caches (copy.h) or are read at a rate the hardware prefetchers keep up with.
namespace {
constexpr size_t kPrepareBytes = 4096 + 512;
}  // namespace

void ShmPair::prepareNextSlot(size_t used) {
  if (used > kPrepareBytes || txHead_ - txTailSeen_ >= kSlots) return;
  volatile uint8_t* next = tx_->slots[txHead_ % kSlots];
  for (size_t off = 0; off < used; off += 64) next[off] = 0;
}

Status ShmPair::trySend(const uint8_t* data, size_t len, size_t* taken) {
  *taken = 0;
  while (*taken < len) {
    if (txHead_ - txTailSeen_ >= kSlots) {
      txTailSeen_ = tx_->control.tail.load(std::memory_order_acquire);
      if (txHead_ - txTailSeen_ >= kSlots) break;
    }
    size_t slot = txHead_ % kSlots;
    size_t n = len - *taken < kSlotBytes ? len - *taken : kSlotBytes;
    copyChunk(tx_->slots[slot], data + *taken, n, len - *taken);
    tx_->control.lengths[slot] = static_cast<uint32_t>(n);
    ++txHead_;
    tx_->control.head.store(packHead(txHead_, n), std::memory_order_release);
    *taken += n;
  }
  return Status::ok();
}

Status ShmPair::trySendTwo(const uint8_t* a, size_t alen, const uint8_t* b, size_t blen, size_t* taken) {
  iovec iov[2] = {{const_cast<uint8_t*>(a), alen}, {const_cast<uint8_t*>(b), blen}};
  return trySendv(iov, 2, taken);
}

Status ShmPair::trySendv(const iovec* iov, int n, size_t* taken) {
  *taken = 0;
  n = std::min(n, kMaxSendPieces);
  int piece = 0;
  size_t into = 0;  // bytes of iov[piece] already sent
  for (;;) {
    while (piece < n && into == iov[piece].iov_len) {
      ++piece;
      into = 0;
    }
    if (piece == n) break;
    if (txHead_ - txTailSeen_ >= kSlots) {
      txTailSeen_ = tx_->control.tail.load(std::memory_order_acquire);
      if (txHead_ - txTailSeen_ >= kSlots) break;
    }
    const size_t slot = txHead_ % kSlots;
    size_t used = 0;
    while (piece < n && used < kSlotBytes) {
      const size_t k = std::min(iov[piece].iov_len - into, kSlotBytes - used);
      const uint8_t* from = static_cast<const uint8_t*>(iov[piece].iov_base) + into;
      copyChunk(tx_->slots[slot] + used, from, k, iov[piece].iov_len - into);
      used += k;
      into += k;
      if (into == iov[piece].iov_len) {
        ++piece;
        into = 0;
      }
    }
    tx_->control.lengths[slot] = static_cast<uint32_t>(used);
    ++txHead_;
    tx_->control.head.store(packHead(txHead_, used), std::memory_order_release);
    *taken += used;
    prepareNextSlot(used);
  }
  return Status::ok();
}

Status ShmPair::peek(size_t max, const uint8_t** data, size_t* avail) {
  *avail = 0;
  if (rxTail_ == rxHeadSeen_) {
    const uint64_t head = rx_->control.head.load(std::memory_order_acquire);
    rxHeadSeen_ = slotsOf(head);
    if (rxTail_ == rxHeadSeen_) return Status::ok();
    rxLastLength_ = lastLengthOf(head);
  }
  size_t slot = rxTail_ % kSlots;
  const size_t length = rxTail_ + 1 == rxHeadSeen_ ? rxLastLength_ : rx_->control.lengths[slot];
  rxLength_ = length;
  size_t left = length - rxOffset_;
  *data = rx_->slots[slot] + rxOffset_;
  if (rxFetched_ != rxTail_) {
    rxFetched_ = rxTail_;
    // The first line is read now; ask for the rest of a small slot's lines together (see prepareNextSlot).
    if (length <= kPrepareBytes) {
      for (size_t off = 64; off < length; off += 64) __builtin_prefetch(rx_->slots[slot] + off, 0, 3);
    }
  }
  *avail = left < max ? left : max;
  return Status::ok();
}

void ShmPair::consume(size_t n) {
  rxOffset_ += n;
  if (rxOffset_ >= rxLength_) {
    rxOffset_ = 0;
    ++rxTail_;
    rx_->control.tail.store(rxTail_, std::memory_order_release);
  }
}

Status ShmPair::tryRecvInto(uint8_t* dst, size_t len, size_t* got) {
  *got = 0;
  while (*got < len) {
    const uint8_t* src;
    size_t n;
    peek(len - *got, &src, &n);
    if (n == 0) break;
    memcpy(dst + *got, src, n);
    consume(n);
    *got += n;
  }
  return Status::ok();
}

Status ShmPair::skipThrough(MarkerScan* scan, bool* found) {
  *found = false;
  for (;;) {
    const uint8_t* data = nullptr;
    size_t avail = 0;
    peek(kSlotBytes, &data, &avail);
    if (avail == 0) return Status::ok();
    size_t n = scan->feed(data, avail, found);
    consume(n);
    if (*found) return Status::ok();
  }
}

bool ShmPair::usesMemory(const void* base, size_t bytes) const {
  auto inside = [&](const void* p) {
    auto a = reinterpret_cast<uintptr_t>(p);
    auto b = reinterpret_cast<uintptr_t>(base);
    return a >= b && a < b + bytes;
  };
  return inside(tx_) || inside(rx_);
}

}  // namespace shm
}  // namespace hora
