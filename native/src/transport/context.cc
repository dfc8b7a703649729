// Context's connections: the data-plane listener, the connections to every peer (TCP, shared memory and the
// notice sockets), taking them over from the last world, handing them on, and hanging them up; the abort.
// The progress engine that drives them is progress.cc's.
#include "transport/context.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/hash.h"
#include "common/log.h"
#include "transport/shm/pair.h"
#include "transport/shm/segment.h"
#include "transport/tcp/connect.h"
#include "transport/tcp/pair.h"

namespace hora {
namespace {

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

}  // namespace hora
