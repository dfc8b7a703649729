// Shared-memory pair between two ranks on the same host: a ring each way (see ring.h). The TCP connection
// made at init stays open beside it, idle, so that a peer that dies is seen at once as a hang-up.
#pragma once

#include "transport/pair.h"
#include "transport/shm/copy.h"
#include "transport/shm/ring.h"

namespace hora {
namespace shm {

class ShmPair : public Pair {
 public:
  // tx: the ring in the peer's segment that this rank fills; rx: the ring in this rank's segment that the
  // peer fills. tcpFd is owned by this pair from now on.
  ShmPair(int peer, Ring* tx, Ring* rx, int tcpFd);
  ~ShmPair() override;

  Status trySend(const uint8_t* data, size_t len, size_t* taken) override;
  // Pieces sent together are one stream: they fill slots back to back (a frame's header shares its slot
  // with the payload behind it) rather than each starting a slot of its own as trySend does. Only for
  // readers that take bytes as a stream (the message channel), never for data reduced in place.
  Status trySendTwo(const uint8_t* a, size_t alen, const uint8_t* b, size_t blen, size_t* taken) override;
  Status trySendv(const iovec* iov, int n, size_t* taken) override;
  Status tryRecvInto(uint8_t* dst, size_t len, size_t* got) override;
  Status peek(size_t max, const uint8_t** data, size_t* avail) override;
  void consume(size_t n) override;
  int pollFd() const override { return -1; }
  int livenessFd() const override { return tcpFd_; }
  int noticeFd() const override { return tcpFd_; }
  Status skipThrough(MarkerScan* scan, bool* found) override;
  bool offersSingleCopy() const override { return !singleCopyRefused_; }
  void refuseSingleCopy() override { singleCopyRefused_ = true; }
  // Whether either ring lies in [base, base + bytes) (a segment this pair needs mapped).
  bool usesMemory(const void* base, size_t bytes) const;

 private:
  // Copies a chunk of a send into a slot (see copy.h); left: the send's bytes still to go, n included.
  void copyChunk(uint8_t* dst, const uint8_t* src, size_t n, size_t left);
  // After a small slot is published: takes the next slot's first lines for writing while the slot is free
  // (see pair.cc).
  void prepareNextSlot(size_t used);

  Ring* tx_;
  Ring* rx_;
  int tcpFd_;
  uint64_t txHead_ = 0;       // producer's own copy of tx_->head
  uint64_t txTailSeen_ = 0;   // last tail read from the consumer, to avoid touching its cache line
  uint64_t rxTail_ = 0;       // consumer's own copy of rx_->tail
  uint64_t rxHeadSeen_ = 0;
  size_t rxLastLength_ = 0;   // the length of slot rxHeadSeen_ - 1, from the same head word
  size_t rxLength_ = 0;       // the length of the current slot (rxTail_), as peek() found it
  size_t rxOffset_ = 0;       // bytes already consumed from the current slot
  uint64_t rxFetched_ = ~uint64_t(0);  // the slot whose lines peek() last asked for at once
  const uint8_t* runEnd_ = nullptr;  // just past the last chunk copied: where a send going on resumes
  bool runIsLong_ = false;           // whether that send is longer than kStreamMaxBytes (copy.h)
  LongSendPolicy longSends_;
  bool singleCopyRefused_ = false;  // the peer could not read this rank's memory (single_copy.h)
};

}  // namespace shm
}  // namespace hora
