#include "transport/tcp/connect.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/sha256.h"
#include "transport/tcp/handshake.h"

namespace hora {
namespace tcp {
namespace {

Status sysError(const std::string& what) {
  return Status(Code::kInternal, what + ": " + strerror(errno));
}

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

namespace {

using handshake::Answer;
using handshake::Challenge;
using handshake::Hello;
using handshake::Transcript;
using handshake::Verdict;

// Dropped connections logged one by one; later ones are counted and summed up once.
constexpr int kLoggedDrops = 32;
constexpr size_t kMaxMessageBytes = handshake::kHelloBytes;
static_assert(handshake::kChallengeBytes <= kMaxMessageBytes && handshake::kAnswerBytes <= kMaxMessageBytes,
              "every handshake message fits a Link's buffers");

std::string describeAddress(const sockaddr_in& sa) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(sa.sin_port));
}

std::string hex64(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// One connection being set up, in either direction.
struct Link {
  enum class Step {
    kRetryWait,       // outgoing: waiting to dial again (no socket)
    kConnecting,      // outgoing: non-blocking connect() in progress
    kAwaitChallenge,  // outgoing
    kSendHello,       // outgoing
    kAwaitAnswer,     // outgoing
    kSendChallenge,   // incoming
    kAwaitHello,      // incoming
    kSendAnswer,      // incoming: accepted; the socket is handed over once the answer is out
    kSendRejection,   // incoming: rejected; closed once the answer is out (or cannot go out)
    kDone,            // handed over or closed; removed at the end of the round
  };
  int fd = -1;
  bool outgoing = false;
  int peer = -1;       // outgoing: the rank dialed; incoming: the rank an accepted Hello proved
  std::string remote;  // "addr:port", for log lines and errors
  Step step = Step::kDone;
  Clock::time_point acceptedAt;  // incoming
  Clock::time_point expires;     // incoming: the end of its own handshake deadline
  Clock::time_point retryAt;     // outgoing, in kRetryWait
  Clock::time_point redialAt;    // outgoing, in kConnecting: dial again if the SYN has had no answer by then
  int attempts = 0;              // outgoing: dials so far
  int unanswered = 0;            // outgoing: dials in a row whose SYN had no answer
  std::string lastError;         // outgoing: why the last attempt failed
  sockaddr_in address{};         // outgoing: where to dial
  uint8_t out[kMaxMessageBytes];
  size_t outLen = 0, outDone = 0;
  uint8_t in[kMaxMessageBytes];
  size_t inLen = 0, inDone = 0;
  handshake::Nonce myNonce{};
  handshake::Nonce peerNonce{};

  // Counted against kMaxPendingAccepts: accepted, not yet judged.
  bool pendingIncoming() const { return !outgoing && (step == Step::kSendChallenge || step == Step::kAwaitHello); }
  // Bound by its own handshake deadline: accepted and not yet handed over or closed.
  bool openIncoming() const { return !outgoing && step != Step::kDone; }
  short pollEvents() const {
    switch (step) {
      case Step::kAwaitChallenge:
      case Step::kAwaitAnswer:
      case Step::kAwaitHello:
        return POLLIN;
      case Step::kRetryWait:
      case Step::kDone:
        return 0;
      default:
        return POLLOUT;
    }
  }
  void expect(size_t len) {
    inLen = len;
    inDone = 0;
  }
  void closeSocket() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

enum class Io { kWaiting, kComplete, kFailed };

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

// Reads no more than the message expected, so bytes that follow the handshake stay in the socket.
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

// Drives every handshake of one rank's mesh from a single poll() loop (see connect.h).
class MeshBuilder {
 public:
  MeshBuilder(int listenFd, const MeshOptions& o, const Deadline& deadline, std::vector<int>* fds)
      : listenFd_(listenFd), o_(o), deadline_(deadline), fds_(fds), rejectedClaims_(o.size) {}

  Status run() {
    fds_->assign(o_.size, -1);
    int flags = fcntl(listenFd_, F_GETFL, 0);
    if (flags < 0 || fcntl(listenFd_, F_SETFL, flags | O_NONBLOCK) != 0) return sysError("O_NONBLOCK on listener");
    for (int peer = 0; peer < o_.rank; ++peer) {
      if (skipped(peer)) continue;
      Link l;
      l.outgoing = true;
      l.peer = peer;
      l.remote = o_.peers[peer].host + ":" + std::to_string(o_.peers[peer].port);
      HORA_RETURN_IF_ERROR(resolve(o_.peers[peer].host, o_.peers[peer].port, &l.address));
      links_.push_back(std::move(l));
    }
    for (Link& l : links_) dial(l);
    Status st = loop();
    for (Link& l : links_) {
      if (st.isOk() && l.pendingIncoming()) drop(l, "still unauthenticated when the mesh was complete");
      l.closeSocket();
    }
    if (drops_ > kLoggedDrops) HORA_WARN("dropped %d data-plane connections in all while connecting the mesh", drops_);
    if (!st.isOk()) {
      for (int& f : *fds_) {
        if (f >= 0) close(f);
        f = -1;
      }
    }
    return st;
  }

 private:
  Status loop() {
    std::vector<pollfd> pfds;
    while (!complete()) {
      if (!fatal_.isOk()) return fatal_;
      if (o_.aborted != nullptr && o_.aborted->load(std::memory_order_acquire)) {
        return Status(Code::kPeerLost, "connecting to the peers was aborted");
      }
      if (deadline_.expired()) return timeoutStatus();
      Clock::time_point now = Clock::now();
      Clock::time_point wake = now + std::chrono::milliseconds(deadline_.remainingMs(1000));
      pfds.clear();
      pfds.push_back({now < listenPausedUntil_ ? -1 : listenFd_, POLLIN, 0});
      for (const Link& l : links_) {
        pfds.push_back({l.fd, l.pollEvents(), 0});
        if (l.openIncoming()) wake = std::min(wake, l.expires);
        if (l.step == Link::Step::kRetryWait) wake = std::min(wake, l.retryAt);
        if (l.step == Link::Step::kConnecting) wake = std::min(wake, l.redialAt);
      }
      if (now < listenPausedUntil_) wake = std::min(wake, listenPausedUntil_);
      auto waitMs = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
      int r = poll(pfds.data(), pfds.size(), waitMs < 0 ? 0 : static_cast<int>(waitMs) + 1);
      if (r < 0 && errno != EINTR) return sysError("poll");
      // Accepting appends to links_, so the links polled this round are serviced first.
      const size_t polled = links_.size();
      for (size_t i = 0; i < polled && fatal_.isOk(); ++i) {
        if (pfds[i + 1].revents != 0 && pfds[i + 1].fd >= 0) advance(links_[i]);
      }
      if (fatal_.isOk() && pfds[0].fd >= 0 && (pfds[0].revents & POLLIN)) acceptAll();
      now = Clock::now();
      for (Link& l : links_) {
        if (!fatal_.isOk()) break;
        if (l.openIncoming() && now >= l.expires) expire(l);
        if (l.step == Link::Step::kRetryWait && now >= l.retryAt) dial(l);
        if (l.step == Link::Step::kConnecting && now >= l.redialAt) redial(l);
      }
      links_.erase(std::remove_if(links_.begin(), links_.end(), [](const Link& l) { return l.step == Link::Step::kDone; }),
                   links_.end());
    }
    return fatal_;
  }

  bool complete() const {
    for (int p = 0; p < o_.size; ++p) {
      if (p != o_.rank && !skipped(p) && (*fds_)[p] < 0) return false;
    }
    return true;
  }

  bool skipped(int peer) const { return peer < static_cast<int>(o_.skip.size()) && o_.skip[peer]; }

  void fail(Status st) {
    if (fatal_.isOk()) fatal_ = std::move(st);
  }

  // Logs why an incoming connection is dropped; closes it unless a rejection is still to be sent.
  void warnDrop(const Link& l, const std::string& why) {
    ++drops_;
    if (drops_ <= kLoggedDrops) {
      HORA_WARN("dropped data-plane connection from %s: %s", l.remote.c_str(), why.c_str());
    } else if (drops_ == kLoggedDrops + 1) {
      HORA_WARN("more data-plane connections are being dropped; they are counted, not logged one by one");
    }
  }
  void drop(Link& l, const std::string& why) {
    warnDrop(l, why);
    l.closeSocket();
    l.step = Link::Step::kDone;
  }

  void expire(Link& l) {
    const std::string limit = std::to_string(kHandshakeMs / 1000) + " s";
    switch (l.step) {
      case Link::Step::kSendRejection:  // logged when it was rejected
        l.closeSocket();
        l.step = Link::Step::kDone;
        return;
      case Link::Step::kSendAnswer:
        return drop(l, "rank " + std::to_string(l.peer) + " authenticated but did not take its answer within " + limit);
      default:
        return drop(l, "no complete handshake within " + limit + " (received " +
                           std::to_string(l.step == Link::Step::kAwaitHello ? l.inDone : 0) + " of " +
                           std::to_string(handshake::kHelloBytes) + " bytes of a Hello)");
    }
  }

  // ---- outgoing ----

  void dial(Link& l) {
    l.closeSocket();
    ++l.attempts;
    l.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l.fd < 0) return fail(sysError("socket"));
    if (addressOfThisHost(l.address)) setCongestion(l.fd, kReno);  // see configureForDataPlane
    if (::connect(l.fd, reinterpret_cast<const sockaddr*>(&l.address), sizeof(l.address)) == 0) {
      l.step = Link::Step::kAwaitChallenge;
      l.expect(handshake::kChallengeBytes);
      return;
    }
    if (errno == EINPROGRESS || errno == EINTR) {
      l.step = Link::Step::kConnecting;
      const int waitMs = std::min(kMaxConnectWaitMs, kFirstConnectWaitMs << std::min(l.unanswered, 8));
      l.redialAt = Clock::now() + std::chrono::milliseconds(waitMs);
      return;
    }
    retryLater(l, strerror(errno));
  }

  // The SYN had no answer in time: the peer's accept queue may have been full (its kernel drops SYNs
  // then), or the packet was lost. A new SYN now, instead of the kernel's retry a second or more later.
  void redial(Link& l) {
    ++l.unanswered;
    l.lastError = "no answer to the connection request";
    HORA_TRACE("connecting to rank %d at %s: no answer; dialing again", l.peer, l.remote.c_str());
    dial(l);
  }

  // Anything short of an answer (refused, reset, closed by the peer's cap or handshake deadline) is
  // worth another try until the deadline; only what the peer says in an answer is final.
  void retryLater(Link& l, const std::string& why) {
    l.closeSocket();
    l.lastError = why;
    l.step = Link::Step::kRetryWait;
    // The peer listens before it registers, so refusals are rare and short-lived; back off gently.
    l.retryAt = Clock::now() + std::chrono::milliseconds(l.attempts < 10 ? 10 : 100);
    HORA_TRACE("connecting to rank %d at %s: %s; trying again", l.peer, l.remote.c_str(), why.c_str());
  }

  Status authError(const Link& l, const std::string& what) const {
    return Status(Code::kAuth,
                  "rank " + std::to_string(o_.rank) + " could not authenticate its data-plane connection to rank " +
                      std::to_string(l.peer) + " at " + l.remote + ": " + what,
                  l.peer);
  }

  void advanceOutgoing(Link& l) {
    std::string why;
    for (;;) {
      switch (l.step) {
        case Link::Step::kConnecting: {
          int err = 0;
          socklen_t len = sizeof(err);
          if (getsockopt(l.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
          if (err == EINPROGRESS || err == EALREADY) return;
          if (err != 0) return retryLater(l, strerror(err));
          l.unanswered = 0;
          l.step = Link::Step::kAwaitChallenge;
          l.expect(handshake::kChallengeBytes);
          continue;
        }
        case Link::Step::kAwaitChallenge: {
          Io io = pumpIn(l, &why);
          if (io == Io::kWaiting) return;
          if (io == Io::kFailed) return retryLater(l, "connection " + why + " before the challenge");
          Challenge c = handshake::decodeChallenge(l.in);
          if (c.magic != handshake::kMagic || c.version != handshake::kVersion) {
            return fail(authError(l, "what listens there is not a hora rank speaking data-plane protocol " +
                                         std::to_string(handshake::kVersion) + " (magic " + hex64(c.magic) +
                                         ", version " + std::to_string(c.version) + ")"));
          }
          if (c.rank != l.peer) {
            return fail(authError(l, "the process there is rank " + std::to_string(c.rank) +
                                         ", not the rank the peer table puts there"));
          }
          l.peerNonce = c.nonce;
          Status st = handshake::randomNonce(&l.myNonce);
          if (!st.isOk()) return fail(st);
          Hello h;
          h.rank = o_.rank;
          h.size = o_.size;
          h.jobTag = o_.jobTag;
          h.nonce = l.myNonce;
          h.proof = handshake::connectProof(o_.secret, transcript(l.peerNonce, l.myNonce, o_.rank, l.peer));
          handshake::encode(h, l.out);
          l.outLen = handshake::kHelloBytes;
          l.outDone = 0;
          l.step = Link::Step::kSendHello;
          continue;
        }
        case Link::Step::kSendHello: {
          Io io = pumpOut(l, &why);
          if (io == Io::kWaiting) return;
          if (io == Io::kFailed) return retryLater(l, why);
          l.step = Link::Step::kAwaitAnswer;
          l.expect(handshake::kAnswerBytes);
          continue;
        }
        case Link::Step::kAwaitAnswer: {
          Io io = pumpIn(l, &why);
          if (io == Io::kWaiting) return;
          if (io == Io::kFailed) return retryLater(l, "connection " + why + " before the answer to the Hello");
          return judgeAnswer(l);
        }
        default:
          return;
      }
    }
  }

  void judgeAnswer(Link& l) {
    Answer a = handshake::decodeAnswer(l.in);
    if (a.magic != handshake::kMagic || a.version != handshake::kVersion || a.rank != l.peer) {
      return fail(authError(l, "the answer to its Hello is malformed"));
    }
    switch (static_cast<Verdict>(a.verdict)) {
      case Verdict::kAccepted:
        break;
      case Verdict::kBadProof:
        return fail(authError(l, "rank " + std::to_string(l.peer) + " rejected the proof of rank " +
                                     std::to_string(o_.rank) +
                                     ": the two ranks have different secrets. Every rank of a job must get the "
                                     "same HORA_SECRET"));
      case Verdict::kOtherJob:
        return fail(authError(l, "the rank there belongs to another job (a different job id or world size)"));
      case Verdict::kBadRank:
        return fail(authError(l, "rank " + std::to_string(l.peer) + " does not expect a connection from rank " +
                                     std::to_string(o_.rank)));
      case Verdict::kDuplicate:
        return fail(authError(l, "rank " + std::to_string(l.peer) + " already has a connection from rank " +
                                     std::to_string(o_.rank)));
      default:
        return fail(authError(l, "its answer carries an unknown verdict " + std::to_string(a.verdict)));
    }
    Sha256Digest expected = handshake::acceptProof(o_.secret, transcript(l.peerNonce, l.myNonce, o_.rank, l.peer));
    if (!constantTimeEqual(expected.data(), a.proof.data(), kSha256Bytes)) {
      return fail(authError(l, "it accepted this rank but could not prove that it holds the job's secret"));
    }
    (*fds_)[l.peer] = l.fd;
    l.fd = -1;
    l.step = Link::Step::kDone;
    HORA_TRACE("connected to rank %d at %s", l.peer, l.remote.c_str());
  }

  // ---- incoming ----

  void acceptAll() {
    for (int round = 0; round < 4 * kMaxPendingAccepts; ++round) {
      sockaddr_in sa{};
      socklen_t len = sizeof(sa);
      int fd = accept4(listenFd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: the listener would stay readable and spin the loop, so look away a while.
          HORA_WARN("cannot accept data-plane connections for now: %s", strerror(errno));
          listenPausedUntil_ = Clock::now() + std::chrono::milliseconds(100);
        }
        return;  // EAGAIN: none left; anything else concerns that one connection only
      }
      int pending = 0;
      Link* oldest = nullptr;
      for (Link& l : links_) {
        if (!l.pendingIncoming()) continue;
        ++pending;
        if (oldest == nullptr || l.acceptedAt < oldest->acceptedAt) oldest = &l;
      }
      if (pending >= kMaxPendingAccepts && oldest != nullptr) {
        drop(*oldest, "more than " + std::to_string(kMaxPendingAccepts) +
                          " unauthenticated connections at once; the oldest makes room");
      }
      Link l;
      l.fd = fd;
      l.remote = describeAddress(sa);
      l.acceptedAt = Clock::now();
      l.expires = l.acceptedAt + std::chrono::milliseconds(deadline_.remainingMs(kHandshakeMs));
      Status st = handshake::randomNonce(&l.myNonce);
      if (!st.isOk()) {
        close(fd);
        return fail(st);
      }
      Challenge c;
      c.rank = o_.rank;
      c.nonce = l.myNonce;
      handshake::encode(c, l.out);
      l.outLen = handshake::kChallengeBytes;
      l.step = Link::Step::kSendChallenge;
      links_.push_back(std::move(l));
      advance(links_.back());
    }
  }

  // Answers a well-formed Hello with a verdict, then closes: a real rank with another secret learns why.
  void reject(Link& l, Verdict verdict, const std::string& why) {
    warnDrop(l, why);
    Answer a;
    a.verdict = static_cast<uint16_t>(verdict);
    a.rank = o_.rank;
    handshake::encode(a, l.out);
    l.outLen = handshake::kAnswerBytes;
    l.outDone = 0;
    l.step = Link::Step::kSendRejection;
  }

  void judgeHello(Link& l) {
    Hello h = handshake::decodeHello(l.in);
    if (h.magic != handshake::kMagic) return drop(l, "not a hora data-plane Hello (wrong magic " + hex64(h.magic) + ")");
    if (h.version != handshake::kVersion) {
      return drop(l, "speaks data-plane protocol version " + std::to_string(h.version) + "; this rank speaks " +
                         std::to_string(handshake::kVersion));
    }
    if (h.size != o_.size || h.jobTag != o_.jobTag) {
      return reject(l, Verdict::kOtherJob,
                    "a Hello for another job (world size " + std::to_string(h.size) + ", job tag " + hex64(h.jobTag) +
                        "; this job has " + std::to_string(o_.size) + " ranks, tag " + hex64(o_.jobTag) + ")");
    }
    if (h.rank <= o_.rank || h.rank >= o_.size) {
      return reject(l, Verdict::kBadRank,
                    "claims rank " + std::to_string(h.rank) + ", which does not connect to rank " +
                        std::to_string(o_.rank));
    }
    const Transcript t = transcript(l.myNonce, h.nonce, h.rank, o_.rank);
    const Sha256Digest expected = handshake::connectProof(o_.secret, t);
    if (!constantTimeEqual(expected.data(), h.proof.data(), kSha256Bytes)) {
      rejectedClaims_[h.rank] = l.remote;
      return reject(l, Verdict::kBadProof,
                    "claims rank " + std::to_string(h.rank) +
                        " but its proof does not verify (not a rank of this job, or a rank with a different "
                        "HORA_SECRET)");
    }
    if ((*fds_)[h.rank] >= 0 || claimed(h.rank) || skipped(h.rank)) {
      return reject(l, Verdict::kDuplicate,
                    "a second authenticated connection from rank " + std::to_string(h.rank));
    }
    l.peer = h.rank;
    Answer a;
    a.verdict = static_cast<uint16_t>(Verdict::kAccepted);
    a.rank = o_.rank;
    a.proof = handshake::acceptProof(o_.secret, t);
    handshake::encode(a, l.out);
    l.outLen = handshake::kAnswerBytes;
    l.outDone = 0;
    l.step = Link::Step::kSendAnswer;
  }

  bool claimed(int rank) const {
    for (const Link& l : links_) {
      if (!l.outgoing && l.step == Link::Step::kSendAnswer && l.peer == rank) return true;
    }
    return false;
  }

  void advanceIncoming(Link& l) {
    std::string why;
    for (;;) {
      switch (l.step) {
        case Link::Step::kSendChallenge: {
          Io io = pumpOut(l, &why);
          if (io == Io::kWaiting) return;
          if (io == Io::kFailed) return drop(l, "could not send the challenge: " + why);
          l.step = Link::Step::kAwaitHello;
          l.expect(handshake::kHelloBytes);
          continue;
        }
        case Link::Step::kAwaitHello: {
          Io io = pumpIn(l, &why);
          if (io == Io::kWaiting) return;
          if (io == Io::kFailed) return drop(l, "connection " + why + " before a complete Hello");
          judgeHello(l);
          continue;
        }
        case Link::Step::kSendAnswer: {
          Io io = pumpOut(l, &why);
          if (io == Io::kWaiting) return;
          if (io == Io::kFailed) return drop(l, "rank " + std::to_string(l.peer) + " authenticated, but answering it failed: " + why);
          (*fds_)[l.peer] = l.fd;
          l.fd = -1;
          l.step = Link::Step::kDone;
          HORA_TRACE("rank %d connected from %s", l.peer, l.remote.c_str());
          return;
        }
        case Link::Step::kSendRejection: {
          if (pumpOut(l, &why) == Io::kWaiting) return;
          l.closeSocket();
          l.step = Link::Step::kDone;
          return;
        }
        default:
          return;
      }
    }
  }

  void advance(Link& l) {
    if (l.outgoing) advanceOutgoing(l);
    else advanceIncoming(l);
  }

  Transcript transcript(const handshake::Nonce& acceptorNonce, const handshake::Nonce& connectorNonce,
                        int connectorRank, int acceptorRank) const {
    Transcript t;
    t.acceptorNonce = acceptorNonce;
    t.connectorNonce = connectorNonce;
    t.connectorRank = connectorRank;
    t.acceptorRank = acceptorRank;
    t.size = o_.size;
    t.jobTag = o_.jobTag;
    return t;
  }

  Status timeoutStatus() const {
    for (const Link& l : links_) {
      if (!l.outgoing || l.step == Link::Step::kDone) continue;
      if (l.step == Link::Step::kRetryWait || l.step == Link::Step::kConnecting) {
        return Status(Code::kPeerLost,
                      "rank " + std::to_string(o_.rank) + " cannot connect to rank " + std::to_string(l.peer) + " at " +
                          l.remote + " (" + (l.lastError.empty() ? "no answer" : l.lastError) + ")",
                      l.peer);
      }
      return Status(Code::kTimeout,
                    "rank " + std::to_string(o_.rank) + " timed out in the data-plane handshake with rank " +
                        std::to_string(l.peer) + " at " + l.remote +
                        (l.lastError.empty() ? std::string() : " (earlier attempt: " + l.lastError + ")"),
                    l.peer);
    }
    std::string missing, rejected;
    int firstMissing = -1;
    for (int p = o_.rank + 1; p < o_.size; ++p) {
      if ((*fds_)[p] >= 0 || skipped(p)) continue;
      if (firstMissing < 0) firstMissing = p;
      missing += (missing.empty() ? "" : ", ") + std::to_string(p);
      if (!rejectedClaims_[p].empty()) {
        rejected += (rejected.empty() ? "" : ", ") + std::string("rank ") + std::to_string(p) + " from " + rejectedClaims_[p];
      }
    }
    std::string msg = "rank " + std::to_string(o_.rank) + " timed out waiting for ranks " + missing + " to connect";
    if (!rejected.empty()) {
      msg += "; connections claiming to be " + rejected +
             " were rejected because their proof did not verify: do all ranks have the same HORA_SECRET?";
    }
    return Status(Code::kTimeout, msg, firstMissing);
  }

  int listenFd_;
  const MeshOptions& o_;
  const Deadline& deadline_;
  std::vector<int>* fds_;
  std::vector<Link> links_;
  std::vector<std::string> rejectedClaims_;  // by claimed rank: the last address whose proof failed
  Clock::time_point listenPausedUntil_{};
  Status fatal_;
  int drops_ = 0;
};

}  // namespace

Status connectMesh(int listenFd, const MeshOptions& options, const Deadline& deadline, std::vector<int>* fds) {
  if (options.rank < 0 || options.rank >= options.size || static_cast<int>(options.peers.size()) != options.size) {
    return Status(Code::kInvalidArgument, "connectMesh: rank " + std::to_string(options.rank) + ", world of " +
                                              std::to_string(options.size) + ", " +
                                              std::to_string(options.peers.size()) + " peer addresses");
  }
  return MeshBuilder(listenFd, options, deadline, fds).run();
}

}  // namespace tcp
}  // namespace hora
