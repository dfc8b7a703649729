// Communicator: one rank's membership in a job, and the thread that runs its collectives.
//
// Why one thread: collectives must run in the same order on every rank (the agreement checks it), and a
// single thread per communicator gives that order for free; it also keeps blocking waits off the JS event
// loop and off libuv's pool, where a collective waiting on a slow peer would starve file and DNS work.
// The JS thread submits batches (all the calls made in one turn of the event loop); the thread fuses runs
// of small allreduces within a batch into one collective (tensor fusion), and reports each Work through
// the completion callback. Process groups (engine/group.h) run on the same thread, in the same queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/collectives.h"
#include "cuda/collectives.h"
#include "engine/agreement.h"
#include "engine/group.h"
#include "engine/p2p.h"
#include "engine/probe.h"
#include "engine/work.h"
#include "transport/context.h"

namespace hora {

struct CommunicatorOptions {
  int rank = 0;                      // this process, 0 <= rank < size
  int size = 1;                      // world size
  int64_t timeoutMs = 300000;        // deadline of every collective (HORA_TIMEOUT_S)
  size_t fusionBytes = 0;            // fusion buffer size; 0 turns fusion off (HORA_FUSION_MB)
  Algorithm algorithm = Algorithm::kAuto;               // HORA_ALGO
  TransportChoice transport = TransportChoice::kAuto;   // HORA_TRANSPORT
  std::string bindHost;              // data-plane listen address (HORA_IFACE); empty: all interfaces
  std::string secret;                // per-job secret (HORA_SECRET): authenticates data-plane connections
  std::vector<int> grid;             // HORA_TOPOLOGY, fastest dimension first; empty: none
  LinkOverride costLocal;            // HORA_COST_LOCAL, else measured at connect
  LinkOverride costCross;            // HORA_COST_CROSS, else measured at connect
  bool timeline = false;             // record WorkTimes for every collective (HORA_TIMELINE)
  bool ipcSlots = false;             // CUDA IPC path: staging slots on one GPU too (HORA_IPC_SLOTS)
  bool nccl = true;                  // CUDA builds: false keeps libnccl.so.2 unloaded (HORA_NCCL=0)
  // alltoall and scatter: large blocks between ranks of one host read straight from the sender's memory
  // (transport/shm/single_copy.h); false: through the rings (HORA_SHM_SINGLE_COPY=0).
  bool shmSingleCopy = true;
  // A world of an elastic job: a fatal failure does not hang up the connections but tells the peers on
  // their notice sockets (Context::notifyPeers()), so the survivors' pairs can be taken over by the next world.
  bool elastic = false;
};

// A reduction's op and factors while ranks have joined (hora.join()): avg divides by the ranks that
// contributed. divideBy: divide the result by it after the collective (0: no division).
struct JoinAdjusted {
  ReduceOp op;
  Scaling scaling;
  int divideBy;
};
JoinAdjusted adjustForJoin(ReduceOp op, const Scaling& scaling, uint32_t contributors, int size);

class Communicator {
 public:
  using Completion = std::function<void(const std::shared_ptr<Work>&)>;

  // onComplete runs on the communication thread, once per Work, after its status and results are set.
  Communicator(const CommunicatorOptions& options, Completion onComplete);
  ~Communicator();

  const CommunicatorOptions& options() const { return options_; }
  // Valid once connected (the connect work has completed).
  const Topology& topology() const { return ctx_.topology(); }
  Algorithm chooseAllreduce(const AllreduceOptions& o) const { return chooseAllreduceAlgorithm(ctx_, o); }

  // Opens the data-plane listener (synchronously: it is quick) and returns its port.
  Status listen(int* port);
  // Queues the mesh connection; completes `work` (kind ignored) when connected.
  // kept: the connections of the last world, for the peers whose keptRank is set (Context::connect).
  void connect(std::shared_ptr<Work> work, std::vector<PeerInfo> peers, std::string jobId,
               std::unique_ptr<KeptConnections> kept = nullptr);
  // Queues collectives that were submitted together; they run in order. callerWillWait: the caller goes
  // on to waitFor() one of them at once, and will run the batch itself when the engine is idle.
  void submit(std::vector<std::shared_ptr<Work>> batch, bool callerWillWait = false);
  // Makes process group `id` (see engine/group.h) of `members` (world ranks, this rank among them) for
  // later Works to name; call once connected. Every member calls it with the same id and members
  // (hora.newGroup checks that with a world collective before the group is used).
  Status addGroup(uint32_t id, const std::vector<int>& members);
  // The group made by addGroup(id), or nullptr. Thread-safe.
  Group* findGroup(uint32_t id);
  // Posts a send or receive (kind kSend or kRecv); it runs beside the collectives, in no order with them.
  // callerWillWait: the caller goes on to waitFor() a message at once, and moves the messages itself.
  void post(std::shared_ptr<Work> work, bool callerWillWait = false);
  // Blocks the caller until work has completed; while the engine is idle the caller runs queued tasks.
  void waitFor(const std::shared_ptr<Work>& work);
  // submit({work}, true) and waitFor(work) in one: a collective of at most 64 KiB, when the engine is
  // idle, nothing is queued and no message is moving, the caller runs at once, without the queue.
  // work is lent to the engine meanwhile (empty until the call returns).
  void runNow(std::shared_ptr<Work>& work);
  // For a collective about to be queued and awaited: runs it at once on the calling thread when that
  // cannot wait on a peer (runsWithoutWaiting), and returns true; its completion posts no callback (the
  // caller takes the result). Otherwise does nothing and returns false.
  bool runIfReady(std::shared_ptr<Work>& work);
  bool isDone(const std::shared_ptr<Work>& work);
  // Spins up to micros for work to complete on the communication thread; true when it has, and then
  // its completion posted no callback (the caller takes the result). Does nothing when oversubscribed.
  bool spinFor(const std::shared_ptr<Work>& work, int64_t micros);
  // Fails everything queued and everything later with reason; wakes every wait of the engine (a blocked
  // collective, the messages' wait).
  void abort(const Status& reason);
  // Lets the queue drain, then stops the thread and closes every connection; with keep, hands the
  // connections of a connected world to *keep instead (for the next world's connect()).
  void close(std::unique_ptr<KeptConnections>* keep = nullptr);
  // Timeline: the records of the works completed since the last call, in completion order (which is
  // submission order). Thread-safe.
  std::vector<TimelineRecord> takeTimelineRecords();

 private:
  struct Task {
    std::vector<std::shared_ptr<Work>> batch;
    std::vector<PeerInfo> peers;  // non-empty: a connect task
    std::string jobId;
    std::unique_ptr<KeptConnections> kept;
    bool stop = false;
  };

  void serve();
  Task takeTask();
  void runTask(Task& task, std::unique_lock<std::mutex>* lock);
  void runConnect(Task& task);
  void runBatch(std::vector<std::shared_ptr<Work>>& batch);
  size_t runFused(std::vector<std::shared_ptr<Work>>& batch, size_t begin, size_t end);
  // Agrees on w with the other ranks of its group, then runs it (runOnDevice() or runOnHost(), kinds.cc).
  Status execute(Work& w);
  Status runOnDevice(Context& ctx, Work& w);
  Status runOnHost(Context& ctx, Work& w, const Joined& joined);
  bool swapsFirstRound(Context& ctx, const Work& w, const Proposal& proposal, Swap* swap);
  // hora.join() (engine/agreement.h): proposes "joined" at each agreement of w's group, running the live
  // ranks' collectives with a neutral contribution, until every rank has joined.
  Status runJoin(Work& w);
  // One live collective of the verdict `joined`, run by a joined rank with a neutral contribution.
  Status serveJoined(Context& ctx, const Joined& joined);
  Group& groupOf(const Work& w) { return w.group != nullptr ? *w.group : world_; }
  // The algorithm a submitted collective runs under init's choice (submit()).
  void applyAlgorithmChoice(Work& w) const;
  void complete(const std::shared_ptr<Work>& w, Status st, const std::string& what);
  // Between collectives: moves messages until a task is queued or nothing is left to move, waiting in
  // the progress engine (ctx_.waitForBackground()) when nothing moves.
  void progressMessages();
  void waitForMessage(const std::shared_ptr<Work>& work);
  // A collective of the world whose whole run is one agreement between two ranks (a small allreduce
  // riding on it, or a barrier), whose partner's message has arrived. Call with mutex_ held and the
  // engine idle.
  bool runsWithoutWaiting(Work& w);
  // Runs work on the calling thread, which has claimed the engine for it (running_ and waitedFor_ set),
  // then releases the engine. work is lent to the engine's task meanwhile (empty until it returns).
  void runClaimed(std::shared_ptr<Work>& work);
  bool fusable(const Work& w) const;
  // Failures after which the connections can no longer be trusted to be in step.
  static bool isFatal(Code c);
  // "allreduce 'grad' in group 1 (ranks 0, 2)": what a failure's message says was running.
  static std::string describeWork(const Work& w);
  // WorkTimes::algorithm of a small allreduce whose data travelled with the agreement (no separate transfer).
  static constexpr char kRodeAlong[] = "agreement";
  // Timeline: stores the time at *at when the timeline is on; one branch otherwise.
  void stamp(int64_t* at) const {
    if (options_.timeline) *at = monotonicNanos();
  }
  void takeKernelTime(WorkTimes* t);

  CommunicatorOptions options_;
  // A two-rank alltoall's first round, made in its agreement (execute()) and read by its run (kinds.cc); only
  // the thread that has claimed the engine touches it.
  AlltoallFirstRound firstRound_;
  Completion onComplete_;
  Context ctx_;
  Group world_;  // the world as a group: ctx_ and its sequence of collectives
  Status broken_;  // the first fatal failure; every later Work fails with it
  std::vector<uint8_t> fusionBuffer_;
  std::vector<uint8_t> neutral_;  // a joined rank's contribution and discarded result (runJoin()); freed after
  std::unique_ptr<cuda::DeviceCollectives> device_;  // made at the first collective on GPU memory
  PointToPoint p2p_;

  std::mutex mutex_;
  std::condition_variable queueCv_;
  std::condition_variable doneCv_;
  std::deque<Task> queue_;
  std::atomic<int> queued_{0};  // tasks in queue_, readable without the lock
  std::atomic<int> messageWaiters_{0};     // JS-thread wait()s moving messages themselves (waitForMessage)
  std::atomic<uint64_t> completions_{0};  // works completed so far, readable without the lock (spinFor)
  const Work* awaited_ = nullptr;  // the work a JS-thread waitFor() sleeps on, if any (under mutex_)
  // runClaimed()'s task of one, kept to save an allocation per call (only the JS thread calls it).
  Task runHere_;
  // The work runClaimed() runs, while it runs (else nullptr): complete() finishes it without the lock.
  // Written by the claiming thread only; complete() on another thread (a message's) never matches it.
  std::atomic<const Work*> claimed_{nullptr};
  // The work a waitFor() is in progress for; its caller takes the result. Written by the JS thread, under
  // mutex_ except on the claimed path (runNow(): see there).
  std::atomic<const Work*> waitedFor_{nullptr};
  // A task is being run, by the communication thread, by a blocked waitFor() or by a claimed caller. Set and
  // cleared under mutex_, except on runNow()'s claimed path, which only the thread that queues tasks takes.
  std::atomic<bool> running_{false};
  std::atomic<bool> keepOnClose_{false};  // close() hands the connections over: the thread does not hang up
  std::atomic<bool> topologyReady_{false};  // connected: the world's pairs are all in place
  std::thread thread_;

  std::mutex groupsMutex_;
  std::vector<std::unique_ptr<Group>> groups_;  // under groupsMutex_; a Group never moves once made

  std::mutex timelineMutex_;
  std::vector<TimelineRecord> timelineRecords_;  // completed, not yet collected (under timelineMutex_)
};

}  // namespace hora
