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
    tx_->control.head.store(txHead_, std::memory_order_release);
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
    tx_->control.head.store(txHead_, std::memory_order_release);
    *taken += used;
  }
  return Status::ok();
}

Status ShmPair::peek(size_t max, const uint8_t** data, size_t* avail) {
  *avail = 0;
  if (rxTail_ == rxHeadSeen_) {
    rxHeadSeen_ = rx_->control.head.load(std::memory_order_acquire);
    if (rxTail_ == rxHeadSeen_) return Status::ok();
  }
  size_t slot = rxTail_ % kSlots;
  size_t left = rx_->control.lengths[slot] - rxOffset_;
  *data = rx_->slots[slot] + rxOffset_;
  *avail = left < max ? left : max;
  return Status::ok();
}

void ShmPair::consume(size_t n) {
  size_t slot = rxTail_ % kSlots;
  rxOffset_ += n;
  if (rxOffset_ >= rx_->control.lengths[slot]) {
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
