// TCP pair: one non-blocking, TCP_NODELAY stream socket per peer, connected once at init.
#pragma once

#include <memory>
#include <vector>

#include "transport/pair.h"

namespace hora {
namespace tcp {

class TcpPair : public Pair {
 public:
  TcpPair(int peer, int fd);
  ~TcpPair() override;

  Status trySend(const uint8_t* data, size_t len, size_t* taken) override;
  Status trySendTwo(const uint8_t* a, size_t alen, const uint8_t* b, size_t blen, size_t* taken) override;
  Status trySendv(const iovec* iov, int n, size_t* taken) override;
  Status tryRecvInto(uint8_t* dst, size_t len, size_t* got) override;
  Status tryRecvAhead(uint8_t* dst, size_t len, size_t ahead, size_t* got) override;
  Status peek(size_t max, const uint8_t** data, size_t* avail) override;
  void consume(size_t n) override;
  int pollFd() const override { return fd_; }
  int livenessFd() const override { return fd_; }
  int noticeFd() const override { return noticeFd_; }
  // Owns fd from now on: the notice socket of an elastic world.
  void adoptNoticeSocket(int fd) { noticeFd_ = fd; }
  Status skipThrough(MarkerScan* scan, bool* found) override;

 private:
  Status lost(const char* what, int err);
  // Copies buffered bytes into dst; returns how many.
  size_t takeBuffered(uint8_t* dst, size_t len);

  int fd_;
  int noticeFd_ = -1;
  // Bytes read ahead for peek() and tryRecvAhead(); tryRecvInto drains these before it reads the
  // socket, so the stream stays in order. Sized to stay in L2 while a segment is reduced out of it.
  std::vector<uint8_t> bounce_;
  size_t bounceBegin_ = 0;
  size_t bounceEnd_ = 0;
};

}  // namespace tcp
}  // namespace hora
