#include "transport/context.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/hash.h"
#include "common/log.h"
#include "reduce/reduce.h"
#include "transport/liveness.h"
#include "transport/shm/pair.h"
#include "transport/shm/segment.h"
#include "transport/tcp/connect.h"
#include "transport/tcp/pair.h"
#include "transport/wait.h"

namespace hora {
namespace {

using waits::cpuRelax;

std::string segmentName(const std::string& jobId, int rank) {
  std::string safe;
  for (char c : jobId) safe += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return "/hora-" + safe + "-" + std::to_string(rank);
}

// Sends one byte to every peer, then receives one from each and runs afterEach(peer): a barrier among
// the ranks that share memory, over the connections made at init.
template <typename AfterEach>
Status syncLocalPeers(const std::vector<int>& fds, const std::vector<int>& peers, const Deadline& deadline,
                      AfterEach&& afterEach) {
  const char token = 'S';
  for (int p : peers) HORA_RETURN_IF_ERROR(tcp::sendAll(fds[p], &token, 1, deadline, p));
  for (int p : peers) {
    char got = 0;
    HORA_RETURN_IF_ERROR(tcp::recvAll(fds[p], &got, 1, deadline, p));
    HORA_RETURN_IF_ERROR(afterEach(p));
  }
  return Status::ok();
}

}  // namespace

Context::Context(int rank, int size, int64_t timeoutMs)
    : rank_(rank), size_(size), timeoutMs_(timeoutMs), deadline_(timeoutMs) {
  collectiveWaker_.open();
  idleWaker_.open();
  idleFds_.resize(size + 1);
  nextMessageLook_.resize(size);
  pairs_.resize(size);
  p2pChannels_.resize(size);
  pairView_.resize(size);
}

Context::Context(Context& world, const std::vector<int>& members)
    : base_(&world), members_(members), rank_(-1), size_(static_cast<int>(members.size())),
      timeoutMs_(world.timeoutMs_), deadline_(world.timeoutMs_) {
  std::vector<std::string> hostIds;
  const Topology& wt = world.topology();
  for (int r = 0; r < size_; ++r) {
    const int m = members[r];
    if (m == world.rank()) rank_ = r;
    pairView_.push_back(world.pair(m));
    hostIds.push_back(m < static_cast<int>(wt.hostOf.size()) ? std::to_string(wt.hostOf[m]) : "0");
  }
  topology_ = Topology::fromHostIds(hostIds);
}

Context::~Context() {
  pairs_.clear();
  p2pChannels_.clear();
  segments_.clear();
  if (listenFd_ >= 0) close(listenFd_);
}

Status Context::listen(const std::string& bindHost, int* port) {
  // Connections queue here until connect() runs the handshakes: room for a burst of strangers and every
  // peer, so that the peers' SYNs are not dropped (tcp::kListenBacklog).
  HORA_RETURN_IF_ERROR(tcp::listenOn(bindHost, std::max(tcp::kListenBacklog, size_ + tcp::kMaxPendingAccepts), &listenFd_, port));
  HORA_INFO("data plane listening on %s:%d", bindHost.empty() ? "0.0.0.0" : bindHost.c_str(), *port);
  return Status::ok();
}

std::unique_ptr<KeptConnections> Context::keepConnections() {
  pairView_.assign(pairView_.size(), nullptr);
  return KeptConnections::take(&pairs_, &p2pChannels_, &segments_);
}

Status Context::takeOver(const std::vector<PeerInfo>& peers, const std::string& jobId, const std::string& secret,
                         KeptConnections* kept, const Deadline& deadline, std::vector<bool>* taken) {
  taken->assign(size_, false);
  std::vector<Pair*> toResync;
  for (int r = 0; r < size_; ++r) {
    const int old = peers[r].keptRank;
    if (r == rank_ || old < 0) continue;
    if (kept == nullptr || old >= static_cast<int>(kept->pairs.size()) || kept->pairs[old] == nullptr ||
        kept->p2pChannels[old] == nullptr) {
      return Status(Code::kInternal, "rank " + std::to_string(r) + " was to be reached over the connection to rank " +
                                         std::to_string(old) + " of the last world, which this process does not hold");
    }
    pairs_[r] = std::move(kept->pairs[old]);
    p2pChannels_[r] = std::move(kept->p2pChannels[old]);
    pairs_[r]->renumber(r);
    p2pChannels_[r]->renumber(r);
    pairView_[r] = pairs_[r].get();
    (*taken)[r] = true;
    toResync.push_back(pairs_[r].get());
    toResync.push_back(p2pChannels_[r].get());
  }
  if (kept != nullptr) {
    // A segment stays mapped only while a pair taken over has a ring in it; the rest go with the pairs
    // not taken (their connections close, and peers still holding them see a hang-up).
    for (auto& segment : kept->segments) {
      bool used = false;
      for (int r = 0; r < size_ && !used; ++r) {
        if (!(*taken)[r]) continue;
        for (Pair* p : {pairs_[r].get(), p2pChannels_[r].get()}) {
          auto* ring = dynamic_cast<shm::ShmPair*>(p);
          used |= ring != nullptr && ring->usesMemory(segment->data(), segment->bytes());
        }
      }
      if (used) segments_.push_back(std::move(segment));
    }
    kept->pairs.clear();
    kept->p2pChannels.clear();
    kept->segments.clear();
  }
  if (toResync.empty()) return Status::ok();
  HORA_RETURN_IF_ERROR(resyncPairs(toResync, resyncMarker(secret, jobId), deadline, &aborted_));
  return Status::ok();
}

Status Context::connect(const std::vector<PeerInfo>& peers, const std::string& jobId, const std::string& secret,
                        TransportChoice transport, KeptConnections* kept) {
  if (static_cast<int>(peers.size()) != size_) {
    return Status(Code::kInvalidArgument, "peer table has " + std::to_string(peers.size()) +
                                              " entries for a world of " + std::to_string(size_));
  }
  Deadline deadline(timeoutMs_);
  const int64_t started = monotonicNanos();
  std::vector<std::string> hostIds;
  for (const PeerInfo& p : peers) hostIds.push_back(p.hostId);
  topology_ = Topology::fromHostIds(hostIds);
  // Pairs taken over from the last world come first: once resynchronized, they carry the handshakes below.
  std::vector<bool> taken;
  Status placed = takeOver(peers, jobId, secret, kept, deadline, &taken);
  if (!placed.isOk()) {
    close(listenFd_);
    listenFd_ = -1;
    return placed;
  }
  tcp::MeshOptions mesh;
  mesh.skip = taken;
  mesh.rank = rank_;
  mesh.size = size_;
  mesh.peers.resize(size_);
  for (int r = 0; r < size_; ++r) mesh.peers[r] = {peers[r].addr, peers[r].port};
  mesh.jobTag = fnv1a64(jobId);
  mesh.secret = secret;
  mesh.aborted = &aborted_;
  std::vector<int> fds;
  HORA_RETURN_IF_ERROR(tcp::connectMesh(listenFd_, mesh, deadline, &fds));
  // A second mesh for point-to-point messages (engine/p2p.h). Every rank must be done with the first
  // before anyone dials the second, or a first-round acceptor would take a second-round connection for
  // a duplicate; a barrier over the first mesh sees to that. The second round's job tag differs, so the
  // two can never be confused.
  std::vector<int> allPeers;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) allPeers.push_back(r);
  }
  std::vector<int> p2pFds;
  std::vector<int> barrierFds = fds;
  for (int r = 0; r < size_; ++r) {
    if (taken[r]) barrierFds[r] = pairs_[r]->livenessFd();
  }
  Status meshed = syncLocalPeers(barrierFds, allPeers, deadline, [](int) { return Status::ok(); });
  if (meshed.isOk()) {
    mesh.jobTag = fnv1a64(jobId + "/messages");
    meshed = tcp::connectMesh(listenFd_, mesh, deadline, &p2pFds);
  }
  // In an elastic world every new TCP pair gets a third connection, idle but for notices (notifyPeers()):
  // after another barrier, for the same reason as above.
  std::vector<int> noticeFds(size_, -1);
  if (meshed.isOk() && elastic_) {
    tcp::MeshOptions notices = mesh;
    notices.jobTag = fnv1a64(jobId + "/notices");
    for (int r = 0; r < size_; ++r) {
      const bool sharesMemory = transport == TransportChoice::kAuto && peers[r].hostId == peers[rank_].hostId;
      notices.skip[r] = taken[r] || sharesMemory;
    }
    meshed = syncLocalPeers(barrierFds, allPeers, deadline, [](int) { return Status::ok(); });
    if (meshed.isOk()) meshed = tcp::connectMesh(listenFd_, notices, deadline, &noticeFds);
  }
  close(listenFd_);
  listenFd_ = -1;
  // Closes the connections made so far (those taken over stay with their pairs).
  auto fail = [&](Status st) {
    for (const std::vector<int>* set : {&fds, &p2pFds, &noticeFds}) {
      for (int fd : *set) {
        if (fd >= 0) close(fd);
      }
    }
    return st;
  };
  if (!meshed.isOk()) return fail(meshed);

  std::vector<int> shmPeers;
  int localSize = 0;
  for (int r = 0; r < size_; ++r) {
    if (peers[r].hostId != peers[rank_].hostId) continue;
    ++localSize;
    if (r != rank_ && !taken[r] && transport == TransportChoice::kAuto) shmPeers.push_back(r);
  }

  // A segment holds two rings per local rank: the collectives' first, then the messages' (engine/p2p.h).
  std::vector<shm::Ring*> peerRingsForMe(size_, nullptr);
  shm::Ring* myRings = nullptr;
  if (!shmPeers.empty()) {
    auto mine = std::make_unique<shm::Segment>();
    Status st = shm::Segment::create(segmentName(jobId, rank_), shm::kRingBytes * 2 * localSize, mine.get());
    if (!st.isOk()) return fail(st);
    myRings = static_cast<shm::Ring*>(mine->data());
    for (int i = 0; i < 2 * localSize; ++i) {
      new (&myRings[i].control.head) std::atomic<uint64_t>(0);
      new (&myRings[i].control.tail) std::atomic<uint64_t>(0);
    }
    // Two rounds over the TCP connections: "my segment exists", then "I have mapped yours".
    st = syncLocalPeers(fds, shmPeers, deadline, [&](int p) {
      auto theirs = std::make_unique<shm::Segment>();
      HORA_RETURN_IF_ERROR(shm::Segment::open(segmentName(jobId, p), shm::kRingBytes * 2 * localSize, theirs.get()));
      peerRingsForMe[p] = static_cast<shm::Ring*>(theirs->data()) + peers[rank_].localRank;
      segments_.push_back(std::move(theirs));
      return Status::ok();
    });
    if (st.isOk()) st = syncLocalPeers(fds, shmPeers, deadline, [](int) { return Status::ok(); });
    if (!st.isOk()) return fail(st);
    mine->unlink();
    segments_.push_back(std::move(mine));
  }

  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || taken[r]) continue;
    Status st = tcp::configureForDataPlane(fds[r]);
    if (st.isOk()) st = tcp::configureForDataPlane(p2pFds[r]);
    if (st.isOk() && noticeFds[r] >= 0) st = tcp::configureForDataPlane(noticeFds[r]);
    if (!st.isOk()) return fail(st);
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || taken[r]) continue;
    if (peerRingsForMe[r] != nullptr) {
      pairs_[r] = std::make_unique<shm::ShmPair>(r, peerRingsForMe[r], myRings + peers[r].localRank, fds[r]);
      p2pChannels_[r] = std::make_unique<shm::ShmPair>(r, peerRingsForMe[r] + localSize,
                                                       myRings + localSize + peers[r].localRank, p2pFds[r]);
    } else {
      auto pair = std::make_unique<tcp::TcpPair>(r, fds[r]);
      pair->adoptNoticeSocket(noticeFds[r]);
      pairs_[r] = std::move(pair);
      p2pChannels_[r] = std::make_unique<tcp::TcpPair>(r, p2pFds[r]);
    }
    pairView_[r] = pairs_[r].get();
    fds[r] = -1;
    p2pFds[r] = -1;
    noticeFds[r] = -1;
  }
  const unsigned cores = std::thread::hardware_concurrency();
  oversubscribed_ = cores > 0 && static_cast<unsigned>(localSize) > cores;
  int tookOver = 0;
  int local = 0;
  for (int r = 0; r < size_; ++r) {
    tookOver += taken[r] ? 1 : 0;
    local += usesSharedMemory(r) ? 1 : 0;
  }
  HORA_INFO("connected to %d peers in %.1f ms (%d over shared memory; %d connected anew, %d taken over from the last world)%s",
            size_ - 1, (monotonicNanos() - started) / 1e6, local, size_ - 1 - tookOver, tookOver,
            oversubscribed_ ? "; more local ranks than cores: waits yield early" : "");
  return Status::ok();
}

void Context::abort(const Status& reason) {
  if (base_ != nullptr) return base_->abort(reason);
  {
    std::lock_guard<std::mutex> lock(abortMutex_);
    if (aborted_.load()) return;
    abortReason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  wake();
}

void Context::wake() {
  if (base_ != nullptr) return base_->wake();
  idleWaker_.wake();
  // Whoever wakes changed first what the waits look at (a message posted, the abort flag); the collective's
  // wait says it listens before it looks at those (waitForProgress). With a full fence on both sides, either
  // this sees it listening and writes, or its look sees the change.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (collectiveListening_.load(std::memory_order_relaxed)) collectiveWaker_.wake();
}

void Context::waitForBackground(int64_t idleMicros) {
  if (base_ != nullptr) return base_->waitForBackground(idleMicros);
  const waits::WaitPolicy& policy = waits::kMessageWait;
  if (spinRound(policy, idleMicros)) return;
  pollfd* fds = idleFds_.data();
  fds[0] = {idleWaker_.fd(), POLLIN, 0};
  bool onSharedMemory = false;
  int n = 0;
  if (background_ != nullptr) {
    n = background_->watch(fds + 1, static_cast<int>(idleFds_.size()) - 1, &onSharedMemory);
    if (n < 0) {
      // Another thread is moving the messages.
      sched_yield();
      return;
    }
  }
  sleepWhileIdle(policy, idleMicros, onSharedMemory, fds, n + 1, policy.pollCapMs, [&](int r) {
    if (r > 0 && (fds[0].revents & POLLIN)) idleWaker_.drain();
    return Status::ok();
  });
}

void Context::sleepUntilWoken(int ms) {
  if (base_ != nullptr) return base_->sleepUntilWoken(ms);
  pollfd pf{idleWaker_.fd(), POLLIN, 0};
  if (poll(&pf, 1, ms) > 0) idleWaker_.drain();
}

void Context::hangUp() {
  if (base_ != nullptr) return base_->hangUp();
  for (auto& p : pairs_) {
    if (p != nullptr) shutdown(p->livenessFd(), SHUT_RDWR);
  }
  for (auto& p : p2pChannels_) {
    if (p != nullptr) shutdown(p->livenessFd(), SHUT_RDWR);
  }
}

void Context::notifyPeers() {
  if (base_ != nullptr) return base_->notifyPeers();
  const char notice = '!';
  for (auto& p : pairs_) {
    if (p == nullptr) continue;
    // The notice socket is idle but for notices: there is room for one.
    if (p->noticeFd() < 0 || send(p->noticeFd(), &notice, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
      shutdown(p->livenessFd(), SHUT_RDWR);
    }
  }
}

Status Context::abortReason() const {
  if (base_ != nullptr) return base_->abortReason();
  std::lock_guard<std::mutex> lock(abortMutex_);
  return abortReason_;
}

Status Context::sendRecv(int to, const void* sendData, size_t sendLen, int from, void* recvData, size_t recvLen) {
  SendOp s{pair(to), static_cast<const uint8_t*>(sendData), sendLen};
  RecvOp r{pair(from), static_cast<uint8_t*>(recvData), recvLen};
  return progress(&s, 1, &r, 1);
}

Status Context::progress(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) {
  if (base_ != nullptr) return base_->progress(sends, numSends, recvs, numRecvs);
  int idle = 0;
  int partialWakes = 0;  // waits in poll() after which bytes moved but some were still to come
  polledLast_ = false;
  Clock::time_point idleSince;
  for (;;) {
    bool moved = false;
    bool pending = false;
    for (int i = 0; i < numSends; ++i) {
      SendOp& s = sends[i];
      if (s.done == s.len) continue;
      // Sends to one peer share one stream: a later one waits until the earlier ones are through.
      bool queuedBehind = false;
      for (int j = 0; j < i; ++j) queuedBehind |= sends[j].pair == s.pair && sends[j].done < sends[j].len;
      if (queuedBehind) {
        pending = true;
        continue;
      }
      size_t taken = 0;
      HORA_RETURN_IF_ERROR(s.pair->trySend(s.data + s.done, s.len - s.done, &taken));
      s.done += taken;
      moved |= taken > 0;
      pending |= s.done < s.len;
    }
    for (int i = 0; i < numRecvs; ++i) {
      RecvOp& r = recvs[i];
      if (r.done == r.len) continue;
      // Likewise receives from one peer: the bytes arrive in the order the peer queued its sends.
      bool queuedBehind = false;
      for (int j = 0; j < i; ++j) queuedBehind |= recvs[j].pair == r.pair && recvs[j].done < recvs[j].len;
      if (queuedBehind) {
        pending = true;
        continue;
      }
      if (!r.reduce) {
        size_t got = 0;
        HORA_RETURN_IF_ERROR(r.pair->tryRecvInto(r.dst + r.done, r.len - r.done, &got));
        r.done += got;
        moved |= got > 0;
      } else {
        const size_t elem = dtypeSize(r.dtype);
        for (;;) {
          const uint8_t* src = nullptr;
          size_t avail = 0;
          HORA_RETURN_IF_ERROR(r.pair->peek(r.len - r.done, &src, &avail));
          size_t n = avail - avail % elem;
          if (n == 0) break;
          if (reinterpret_cast<uintptr_t>(src) % elem != 0) {
            // A read-ahead buffer can hold a message at any byte offset; the kernels want aligned elements.
            alignas(64) static thread_local uint8_t aligned[16384];
            n = n < sizeof(aligned) ? n : sizeof(aligned);
            memcpy(aligned, src, n);
            src = aligned;
          }
          if (r.scaled == nullptr) {
            timedReduce([&] { reduceInto(r.op, r.dtype, r.dst + r.done, src, n / elem); });
          } else {
            timedReduce([&] { reduceTwoScaled(r.op, r.dtype, r.dst + r.done, r.dst + r.done, src, n / elem, *r.scaled); });
          }
          r.pair->consume(n);
          r.done += n;
          moved = true;
          if (r.done == r.len) break;
        }
      }
      pending |= r.done < r.len;
    }
    if (!pending) {
      if (partialWakes == 0) bandwidthBound_ = false;
      return Status::ok();
    }
    if (moved) {
      if (polledLast_) {
        ++partialWakes;
        bandwidthBound_ = true;
      }
      polledLast_ = false;
      idle = 0;
      continue;
    }
    // Most waits of a small message end within a few rounds: the clock is first read at the sixteenth
    // (waitForProgress), except where the spin is short enough for those rounds to count.
    if (idle++ == 0) idleSince = oversubscribed_ ? Clock::now() : Clock::time_point();
    HORA_RETURN_IF_ERROR(waitForProgress(sends, numSends, recvs, numRecvs, idle, &idleSince));
  }
}

Status Context::waitForProgress(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs, int idleRounds,
                                 Clock::time_point* idleSince) {
  if (aborted_.load(std::memory_order_acquire)) return abortReason();
  // A link that trickles (a shaped or congested TCP path) wakes the wait many times per transfer, each
  // time for a part of it: spinning after every wake would keep a core busy for the whole transfer (a
  // quarter of one, measured with 100 Mbit/s links) that the training step's compute needs. Such waits
  // sleep in poll() at once; a wait that is answered quickly (small messages) still spins first.
  const bool trickling = bandwidthBound_ && onSocketsOnly(sends, numSends, recvs, numRecvs);
  const waits::WaitPolicy& policy = oversubscribed_ ? waits::kOversubscribedCollectiveWait : waits::kCollectiveWait;
  // Reading the clock costs little next to a round, but not nothing: spin a few rounds between reads.
  if (!trickling && idleRounds % waits::kCollectiveRoundsPerClockRead != 0) {
    cpuRelax();
    return Status::ok();
  }
  const Clock::time_point now = Clock::now();
  if (deadlinePending_) {
    deadline_ = Deadline(now, timeoutMs_);
    deadlinePending_ = false;
  }
  if (*idleSince == Clock::time_point()) *idleSince = now;
  const int64_t idleMicros = std::chrono::duration_cast<std::chrono::microseconds>(now - *idleSince).count();
  if (!trickling && spinRound(policy, idleMicros)) return Status::ok();
  if (deadline_.expired()) return timeoutStatus(sends, numSends, recvs, numRecvs);
  // From here wake() writes to this wait's eventfd (see wake()); what it wakes for is looked at after.
  collectiveListening_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  struct Listening {
    std::atomic<bool>& on;
    ~Listening() { on.store(false, std::memory_order_relaxed); }
  } listening{collectiveListening_};
  if (aborted_.load(std::memory_order_acquire)) return abortReason();
  const bool background = background_ != nullptr && background_->busy();
  if (background) background_->progressInBackground();

  // Gather what poll() can watch: TCP sockets with pending work, plus the wake-up eventfd. A pending send
  // also watches for the peer's hang-up: a peer that shut its side never reads again, and a full socket
  // buffer would otherwise wait for the deadline.
  pollfd fds[64];
  Pair* senders[64] = {};
  Pair* noticeOf[64] = {};  // a notice socket's pair
  int n = 0;
  auto watchNotices = [&](Pair* p) {
    if (p->noticeFd() >= 0 && n < 64) {
      noticeOf[n] = p;
      fds[n++] = {p->noticeFd(), POLLIN, 0};
    }
  };
  bool spinning = false;
  fds[n++] = {collectiveWaker_.fd(), POLLIN, 0};
  for (int i = 0; i < numSends && n < 64; ++i) {
    if (sends[i].done == sends[i].len) continue;
    int fd = sends[i].pair->pollFd();
    if (fd >= 0) {
      senders[n] = sends[i].pair;
      fds[n++] = {fd, POLLOUT | POLLRDHUP, 0};
      watchNotices(sends[i].pair);
    } else {
      spinning = true;
    }
  }
  for (int i = 0; i < numRecvs && n < 64; ++i) {
    if (recvs[i].done == recvs[i].len) continue;
    int fd = recvs[i].pair->pollFd();
    if (fd >= 0) {
      fds[n++] = {fd, POLLIN, 0};
      watchNotices(recvs[i].pair);
    } else {
      spinning = true;
    }
  }
  // A sleep in poll() also watches the background client's channels (after the collective's own, within
  // the same 64 entries), so bytes arriving for a message end it too. A wait that spins on shared memory
  // moves the messages at every round anyway.
  if (background && !spinning && n < 64) {
    bool messagesOnSharedMemory = false;
    const int more = background_->watch(fds + n, 64 - n, &messagesOnSharedMemory);
    if (more > 0) n += more;
  }
  auto looked = [&](int r) -> Status {
    if (r < 0 && errno != EINTR) return Status(Code::kInternal, std::string("poll failed: ") + strerror(errno));
    // Taken only by a wait that sleeps in poll(): one on shared memory looks without sleeping and leaves it
    // readable, so further wakes need no write until a sleep in poll() returns at once and takes it.
    if (r > 0 && !spinning && (fds[0].revents & POLLIN)) collectiveWaker_.drain();
    for (int i = 1; r > 0 && i < n; ++i) {
      if (noticeOf[i] != nullptr && fds[i].revents != 0) {
        // Only a notice counts: a peer that exited may have left its last bytes to read on the data socket,
        // which tells a loss by itself.
        if (noticeWaiting(fds[i].fd)) return peerFailedStatus(noticeOf[i]->peer(), rank_, Waiter::kCollective);
        continue;
      }
      if (senders[i] != nullptr && (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        return sendingPeerLostStatus(fds[i].fd, senders[i]->peer(), rank_);
      }
    }
    return Status::ok();
  };
  // Shared memory has no descriptor to sleep on: the wait yields for a while, then naps, looking at the
  // peers' sockets for a hang-up on the way.
  // A peer that wrote its last bytes into the ring and then exited is not lost: the hang-up can be seen
  // after the round that found the ring empty and before the bytes are read. So a hang-up counts only
  // when it is seen again after one more round over the rings.
  if (spinning) {
    Status alive = checkLiveness(sends, numSends, recvs, numRecvs);
    if (!alive.isOk() && !hangUpSeen_) {
      hangUpSeen_ = true;
      return Status::ok();
    }
    hangUpSeen_ = false;
    HORA_RETURN_IF_ERROR(alive);
  } else {
    polledLast_ = true;
  }
  // Messages in flight are moved between polls, so the poll is kept short while there are any.
  const int pollMs = spinning ? 0 : deadline_.remainingMs(background ? policy.pollCapWithMessagesMs : policy.pollCapMs);
  return sleepWhileIdle(policy, idleMicros, spinning, fds, n, pollMs, looked);
}

Status Context::checkMessagePeer(int peer, Clock::time_point now) {
  nextMessageLook_[peer] = now + std::chrono::milliseconds(waits::kMessageLivenessMs);
  // The peer's collective failed in an elastic world: it said so on the notice socket of its collectives'
  // pair (notifyPeers()).
  Pair* collectives = pair(peer);
  return checkPeer(*p2pChannel(peer), collectives != nullptr ? collectives->noticeFd() : -1, rank_, Waiter::kMessage);
}

bool Context::onSocketsOnly(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) const {
  for (int i = 0; i < numSends; ++i) {
    if (sends[i].done < sends[i].len && sends[i].pair->pollFd() < 0) return false;
  }
  for (int i = 0; i < numRecvs; ++i) {
    if (recvs[i].done < recvs[i].len && recvs[i].pair->pollFd() < 0) return false;
  }
  return true;
}

Status Context::checkLiveness(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) {
  // Shared memory only: a TCP pair's wait sees a hang-up in poll() on the socket itself.
  auto check = [&](Pair* p) -> Status {
    return p->pollFd() >= 0 ? Status::ok() : checkPeer(*p, p->noticeFd(), rank_, Waiter::kCollective);
  };
  // Only peers this rank still waits on: a peer whose part is done may already have finished and exited.
  for (int i = 0; i < numSends; ++i) {
    if (sends[i].done < sends[i].len) HORA_RETURN_IF_ERROR(check(sends[i].pair));
  }
  for (int i = 0; i < numRecvs; ++i) {
    if (recvs[i].done < recvs[i].len) HORA_RETURN_IF_ERROR(check(recvs[i].pair));
  }
  return Status::ok();
}

Status Context::timeoutStatus(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) const {
  for (int i = 0; i < numRecvs; ++i) {
    if (recvs[i].done < recvs[i].len) {
      int peer = recvs[i].pair->peer();
      return Status(Code::kTimeout,
                    "timed out after " + timeoutText(timeoutMs_) + " waiting for rank " +
                        std::to_string(peer) + " (received " + std::to_string(recvs[i].done) + " of " +
                        std::to_string(recvs[i].len) + " bytes)",
                    peer);
    }
  }
  for (int i = 0; i < numSends; ++i) {
    if (sends[i].done < sends[i].len) {
      int peer = sends[i].pair->peer();
      return Status(Code::kTimeout,
                    "timed out sending to rank " + std::to_string(peer) + " (sent " + std::to_string(sends[i].done) +
                        " of " + std::to_string(sends[i].len) + " bytes)",
                    peer);
    }
  }
  return Status(Code::kTimeout, "timed out", -1);
}

}  // namespace hora
