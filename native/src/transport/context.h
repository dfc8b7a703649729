// Context: this rank's connections to every peer, and the progress engine that drives them: every pair's
// streams (the collectives' bytes, the messages' channels, the notice sockets), with one liveness rule
// (transport/liveness.h), one set of wait constants (transport/wait.h) and one wake-up (wake()).
//
// The engine has two clients. The collectives (algorithms/) describe one step as a few sends and receives
// (SendOp / RecvOp) and call progress(), which moves bytes on all of them at once until every one is
// complete, reducing received data into the destination as it arrives when a RecvOp asks for it. It
// never blocks on a single socket: it polls the TCP descriptors (and spins on shared-memory rings),
// checks the deadline of the current collective and the abort flag, and notices at once when a
// connection to any involved peer hangs up. The messages (engine/p2p.h) are the background client
// (BackgroundProgress): the engine moves them from a collective's idle rounds, and between tasks the
// communication thread waits for them in waitForBackground(). Both waits are transport/progress.h's
// sleepWhileIdle() with their policy, and both watch what the background client says its pending
// channels wait on (BackgroundProgress::watch()), so bytes arriving for a message end either sleep.
//
// Wake-ups. Two threads may sleep in the engine at once: the one running a collective (the
// communication thread, or the JS thread in wait()) in waitForProgress(), and the communication thread in
// waitForBackground() or sleepUntilWoken() while the JS thread runs the collective. wake() (any thread:
// a message posted, a task queued, abort()) ends every wait of the engine in progress or about to start.
// It takes one eventfd per sleeping thread (Waker), each read only by its own waiter: with one fd for
// both, a waiter that drained it could leave the other's poll() to find it empty when it looks again
// after being woken, and sleep on to its cap. The background wait's fd is written whenever wake() finds
// it unread (as before: a ping-pong pays no write per message while the wait has not drained it); the
// collective's only while its wait is in its sleeping phase (collectiveListening_), and that wait reads
// it only after a sleep in poll(), so a post() pays a second write at most once per such sleep and none
// while no collective sleeps.
#pragma once

#include <poll.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/types.h"
#include "transport/pair.h"
#include "transport/progress.h"
#include "transport/resync.h"
#include "transport/topology.h"

namespace hora {

namespace shm {
class Segment;
}
struct ScaledStep;

struct PeerInfo {
  int rank = 0;
  std::string hostId;  // ranks with equal host ids share memory (decided by the rendezvous, not hostname)
  std::string addr;    // data-plane address
  int port = 0;
  int localRank = 0;   // index among the ranks with this host id
  // Elastic: the peer's rank in the last world when the pair with it is taken over from there
  // (transport/resync.h); -1: connect anew. Both ends of a pair must say the same.
  int keptRank = -1;
};

enum class TransportChoice : uint8_t {
  kAuto = 0,  // shared memory between ranks on one host, TCP otherwise
  kTcp = 1,   // TCP for every pair (HORA_TRANSPORT=tcp)
};
constexpr int kNumTransportChoices = static_cast<int>(TransportChoice::kTcp) + 1;

// Several sends to the same peer in one progress() call go out in array order, and several receives from
// one peer are filled in array order.
struct SendOp {
  Pair* pair;
  const uint8_t* data;
  size_t len;
  size_t done = 0;
};

struct RecvOp {
  Pair* pair;
  uint8_t* dst;
  size_t len;
  size_t done = 0;
  bool reduce = false;  // combine into dst with op/dtype instead of copying
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kUint8;
  // With reduce: combine as this step of a scaled collective (prescaleFactor, postscaleFactor;
  // reduce/reduce.h), dst being operand a and the received bytes operand b. nullptr: no scaling.
  const ScaledStep* scaled = nullptr;
};

// Work that moves while a collective waits (the point-to-point messages, engine/p2p.h): the progress
// engine calls it from its idle rounds, so messages are not held up behind a collective, and waits for it
// between tasks (Context::waitForBackground()).
class BackgroundProgress {
 public:
  virtual ~BackgroundProgress() = default;
  virtual bool busy() const = 0;
  // Must not block; may do nothing when another thread is already at it.
  virtual void progressInBackground() = 0;
  // What its pending channels wait on, for the engine's waits: writes at most cap entries to fds (TCP
  // descriptors: POLLIN, and POLLOUT where frames are queued) and returns how many; *onSharedMemory is set
  // when something pending has no descriptor. Must not block: -1 (nothing written) when another thread
  // is at it.
  virtual int watch(pollfd* fds, int cap, bool* onSharedMemory) = 0;
};

class Context {
 public:
  Context(int rank, int size, int64_t timeoutMs);
  // A process group's view of the connected `world`: its ranks are the positions in `members` (world
  // ranks, each once, world.rank() among them), pair(r) is the world's pair with members[r], and the
  // topology is one of plain ranks (so the algorithms pick ring or recursive doubling). It owns nothing:
  // progress, deadline, abort and kernel timing are the world's, so a group's collective waits, times out
  // and aborts exactly as a world collective does, and moves messages meanwhile. The world must outlive it.
  Context(Context& world, const std::vector<int>& members);
  ~Context();

  // Opens the data-plane listener; call before the rendezvous so the port can be published.
  Status listen(const std::string& bindHost, int* port);
  // Connects to every peer (table indexed by rank), authenticating each connection with the job's secret,
  // and sets up shared memory with same-host peers. Closes the listener. With kept (the connections of
  // the last world), a peer whose keptRank is set gets that world's pair instead, resynchronized
  // (transport/resync.h); kept is emptied, and the pairs not taken are closed.
  Status connect(const std::vector<PeerInfo>& peers, const std::string& jobId, const std::string& secret,
                 TransportChoice transport, KeptConnections* kept = nullptr);
  // Hands every connection over, for the next world to take (call once the last collective has ended;
  // the context is unusable afterwards).
  std::unique_ptr<KeptConnections> keepConnections();

  int rank() const { return rank_; }
  int size() const { return size_; }
  Pair* pair(int peer) const { return pairView_[peer]; }
  // The world rank of this context's rank r (r itself for the world); error messages name world ranks.
  int worldRank(int r) const { return base_ != nullptr ? members_[r] : r; }
  // The stream for point-to-point messages with peer, beside pair(peer) (see engine/p2p.h).
  Pair* p2pChannel(int peer) const { return p2pChannels_[peer].get(); }
  void setBackground(BackgroundProgress* b) { background_ = b; }
  // Any thread: ends every wait of the engine in progress or about to start (see the head of this file).
  void wake();
  // The wait of a thread that has no collective to run while the background client is busy (the
  // communication thread between tasks): returns when a watched channel may have moved, on wake(), or
  // after the messages' policy's cap (waits::kMessageWait; idleMicros: how long nothing moved). One thread
  // at a time.
  void waitForBackground(int64_t idleMicros);
  // Returns on wake(), or after at most ms; shares waitForBackground()'s wake-up (the same thread's).
  void sleepUntilWoken(int ms);
  // Whether peer is gone, for the messages' channel with it (the engine's liveness rule,
  // transport/liveness.h's checkPeer(), on p2pChannel(peer), with pair(peer)'s notice socket: the channel
  // has none of its own). Looks at most once per waits::kMessageLivenessMs per peer: messageLookDue() says
  // whether one is due (a comparison, for the messages' hot loop), checkMessagePeer() looks now and sets
  // when the next is due. World ranks, on the world's context. One thread at a time: the messages'
  // progress (engine/p2p.h), which holds its lock.
  bool messageLookDue(int peer, Clock::time_point now) const { return now >= nextMessageLook_[peer]; }
  Status checkMessagePeer(int peer, Clock::time_point now);
  // Where the ranks are and what the links cost; set up by connect(), refined by setTopology().
  const Topology& topology() const { return topology_; }
  void setTopology(Topology t) { topology_ = std::move(t); }
  bool usesSharedMemory(int peer) const { return pairView_[peer] != nullptr && pairView_[peer]->pollFd() < 0; }
  int64_t timeoutMs() const { return timeoutMs_; }
  // More ranks share this host than it has cores (set by connect()).
  bool oversubscribed() const { return oversubscribed_; }

  // Starts the deadline of the next collective: from the first time one of its waits reads the clock
  // (waitForProgress), which is within a microsecond of its start for a wait that is not answered at
  // once. A small collective whose partner is there never reads the clock at all.
  void startDeadline() { root().deadlinePending_ = true; }
  Status progress(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs);

  // Convenience: one send and one receive that progress together.
  Status sendRecv(int to, const void* sendData, size_t sendLen, int from, void* recvData, size_t recvLen);

  // Reduction kernel time, summed (for the timeline). Off by default: then timedReduce() costs one branch.
  void setKernelTiming(bool on) { kernelTiming_ = on; }
  // Runs a reduction kernel, adding its time to the running sum while timing is on.
  template <typename F>
  void timedReduce(F&& kernel) {
    Context& r = root();
    if (!r.kernelTiming_) {
      kernel();
      return;
    }
    const int64_t t0 = monotonicNanos();
    kernel();
    r.kernelNanos_ += monotonicNanos() - t0;
    ++r.kernelCalls_;
  }
  // Returns the sum since the last call and starts a new one.
  void takeKernelTime(int64_t* nanos, uint32_t* calls) {
    Context& r = root();
    *nanos = r.kernelNanos_;
    *calls = r.kernelCalls_;
    r.kernelNanos_ = 0;
    r.kernelCalls_ = 0;
  }

  // Thread-safe: every current and later progress() fails with this status.
  void abort(const Status& reason);
  bool aborted() const { return root().aborted_.load(std::memory_order_acquire); }
  // Shuts every connection down so that peers blocked on this rank see a hang-up at once, not a timeout.
  void hangUp();
  // What an elastic world does instead (its connections are kept for the next world): tells every peer
  // that this rank's collective failed, with a byte on the pair's notice socket (Pair::noticeFd()), which
  // a peer's wait sees and fails with ERR_PEER_LOST. A pair without one is hung up after all.
  void notifyPeers();
  // Elastic worlds give every TCP pair a notice socket (a third connection; set before connect()).
  void setElastic(bool on) { elastic_ = on; }
  Status abortReason() const;

 private:
  Status waitForProgress(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs, int idleRounds,
                         Clock::time_point* idleSince);  // set at the first read of the clock when unset
  // Places the pairs connect() takes over from kept and resynchronizes them; taken[r] says which.
  Status takeOver(const std::vector<PeerInfo>& peers, const std::string& jobId, const std::string& secret,
                  KeptConnections* kept, const Deadline& deadline, std::vector<bool>* taken);
  // transport/liveness.h's checkPeer() for every shared-memory pair this rank still waits on.
  Status checkLiveness(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs);
  // Every pending operation is on a TCP socket (none on shared memory).
  bool onSocketsOnly(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) const;
  Status timeoutStatus(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) const;
  Context& root() { return base_ != nullptr ? *base_ : *this; }
  const Context& root() const { return base_ != nullptr ? *base_ : *this; }

  Context* base_ = nullptr;   // a group's view: the world it looks through
  std::vector<int> members_;  // a group's view: the world rank of each of its ranks
  std::vector<Pair*> pairView_;  // pair(r), by this context's ranks
  int rank_;
  int size_;
  int64_t timeoutMs_;
  Deadline deadline_;
  bool deadlinePending_ = false;  // startDeadline() was called; deadline_ starts at the next clock read
  int listenFd_ = -1;
  // wake()'s eventfds, one per thread that may sleep (a group's view has none: it waits in the world).
  // collectiveWaker_: the collective's wait (waitForProgress), written only while collectiveListening_.
  // idleWaker_: waitForBackground() and sleepUntilWoken(), with idleFds_ for its poll().
  Waker collectiveWaker_;
  Waker idleWaker_;
  std::atomic<bool> collectiveListening_{false};
  std::vector<pollfd> idleFds_;
  bool oversubscribed_ = false;  // more ranks on this host than cores
  bool elastic_ = false;
  // Liveness state between looks. The collectives': a shm peer's hang-up was seen once; the next sighting
  // is a loss (waitForProgress). The messages': by peer, when checkMessagePeer() looks next.
  bool hangUpSeen_ = false;
  std::vector<Clock::time_point> nextMessageLook_;
  // TCP: a wait that slept in poll() woke to move some bytes but not all of them, so the link, not the
  // peer, sets the pace; until a progress() call finishes without such a wake, waits on sockets alone go
  // to poll() at once instead of spinning first (see waitForProgress()).
  bool bandwidthBound_ = false;
  bool polledLast_ = false;  // the last idle wait of the current progress() call slept in poll()
  std::vector<std::unique_ptr<Pair>> pairs_;
  std::vector<std::unique_ptr<Pair>> p2pChannels_;
  BackgroundProgress* background_ = nullptr;
  Topology topology_;
  std::vector<std::unique_ptr<shm::Segment>> segments_;  // outlive the pairs that point into them
  bool kernelTiming_ = false;
  int64_t kernelNanos_ = 0;
  uint32_t kernelCalls_ = 0;

  std::atomic<bool> aborted_{false};
  mutable std::mutex abortMutex_;
  Status abortReason_;
};

}  // namespace hora
