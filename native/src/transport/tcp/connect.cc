#include "transport/tcp/connect.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "common/log.h"

namespace hora {
namespace tcp {
namespace {

constexpr uint32_t kMagic = 0x41524f48;  // "HORA" little-endian
constexpr uint16_t kDataPlaneVersion = 1;

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  int32_t rank;
  int32_t size;
  uint64_t jobTag;
};
static_assert(sizeof(Hello) == 24, "Hello is a wire struct");

Status sysError(const std::string& what) {
  return Status(Code::kInternal, what + ": " + strerror(errno));
}

Status waitFd(int fd, short events, const Deadline& deadline, int peer, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = deadline.remainingMs(1000);
    int r = poll(&p, 1, ms);
    if (r > 0) return Status::ok();
    if (r < 0 && errno != EINTR) return sysError("poll");
    if (deadline.expired()) {
      return Status(Code::kTimeout, std::string("timed out ") + what +
                                        (peer >= 0 ? " rank " + std::to_string(peer) : std::string()),
                    peer);
    }
  }
}

Status resolve(const std::string& host, int port, sockaddr_in* out) {
  memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0") {
    out->sin_addr.s_addr = htonl(INADDR_ANY);
    return Status::ok();
  }
  if (inet_pton(AF_INET, host.c_str(), &out->sin_addr) == 1) return Status::ok();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status(Code::kInvalidArgument, "cannot resolve address '" + host + "': " + gai_strerror(rc));
  }
  out->sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return Status::ok();
}

Status connectOne(const PeerAddress& addr, int peer, const Deadline& deadline, int* out) {
  sockaddr_in sa;
  HORA_RETURN_IF_ERROR(resolve(addr.host, addr.port, &sa));
  for (int attempt = 0;; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sysError("socket");
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
      *out = fd;
      return Status::ok();
    }
    int err = errno;
    close(fd);
    if (deadline.expired()) {
      return Status(Code::kPeerLost,
                    "cannot connect to rank " + std::to_string(peer) + " at " + addr.host + ":" +
                        std::to_string(addr.port) + " (" + strerror(err) + ")",
                    peer);
    }
    // The peer listens before it registers, so refusals are rare and short-lived; back off gently.
    std::this_thread::sleep_for(std::chrono::milliseconds(attempt < 10 ? 10 : 100));
  }
}

}  // namespace

Status sendAll(int fd, const void* data, size_t len, const Deadline& deadline, int peer) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      HORA_RETURN_IF_ERROR(waitFd(fd, POLLOUT, deadline, peer, "sending to"));
      continue;
    }
    return Status(Code::kPeerLost, "connection to rank " + std::to_string(peer) + " failed while sending (" +
                                       strerror(errno) + ")",
                  peer);
  }
  return Status::ok();
}

Status recvAll(int fd, void* data, size_t len, const Deadline& deadline, int peer) {
  uint8_t* p = static_cast<uint8_t*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      HORA_RETURN_IF_ERROR(waitFd(fd, POLLIN, deadline, peer, "waiting for"));
      continue;
    }
    return Status(Code::kPeerLost,
                  "connection to rank " + std::to_string(peer) +
                      (n == 0 ? " was closed by the peer" : std::string(" failed: ") + strerror(errno)),
                  peer);
  }
  return Status::ok();
}

Status listenOn(const std::string& host, int backlog, int* fd, int* port) {
  sockaddr_in sa;
  HORA_RETURN_IF_ERROR(resolve(host, 0, &sa));
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return sysError("socket");
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    Status st = sysError("bind to " + (host.empty() ? std::string("0.0.0.0") : host));
    close(s);
    return st;
  }
  if (::listen(s, backlog) != 0) {
    Status st = sysError("listen");
    close(s);
    return st;
  }
  socklen_t len = sizeof(sa);
  getsockname(s, reinterpret_cast<sockaddr*>(&sa), &len);
  *fd = s;
  *port = ntohs(sa.sin_port);
  return Status::ok();
}

Status configureForDataPlane(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) return sysError("TCP_NODELAY");
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return sysError("O_NONBLOCK");
  return Status::ok();
}

Status connectMesh(int listenFd, int rank, int size, const std::vector<PeerAddress>& peers, uint64_t jobTag,
                   const Deadline& deadline, std::vector<int>* fds) {
  fds->assign(size, -1);
  auto closeAll = [&]() {
    for (int& f : *fds) {
      if (f >= 0) close(f);
      f = -1;
    }
  };
  Hello mine{kMagic, kDataPlaneVersion, 0, rank, size, jobTag};
  for (int peer = 0; peer < rank; ++peer) {
    int fd = -1;
    Status st = connectOne(peers[peer], peer, deadline, &fd);
    if (st.isOk()) st = sendAll(fd, &mine, sizeof(mine), deadline, peer);
    Hello theirs{};
    if (st.isOk()) st = recvAll(fd, &theirs, sizeof(theirs), deadline, peer);
    if (st.isOk() && (theirs.magic != kMagic || theirs.rank != peer || theirs.jobTag != jobTag)) {
      st = Status(Code::kAuth, "rank " + std::to_string(peer) + " at " + peers[peer].host + ":" +
                                   std::to_string(peers[peer].port) + " answered the handshake as a different job or rank",
                  peer);
    }
    if (!st.isOk()) {
      if (fd >= 0) close(fd);
      closeAll();
      return st;
    }
    (*fds)[peer] = fd;
  }
  int expected = size - 1 - rank;
  while (expected > 0) {
    Status st = waitFd(listenFd, POLLIN, deadline, -1, "waiting for higher ranks to connect; still missing");
    if (!st.isOk()) {
      std::string missing;
      for (int peer = rank + 1; peer < size; ++peer) {
        if ((*fds)[peer] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
      }
      closeAll();
      return Status(Code::kTimeout, "timed out waiting for ranks " + missing + " to connect", -1);
    }
    int fd = accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // A stranger gets a short deadline of its own so it cannot hold up the job.
    Deadline helloDeadline(deadline.remainingMs(5000));
    Hello theirs{};
    st = recvAll(fd, &theirs, sizeof(theirs), helloDeadline, -1);
    bool valid = st.isOk() && theirs.magic == kMagic && theirs.version == kDataPlaneVersion &&
                 theirs.jobTag == jobTag && theirs.size == size && theirs.rank > rank && theirs.rank < size &&
                 (*fds)[theirs.rank] < 0;
    if (!valid) {
      HORA_WARN("dropped a data-plane connection that failed the handshake (%s)",
                st.isOk() ? "wrong magic, version, job, size or rank" : st.message().c_str());
      close(fd);
      continue;
    }
    st = sendAll(fd, &mine, sizeof(mine), deadline, theirs.rank);
    if (!st.isOk()) {
      close(fd);
      continue;
    }
    (*fds)[theirs.rank] = fd;
    --expected;
  }
  return Status::ok();
}

}  // namespace tcp
}  // namespace hora
