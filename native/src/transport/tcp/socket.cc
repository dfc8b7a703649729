#include "transport/tcp/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/log.h"

namespace hora {
namespace tcp {

Status sysError(const std::string& what) {
  return Status(Code::kInternal, what + ": " + strerror(errno));
}

namespace {

// Congestion control of the connections between two processes of one host: see configureForDataPlane.
constexpr char kReno[] = "reno";

std::string congestionOf(int fd) {
  char name[32] = {0};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return std::string();
  return std::string(name, strnlen(name, len));
}

bool setCongestion(int fd, const std::string& name) {
  return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), name.size()) == 0;
}

// What a new socket gets: the system's choice (net.ipv4.tcp_congestion_control).
const std::string& systemCongestion() {
  static const std::string name = [] {
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    std::string n = s >= 0 ? congestionOf(s) : std::string();
    if (s >= 0) close(s);
    return n;
  }();
  return name;
}

// A loopback address, or an address of one of this host's interfaces.
bool addressOfThisHost(const sockaddr_in& a) {
  const in_addr_t addr = ntohl(a.sin_addr.s_addr);
  if ((addr >> 24) == 127) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    found = i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
            reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a.sin_addr.s_addr;
  }
  freeifaddrs(list);
  return found;
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

}  // namespace

void preferRenoToThisHost(int fd, const sockaddr_in& to) {
  if (addressOfThisHost(to)) setCongestion(fd, kReno);
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
  // Connections accepted here start under Reno, as a connection between two processes of one host
  // should from its first packet (configureForDataPlane); one from another host gets the system's
  // choice back there, before any data.
  setCongestion(s, kReno);
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

std::string describeLoss(int err) {
  if (err == ETIMEDOUT) {
    return " (its host did not answer for " + std::to_string(kPeerSilenceMs / 1000) + " s: the host or the link is down)";
  }
  return err != 0 ? std::string(" (") + strerror(err) + ")" : std::string();
}

bool peerOnThisHost(int fd) {
  sockaddr_storage peer{}, self{};
  socklen_t peerLen = sizeof(peer), selfLen = sizeof(self);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peerLen) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&self), &selfLen) != 0 || peer.ss_family != self.ss_family) {
    return false;
  }
  if (peer.ss_family == AF_INET) {
    const in_addr_t p = ntohl(reinterpret_cast<sockaddr_in*>(&peer)->sin_addr.s_addr);
    const in_addr_t m = ntohl(reinterpret_cast<sockaddr_in*>(&self)->sin_addr.s_addr);
    return (p >> 24) == 127 || p == m;
  }
  if (peer.ss_family == AF_INET6) {
    const in6_addr& p = reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr;
    const in6_addr& m = reinterpret_cast<sockaddr_in6*>(&self)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&p) || (IN6_IS_ADDR_V4MAPPED(&p) && p.s6_addr[12] == 127) || memcmp(&p, &m, sizeof(p)) == 0;
  }
  return false;
}

Status configureForDataPlane(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) return sysError("TCP_NODELAY");
  // A peer whose host or link went away sends no FIN: without these a rank waiting to receive would
  // only find out at the collective deadline. Keepalive probes after 1 s of silence, 1 s apart, 3 lost
  // ones end the connection (about 4 s); TCP_USER_TIMEOUT does the same for data sent and not
  // acknowledged. A stopped or busy peer process still answers both from its kernel, so it is not
  // mistaken for a lost one; that case is left to the collective deadline.
  int idle = 1, interval = 1, probes = 3;
  unsigned int userTimeoutMs = kPeerSilenceMs;
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeoutMs, sizeof(userTimeoutMs)) != 0) {
    return sysError("keepalive");
  }
  // Between two processes of one host, TCP runs over the loopback device. A congestion control that
  // paces (BBR, the default of some systems) still spreads a large message out in time there, as if it
  // crossed a network: a 1 MiB message took 3.5 times as long under BBR as under Reno on a 2-vCPU machine
  // (docs/notes/2026-11-26-tcp-on-one-host-no-pacing.md). Such a connection uses Reno, which never
  // paces, from its first packet: the dialing end chose it before connecting and the listener hands
  // it to what it accepts. (Chosen later, a connection keeps pacing at Reno's rate: BBR's request for
  // pacing outlives it.) Where Reno is refused the system's choice stays, and only the speed differs.
  // An accepted connection from another host goes back to the system's choice.
  const std::string cc = congestionOf(fd);
  if (peerOnThisHost(fd)) {
    if (cc != kReno && !setCongestion(fd, kReno)) {
      HORA_INFO("a connection on this host keeps the system's congestion control %s (Reno refused: %s)", cc.c_str(), strerror(errno));
    }
  } else if (cc == kReno && !systemCongestion().empty() && systemCongestion() != kReno) {
    if (!setCongestion(fd, systemCongestion())) {
      HORA_INFO("a connection from another host keeps Reno (%s refused: %s)", systemCongestion().c_str(), strerror(errno));
    }
  }
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return sysError("O_NONBLOCK");
  return Status::ok();
}

}  // namespace tcp
}  // namespace hora
