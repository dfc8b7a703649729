#include "transport/tcp/connect.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/sha256.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/mesh_link.h"
#include "transport/tcp/socket.h"

namespace hora {
namespace tcp {
namespace {

using handshake::Answer;
using handshake::Challenge;
using handshake::Hello;
using handshake::Transcript;
using handshake::Verdict;

// Dropped connections logged one by one; later ones are counted and summed up once.
constexpr int kLoggedDrops = 32;

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

// Drives every handshake of one rank's mesh from a single poll() loop (see connect.h).
class MeshBuilder {
 public:
  MeshBuilder(int listenFd, const MeshOptions& o, const Deadline& deadline, std::vector<int>* fds)
      : listenFd_(listenFd), o_(o), deadline_(deadline), fds_(fds), rejectedClaims_(o.size) {}

  Status build() {
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
    preferRenoToThisHost(l.fd, l.address);
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
  return MeshBuilder(listenFd, options, deadline, fds).build();
}

}  // namespace tcp
}  // namespace hora
