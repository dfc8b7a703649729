#include "transport/tcp/pair.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "transport/resync.h"
#include "transport/tcp/socket.h"

namespace hora {
namespace tcp {

constexpr size_t kBounceBytes = 256 * 1024;

TcpPair::TcpPair(int peer, int fd) : Pair(peer), fd_(fd), bounce_(kBounceBytes) {}

TcpPair::~TcpPair() {
  if (fd_ >= 0) close(fd_);
  if (noticeFd_ >= 0) close(noticeFd_);
}

Status TcpPair::lost(const char* what, int err) {
  std::string msg = std::string("connection to rank ") + std::to_string(peer()) + " " + what;
  return Status(Code::kPeerLost, msg + describeLoss(err), peer());
}

Status TcpPair::trySend(const uint8_t* data, size_t len, size_t* taken) {
  return trySendTwo(data, len, nullptr, 0, taken);
}

Status TcpPair::trySendTwo(const uint8_t* a, size_t alen, const uint8_t* b, size_t blen, size_t* taken) {
  iovec iov[2] = {{const_cast<uint8_t*>(a), alen}, {const_cast<uint8_t*>(b), blen}};
  return trySendv(iov, blen > 0 ? 2 : 1, taken);
}

// Writes until the socket takes no more. A partial write goes on from a copy of the pieces, advanced past
// what went; at most kMaxSendPieces of them are taken in one call.
Status TcpPair::trySendv(const iovec* iov, int n, size_t* taken) {
  *taken = 0;
  iovec rest[kMaxSendPieces];
  const size_t count = static_cast<size_t>(std::min(n, kMaxSendPieces));
  std::copy(iov, iov + count, rest);
  size_t first = 0;
  while (first < count) {
    if (rest[first].iov_len == 0) {
      ++first;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = rest + first;
    msg.msg_iovlen = count - first;
    ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::ok();
    if (sent <= 0) return lost("failed while sending", sent < 0 ? errno : 0);
    *taken += static_cast<size_t>(sent);
    for (size_t left = static_cast<size_t>(sent); left > 0;) {
      const size_t k = std::min(left, rest[first].iov_len);
      rest[first].iov_base = static_cast<uint8_t*>(rest[first].iov_base) + k;
      rest[first].iov_len -= k;
      left -= k;
      if (rest[first].iov_len == 0) ++first;
    }
  }
  return Status::ok();
}

size_t TcpPair::takeBuffered(uint8_t* dst, size_t len) {
  const size_t buffered = bounceEnd_ - bounceBegin_;
  const size_t n = buffered < len ? buffered : len;
  if (n > 0) {
    memcpy(dst, bounce_.data() + bounceBegin_, n);
    consume(n);
  }
  return n;
}

Status TcpPair::tryRecvAhead(uint8_t* dst, size_t len, size_t ahead, size_t* got) {
  *got = takeBuffered(dst, len);
  if (*got == len) return Status::ok();
  if (ahead > bounce_.size()) ahead = bounce_.size();
  if (len - *got >= ahead) {
    // Long enough to go straight into dst. (A second iovec for the bytes ahead made the kernel copy
    // the whole read the slow way: a 64 KiB ping-pong took 10% longer.)
    size_t more = 0;
    Status st = tryRecvInto(dst + *got, len - *got, &more);
    *got += more;
    return st;
  }
  // The buffer is empty (dst took all of it): peek() fills it with one recv, and dst's part is copied out.
  const uint8_t* data = nullptr;
  size_t avail = 0;
  HORA_RETURN_IF_ERROR(peek(ahead, &data, &avail));
  *got += takeBuffered(dst + *got, len - *got);
  return Status::ok();
}

Status TcpPair::tryRecvInto(uint8_t* dst, size_t len, size_t* got) {
  *got = takeBuffered(dst, len);
  while (*got < len) {
    ssize_t n = ::recv(fd_, dst + *got, len - *got, MSG_DONTWAIT);
    if (n > 0) {
      *got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::ok();
    return lost(n == 0 ? "was closed by the peer" : "failed while receiving", n < 0 ? errno : 0);
  }
  return Status::ok();
}

Status TcpPair::peek(size_t max, const uint8_t** data, size_t* avail) {
  // Move a short tail to the front when the buffer's end is near, so reads stay large.
  if (bounceBegin_ > 0 && bounceBegin_ == bounceEnd_) bounceBegin_ = bounceEnd_ = 0;
  if (bounce_.size() - bounceEnd_ < bounce_.size() / 4 && bounceBegin_ > 0) {
    memmove(bounce_.data(), bounce_.data() + bounceBegin_, bounceEnd_ - bounceBegin_);
    bounceEnd_ -= bounceBegin_;
    bounceBegin_ = 0;
  }
  size_t buffered = bounceEnd_ - bounceBegin_;
  if (buffered < max && bounceEnd_ < bounce_.size()) {
    size_t room = bounce_.size() - bounceEnd_;
    // Read no further than asked beyond what is buffered: bytes of a later message wait in the kernel.
    size_t want = max - buffered < room ? max - buffered : room;
    for (;;) {
      ssize_t n = ::recv(fd_, bounce_.data() + bounceEnd_, want, MSG_DONTWAIT);
      if (n > 0) {
        bounceEnd_ += static_cast<size_t>(n);
        break;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return lost(n == 0 ? "was closed by the peer" : "failed while receiving", n < 0 ? errno : 0);
    }
  }
  buffered = bounceEnd_ - bounceBegin_;
  *data = bounce_.data() + bounceBegin_;
  *avail = buffered < max ? buffered : max;
  return Status::ok();
}

void TcpPair::consume(size_t n) {
  bounceBegin_ += n;
  if (bounceBegin_ == bounceEnd_) bounceBegin_ = bounceEnd_ = 0;
}

Status TcpPair::skipThrough(MarkerScan* scan, bool* found) {
  *found = false;
  // Bytes read ahead before the last world ended. The marker cannot be among them (it is sent only once
  // that world's thread has stopped reading), so they are all dropped.
  while (bounceEnd_ > bounceBegin_ && !*found) consume(scan->feed(bounce_.data() + bounceBegin_, bounceEnd_ - bounceBegin_, found));
  if (*found) return Status::ok();
  int err = 0;
  if (!skipThroughSocket(fd_, scan, found, &err)) return lost(err == 0 ? "was closed by the peer" : "failed while receiving", err);
  return Status::ok();
}

}  // namespace tcp
}  // namespace hora
