#include "transport/tcp/mesh_link.h"

#include <errno.h>
#include <sys/socket.h>

#include <cstring>

namespace hora {
namespace tcp {

Io pumpOut(Link& l, std::string* why) {
  while (l.outDone < l.outLen) {
    ssize_t n = ::send(l.fd, l.out + l.outDone, l.outLen - l.outDone, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      l.outDone += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Io::kWaiting;
    } else {
      *why = std::string("send failed: ") + strerror(errno);
      return Io::kFailed;
    }
  }
  return Io::kComplete;
}

Io pumpIn(Link& l, std::string* why) {
  while (l.inDone < l.inLen) {
    ssize_t n = ::recv(l.fd, l.in + l.inDone, l.inLen - l.inDone, MSG_DONTWAIT);
    if (n > 0) {
      l.inDone += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Io::kWaiting;
    } else {
      *why = n == 0 ? "closed" : std::string("receive failed: ") + strerror(errno);
      if (l.inDone > 0) *why += " after " + std::to_string(l.inDone) + " of " + std::to_string(l.inLen) + " bytes";
      return Io::kFailed;
    }
  }
  return Io::kComplete;
}

}  // namespace tcp
}  // namespace hora
