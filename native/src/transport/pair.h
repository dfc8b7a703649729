// Pair: the connection between this rank and one peer, as the algorithms see it.
//
// Every call is non-blocking. The progress engine (transport/context.h) drives a set of pairs at once, so
// a rank can send to its right neighbour while it receives from its left and reduces what has arrived.
// Both transports present the same byte stream per direction; the shared-memory transport hands out
// received bytes in place (peek/consume) so they can be reduced straight out of the shared segment.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace hora {

class MarkerScan;

class Pair {
 public:
  explicit Pair(int peer) : peer_(peer) {}
  virtual ~Pair() = default;
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  int peer() const { return peer_; }
  // The peer's rank in a later world that took this pair over (transport/resync.h).
  void renumber(int peer) { peer_ = peer; }

  // Takes as many bytes of [data, data + len) as fit now; *taken says how many (possibly 0).
  virtual Status trySend(const uint8_t* data, size_t len, size_t* taken) = 0;
  // The same for [a, a + alen) followed by [b, b + blen), as one stream; *taken counts both. TCP writes
  // them with one system call, so a frame's header and its payload leave in the same segments rather than
  // the header alone in a packet of its own.
  virtual Status trySendTwo(const uint8_t* a, size_t alen, const uint8_t* b, size_t blen, size_t* taken) {
    HORA_RETURN_IF_ERROR(trySend(a, alen, taken));
    if (*taken < alen || blen == 0) return Status::ok();
    size_t more = 0;
    Status st = trySend(b, blen, &more);
    *taken += more;
    return st;
  }
  // The same for n pieces in order (at most kMaxSendPieces are taken), as one stream; *taken counts all
  // of them. TCP writes them with one system call: a run of frames, each a header and its payload, costs
  // one call instead of one each.
  static constexpr int kMaxSendPieces = 64;
  virtual Status trySendv(const iovec* iov, int n, size_t* taken) {
    *taken = 0;
    for (int i = 0; i < n; ++i) {
      size_t more = 0;
      HORA_RETURN_IF_ERROR(trySend(static_cast<const uint8_t*>(iov[i].iov_base), iov[i].iov_len, &more));
      *taken += more;
      if (more < iov[i].iov_len) break;
    }
    return Status::ok();
  }
  // Copies up to len received bytes into dst; *got says how many (possibly 0).
  virtual Status tryRecvInto(uint8_t* dst, size_t len, size_t* got) = 0;
  // The same, for a reader that knows more bytes will follow (the next frame's header): a transport that
  // reads with a system call may, for a read shorter than `ahead`, take up to `ahead` bytes in that call
  // and keep the rest, in order, for the next tryRecvInto, tryRecvAhead or peek. A stream of small frames
  // then costs one call per frame rather than one per header and one per payload. Shared memory has
  // nothing to save and reads as tryRecvInto does.
  virtual Status tryRecvAhead(uint8_t* dst, size_t len, size_t ahead, size_t* got) {
    (void)ahead;
    return tryRecvInto(dst, len, got);
  }
  // Exposes received bytes in place, contiguous, at most max; *avail may be 0. consume() releases them.
  virtual Status peek(size_t max, const uint8_t** data, size_t* avail) = 0;
  virtual void consume(size_t n) = 0;

  // The descriptor poll() watches for this pair's traffic, or -1 when the transport is polled by spinning.
  virtual int pollFd() const = 0;
  // A socket whose hang-up means the peer is gone (for shared memory, the idle TCP connection kept for this).
  virtual int livenessFd() const = 0;
  // An idle socket on which the peer of an elastic world says that its collective failed (a byte of
  // data, Context::notifyPeers()), without closing anything; -1 when there is none. For shared memory
  // it is the liveness socket; a TCP pair has one of its own in elastic worlds only.
  virtual int noticeFd() const = 0;

  // Single copy (transport/shm/single_copy.h): whether a large block sent on this pair is offered for the
  // peer to read out of this process's memory, rather than streamed. Shared memory only, and only until
  // the peer refuses once (refuseSingleCopy()): the kernel's answer does not change for a pair.
  virtual bool offersSingleCopy() const { return false; }
  virtual void refuseSingleCopy() {}

  // Drops received bytes up to and including the end of the marker that scan looks for, never a byte
  // beyond it; *found says whether the marker's end was reached. Does not block. (transport/resync.h)
  virtual Status skipThrough(MarkerScan* scan, bool* found) = 0;

 private:
  int peer_;
};

}  // namespace hora
