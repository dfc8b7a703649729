// Point-to-point messages (hora.send / hora.recv): tag-matched queues beside the collectives.
//
// Channels. The collectives move raw bytes over each pair's stream in lockstep, with no framing: a
// point-to-point frame on that stream would be read as collective data by a peer in the middle of a
// collective. So every pair of ranks has a second stream of its own for messages (Context::p2pChannel):
// a second pair of shared-memory rings between ranks of one host, a second authenticated TCP connection
// otherwise. Collectives and messages never share bytes, and neither can block the other.
//
// Protocol, per direction of a channel (frames in p2p_frames.h):
//  - A send takes the next sequence number of its (sender, receiver) pair. A message of at most
//    kEagerBytes goes out at once as EAGER (header + payload) while the sender's unacknowledged eager
//    bytes to that peer stay within kEagerCredit. A larger one goes out as RTS_HEAD, with the first
//    kHeadBytes of its payload (counted against the same credit), or as RTS (header only) where the
//    credit is spent; the rest of its payload waits for the receiver. The head travels while the CTS
//    comes back, so a large message does not spend a whole round trip idle before its payload moves.
//  - The receiver reads frames in order. A message is matched with the oldest posted receive of its
//    (peer, tag); with none, it is kept as unexpected (an EAGER's payload and an RTS_HEAD's head are
//    buffered, an RTS only remembered), and the next receive posted for that (peer, tag) takes the
//    oldest unexpected one first. Messages of one (peer, tag) thus match receives in order; other tags
//    and peers never wait on them.
//  - A match checks dtype and count. Equal: an EAGER is delivered and acknowledged (ACK), an RTS is
//    answered with CTS and the sender streams DATA straight into the receive's array (an RTS_HEAD: its
//    head goes into the array's first bytes, and DATA_TAIL brings the rest). Different: the
//    receive fails with ERR_MISMATCH and the receiver answers NACK with its own dtype and count, so the
//    send fails with ERR_MISMATCH naming both sides too. The message is dropped.
//  - A send completes when a receive has taken its message: on ACK (eager: delivered), or once its DATA
//    is written (large: matched, and the payload is out of the sender's array).
//    So a send never completes before a matching receive exists, a mismatch reaches both ends, and a
//    process may exit as soon as its sends complete.
//  - Why this bounds memory: the credit caps what a receiver buffers from one peer at kEagerCredit bytes
//    of payload, eager messages and heads together (a peer exceeding it breaks the channel), and the
//    rest of a large message is never buffered. Why it cannot deadlock: a receiver always reads on (it
//    never stops behind an unmatched frame), and control frames (CTS, ACK, NACK) go out between frames,
//    never behind a whole queue of payloads.
//  - Failures stay with the messages they touch and never break the collectives: a peer that is gone
//    fails the operations with that peer (ERR_PEER_LOST; messages already buffered can still be received),
//    an operation past its deadline fails alone (ERR_TIMEOUT naming peer and tag), unless its frame was
//    half-way through the stream, which then cannot go on and fails like a lost peer.
//
// Threads. post() may be called from any thread; it wakes the progress engine (Context::wake()). progress()
// runs on the communication thread when it has no collective to run, and from inside a collective's waits
// (Context's background hook), so a message moves while a collective waits on a slow peer; a try-lock
// keeps it to one thread at a time. PointToPoint has no wait of its own: the engine's waits
// (Context::waitForBackground() between tasks, Context::waitForProgress() in a collective) sleep on what
// watch() says its channels wait on.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "engine/p2p_frames.h"
#include "engine/work.h"
#include "transport/context.h"

namespace hora {

// Messages match by (process group, tag): a group's messages never meet the world's or another group's,
// as MPI keeps communicators apart. The group travels in the frame header.
using MatchKey = int64_t;
inline MatchKey matchKey(uint32_t group, int32_t tag) {
  return static_cast<MatchKey>((uint64_t(group) << 32) | static_cast<uint32_t>(tag));
}

class PointToPoint : public BackgroundProgress {
 public:
  // Largest message sent eagerly, and the most eager bytes in flight to one peer.
  static constexpr size_t kEagerBytes = 64 * 1024;
  static constexpr size_t kEagerCredit = 4 * 1024 * 1024;
  // A frame header is read from TCP with up to this many bytes at once (Pair::tryRecvAhead): a small
  // message's payload, or a run of control frames, comes in the same system call as the header. The bytes
  // pass through a buffer, a copy that stays cheap at this size. Payloads are read straight into the
  // receive's array: reading ahead at the end of each made a 64 KiB ping-pong 10-30% slower.
  static constexpr size_t kReadAheadBytes = 4 * 1024;

  // finish runs once per Work, on whichever thread progressed it, with its outcome; `what` names the
  // operation ("send to rank 2 (tag 0)").
  using Finish = std::function<void(const std::shared_ptr<Work>&, Status, const std::string& what)>;
  PointToPoint(Context& ctx, int64_t timeoutMs, Finish finish);
  ~PointToPoint() override;

  // Any thread: queues a Work of kind kSend or kRecv (peer, tag, dtype, data, count set), and wakes the
  // engine's waits.
  void post(std::shared_ptr<Work> w);
  // Anything to do: posted, in flight, or partly framed.
  bool busy() const override { return busy_.load(std::memory_order_acquire); }
  // Moves what can move on every channel without blocking; returns whether anything moved. Returns false
  // at once when another thread is inside.
  bool progress();
  void progressInBackground() override { progress(); }
  // Every channel with something owed or awaited: its TCP socket (POLLIN; POLLOUT with frames queued),
  // or *onSharedMemory. -1 when another thread is inside progress().
  int watch(pollfd* fds, int cap, bool* onSharedMemory) override;
  // Fails everything posted and not yet complete (the engine is stopping or broken).
  void failAll(const Status& st);

 private:
  enum class State { kFramed, kAwaitReply, kPosted, kAwaitData, kStreaming };
  struct Op {
    std::shared_ptr<Work> work;
    Deadline deadline;  // from take(): the engine's rule, as a collective's (common/clock.h)
    State state = State::kFramed;
    uint64_t seq = 0;
    bool eager = false;
    size_t bytes = 0;
    size_t credit = 0;  // send: payload bytes counted against the channel's credit until ACK, CTS or NACK
    size_t head = 0;    // large send or its receive: payload bytes that travel with the RTS_HEAD
  };
  struct OutFrame {
    std::vector<uint8_t> head;  // the header, and a small payload copied behind it
    const uint8_t* payload = nullptr;
    size_t payloadLen = 0;
    size_t done = 0;           // bytes of head + payload written
    Op* completes = nullptr;   // DATA: the send it completes once written
    Op* owner = nullptr;       // EAGER, RTS, DATA: the send whose memory it reads

    explicit OutFrame(const p2p::FrameHeader& h) : head(p2p::kHeaderBytes) { p2p::encodeHeader(h, head.data()); }
    OutFrame() = default;
  };
  struct Unexpected {
    p2p::FrameHeader header;
    std::vector<uint8_t> payload;  // an EAGER's payload, an RTS_HEAD's head
    bool complete = false;         // false while its payload is still being read
  };
  struct Channel {
    Pair* pair = nullptr;
    Status dead;  // set once the stream can no longer be used
    uint64_t nextSeq = 0;
    std::deque<OutFrame> control, data;
    std::unordered_map<uint64_t, Op*> sent;  // sends awaiting ACK, CTS or NACK, by seq
    size_t unackedEager = 0;
    // Receiving: the header being read, then where its payload goes.
    uint8_t header[p2p::kHeaderBytes];
    size_t headerGot = 0;
    p2p::FrameHeader in;
    bool inPayload = false;
    uint8_t* inDst = nullptr;  // nullptr: discard
    size_t inLen = 0, inDone = 0;
    Op* inCompletes = nullptr;  // receive completed when the payload is in (or, for a head, written to)
    bool inFinishes = true;     // false while reading a head: the receive completes with its DATA_TAIL
    bool inAck = false;         // acknowledge in.seq then
    bool inUnexpected = false;  // the payload goes to the last unexpected message of tag in.tag
    std::map<MatchKey, std::deque<Unexpected>> unexpected;
    size_t unexpectedBytes = 0;
    std::map<MatchKey, std::deque<Op*>> posted;
    std::unordered_map<uint64_t, Op*> awaitingData;
  };

  void take(std::shared_ptr<Work> w);
  void postSend(Channel& c, Op* op);
  void postRecv(Channel& c, Op* op);
  void match(Channel& c, Op* op, const p2p::FrameHeader& h, Unexpected* buffered);
  void matchBuffered(Channel& c, MatchKey key);
  bool pump(Channel& c);
  bool writeControlTogether(Channel& c);
  bool writeDataTogether(Channel& c, bool* all);
  bool writeFrames(Channel& c);
  bool readFrames(Channel& c);
  void onHeader(Channel& c);
  void onPayloadDone(Channel& c);
  void expectPayload(Channel& c, uint8_t* dst, size_t len, Op* completes, bool finishes = true, bool ack = false);
  void sendControl(Channel& c, p2p::FrameType type, uint64_t seq, uint8_t dtype, uint64_t count);
  void checkDeadlines(Clock::time_point now);
  // Breaks the channel when Context::checkMessagePeer() says its peer is gone (when a look is due, or atOnce).
  void checkLiveness(Channel& c, Clock::time_point now, bool atOnce = false);
  bool involved(const Channel& c) const;
  void breakChannel(Channel& c, const Status& st);
  void finish(Op* op, Status st);
  void detach(Op* op);
  std::string describe(const Op& op) const;

  Context& ctx_;
  int64_t timeoutMs_;
  Finish finish_;
  std::vector<Channel> channels_;  // by peer rank
  std::list<Op> ops_;
  std::atomic<bool> busy_{false};
  Clock::time_point nextDeadlineCheck_{};
  std::mutex progressMutex_;
  std::mutex inboxMutex_;
  std::vector<std::shared_ptr<Work>> inbox_;  // under inboxMutex_
  std::vector<uint8_t> discard_;
  std::vector<uint8_t> controlBytes_;  // writeControlTogether's frames, back to back
};

}  // namespace hora
