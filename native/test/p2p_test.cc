// Tests for point-to-point messages (native/src/engine/p2p), every rank a thread of this one process.
//
// Each rank owns a Context connected over 127.0.0.1 as in algorithms_test, and a PointToPoint driven by
// a thread of its own, as the communication thread drives it. Worlds: shared memory, TCP, and a mixed
// world (ranks {0,1} on one "host", 2 on another) where one rank talks over both at once. Checked: frame
// encoding; contents across sizes that take the inline-eager, eager and rendezvous paths; tags matched
// out of order; more unexpected eager messages than the credit; and frames that break the protocol, which
// must fail the receive rather than be trusted; and a peer that hangs up or sends its notice (ERR_PEER_LOST).
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/p2p_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed. HORA_TEST_WATCHDOG_S (default
// 120) bounds the whole run.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/p2p.h"
#include "tap.h"
#include "transport/context.h"
#include "transport/wait.h"

using namespace hora;
using hora::testing::check;

namespace {

enum class Net { kShm, kTcp, kMixed };
const char* netName(Net n) { return n == Net::kShm ? "shm" : n == Net::kTcp ? "tcp" : "mixed"; }

struct Rank {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<PointToPoint> p2p;
  std::mutex mutex;
  std::condition_variable cv;
  std::map<uint64_t, Status> done;  // by Work id
  std::atomic<bool> stop{false};
  std::thread driver;
};

struct World {
  std::vector<std::unique_ptr<Rank>> ranks;
  ~World() {
    for (auto& r : ranks) {
      r->stop = true;
      r->ctx->wake();
      if (r->driver.joinable()) r->driver.join();
    }
  }
};

std::string describe(const Status& st) { return std::string(codeName(st.code())) + " " + st.message(); }

Status connectWorld(Net net, int size, int64_t timeoutMs, World* w) {
  static std::atomic<int> counter{0};
  const std::string jobId = "p2ptest-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  auto hostOf = [&](int r) { return net == Net::kMixed ? "host" + std::to_string(r / 2) : std::string("host0"); };
  std::vector<PeerInfo> peers(size);
  for (int r = 0; r < size; ++r) {
    w->ranks.push_back(std::make_unique<Rank>());
    Rank& k = *w->ranks.back();
    k.ctx = std::make_unique<Context>(r, size, timeoutMs);
    int port = 0;
    HORA_RETURN_IF_ERROR(k.ctx->listen("127.0.0.1", &port));
    int localRank = 0;
    for (int q = 0; q < r; ++q) localRank += hostOf(q) == hostOf(r) ? 1 : 0;
    peers[r] = PeerInfo{r, hostOf(r), "127.0.0.1", port, localRank};
  }
  std::vector<Status> st(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      st[r] = w->ranks[r]->ctx->connect(peers, jobId, "p2ptest-secret",
                                        net == Net::kTcp ? TransportChoice::kTcp : TransportChoice::kAuto);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) HORA_RETURN_IF_ERROR(st[r]);
  for (auto& rank : w->ranks) {
    Rank* k = rank.get();
    k->p2p = std::make_unique<PointToPoint>(*k->ctx, timeoutMs, [k](const std::shared_ptr<Work>& work, Status s, const std::string&) {
      std::lock_guard<std::mutex> lock(k->mutex);
      k->done[work->id] = std::move(s);
      k->cv.notify_all();
    });
    k->ctx->setBackground(k->p2p.get());
    k->driver = std::thread([k] {
      auto idleSince = std::chrono::steady_clock::now();
      while (!k->stop) {
        if (k->p2p->progress()) {
          idleSince = std::chrono::steady_clock::now();
          continue;
        }
        k->ctx->waitForBackground(
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - idleSince).count());
      }
    });
  }
  return Status::ok();
}

uint64_t gNextId = 1;

uint64_t post(World& w, int rank, Kind kind, int peer, int tag, DType dtype, void* data, size_t count) {
  auto work = std::make_shared<Work>();
  work->id = gNextId++;
  work->kind = kind;
  work->peer = peer;
  work->tag = tag;
  work->dtype = dtype;
  work->data = static_cast<uint8_t*>(data);
  work->count = count;
  w.ranks[rank]->p2p->post(work);
  return work->id;
}

Status waitFor(World& w, int rank, uint64_t id, int seconds = 30) {
  Rank& k = *w.ranks[rank];
  std::unique_lock<std::mutex> lock(k.mutex);
  if (!k.cv.wait_for(lock, std::chrono::seconds(seconds), [&] { return k.done.count(id) > 0; })) {
    return Status(Code::kTimeout, "the test gave up waiting for work " + std::to_string(id));
  }
  return k.done[id];
}

std::vector<int32_t> pattern(size_t n, int seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i * 2654435761u + seed);
  return v;
}

void testFrames() {
  p2p::FrameHeader h;
  h.type = p2p::FrameType::kNack;
  h.dtype = 5;
  h.tag = 2147483647;
  h.seq = 0x0102030405060708ull;
  h.count = 0xfffffffffull;
  h.group = 0xfedcba98u;
  uint8_t buf[p2p::kHeaderBytes];
  p2p::encodeHeader(h, buf);
  p2p::FrameHeader back;
  const bool ok = p2p::decodeHeader(buf, &back);
  check(ok && back.type == h.type && back.dtype == h.dtype && back.tag == h.tag && back.seq == h.seq && back.count == h.count &&
            back.group == h.group,
        "frame header round trip");
  buf[0] = 0;
  check(!p2p::decodeHeader(buf, &back), "frame type 0 is rejected");
  buf[0] = 8;
  check(p2p::decodeHeader(buf, &back) && back.type == p2p::FrameType::kDataTail, "frame type 8 (DATA_TAIL) is known");
  buf[0] = 9;
  check(!p2p::decodeHeader(buf, &back), "frame type 9 is rejected");
}

// Every ordered pair exchanges messages of each size; receives are posted after the sends on half the
// pairs and before them on the other half.
void testContents(Net net) {
  World w;
  Status st = connectWorld(net, 3, 30000, &w);
  check(st.isOk(), std::string(netName(net)) + ": connect", describe(st));
  if (!st.isOk()) return;
  // 0, 1, inline eager, eager from the array, the largest eager, rendezvous with a head and a tail of one
  // element, rendezvous.
  const size_t head = p2p::kHeadBytes / 4;
  const size_t sizes[] = {0, 1, 1000, 5000, head, head + 1, 70000};
  std::string failures;
  for (size_t n : sizes) {
    std::vector<std::vector<int32_t>> sent, got;
    std::vector<std::pair<int, uint64_t>> ids;
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 3; ++b) {
        if (a == b) continue;
        sent.push_back(pattern(n, a * 10 + b));
        got.emplace_back(n, -1);
        const int tag = a + 3 * b;
        if ((a + b) % 2) ids.push_back({b, post(w, b, Kind::kRecv, a, tag, DType::kInt32, got.back().data(), n)});
        ids.push_back({a, post(w, a, Kind::kSend, b, tag, DType::kInt32, sent.back().data(), n)});
        if ((a + b) % 2 == 0) ids.push_back({b, post(w, b, Kind::kRecv, a, tag, DType::kInt32, got.back().data(), n)});
      }
    }
    for (auto& [rank, id] : ids) {
      Status s = waitFor(w, rank, id);
      if (!s.isOk()) failures += " n=" + std::to_string(n) + ": " + describe(s);
    }
    for (size_t i = 0; i < sent.size(); ++i) {
      if (sent[i] != got[i]) failures += " n=" + std::to_string(n) + " message " + std::to_string(i) + " differs;";
    }
  }
  check(failures.empty(), std::string(netName(net)) + ": every pair, every size, arrives intact", failures);

  // Tags out of order: three messages (one rendezvous) wait as unexpected, then are received 2, 1, 0.
  std::vector<int32_t> m0 = pattern(10, 0), m1 = pattern(70000, 1), m2 = pattern(3, 2);
  std::vector<int32_t> r0(10), r1(70000), r2(3);
  uint64_t s0 = post(w, 0, Kind::kSend, 1, 0, DType::kInt32, m0.data(), 10);
  uint64_t s1 = post(w, 0, Kind::kSend, 1, 1, DType::kInt32, m1.data(), 70000);
  uint64_t s2 = post(w, 0, Kind::kSend, 1, 2, DType::kInt32, m2.data(), 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Status a = waitFor(w, 1, post(w, 1, Kind::kRecv, 0, 2, DType::kInt32, r2.data(), 3));
  Status b = waitFor(w, 1, post(w, 1, Kind::kRecv, 0, 1, DType::kInt32, r1.data(), 70000));
  Status c = waitFor(w, 1, post(w, 1, Kind::kRecv, 0, 0, DType::kInt32, r0.data(), 10));
  bool sendsOk = waitFor(w, 0, s0).isOk() && waitFor(w, 0, s1).isOk() && waitFor(w, 0, s2).isOk();
  check(a.isOk() && b.isOk() && c.isOk() && sendsOk && r0 == m0 && r1 == m1 && r2 == m2,
        std::string(netName(net)) + ": tags received in another order than sent",
        describe(a) + " / " + describe(b) + " / " + describe(c));
}

// A window of 200 messages of mixed sizes on one tag, sent back to back (their frames are written
// together) while the receives are posted: half before the sends, half after. All arrive intact and in order.
void testWindow(Net net) {
  World w;
  Status st = connectWorld(net, 2, 30000, &w);
  if (!st.isOk()) return check(false, std::string(netName(net)) + ": connect", describe(st));
  const size_t head = p2p::kHeadBytes / 4;
  const size_t sizes[] = {0, 1, 7, 1000, 4100, 5000, PointToPoint::kEagerBytes / 4, head + 1, 3 * head, 70000, 300000};
  std::vector<std::vector<int32_t>> sent, got;
  for (int i = 0; i < 200; ++i) {
    const size_t n = sizes[(i * 7 + i / 11) % (sizeof(sizes) / sizeof(sizes[0]))];
    sent.push_back(pattern(n, i));
    got.emplace_back(n, -1);
  }
  std::vector<std::pair<int, uint64_t>> ids;
  for (int i = 0; i < 100; ++i) ids.push_back({1, post(w, 1, Kind::kRecv, 0, 4, DType::kInt32, got[i].data(), got[i].size())});
  for (int i = 0; i < 200; ++i) ids.push_back({0, post(w, 0, Kind::kSend, 1, 4, DType::kInt32, sent[i].data(), sent[i].size())});
  for (int i = 100; i < 200; ++i) ids.push_back({1, post(w, 1, Kind::kRecv, 0, 4, DType::kInt32, got[i].data(), got[i].size())});
  std::string failures;
  for (auto& [rank, id] : ids) {
    Status s = waitFor(w, rank, id);
    if (!s.isOk()) failures += " rank " + std::to_string(rank) + ": " + describe(s) + ";";
  }
  for (size_t i = 0; i < sent.size(); ++i) {
    if (sent[i] != got[i]) failures += " message " + std::to_string(i) + " differs;";
  }
  check(failures.empty(), std::string(netName(net)) + ": a window of 200 messages of mixed sizes arrives intact and in order", failures);
}

// 100 eager messages of 64 KiB on tag 9 exceed the credit; a message on tag 8 sent after them must still
// get through to a receive for tag 8 (the excess goes rendezvous), and then all 100 arrive in order.
void testCredit(Net net) {
  World w;
  Status st = connectWorld(net, 2, 30000, &w);
  if (!st.isOk()) return check(false, std::string(netName(net)) + ": connect", describe(st));
  const size_t n = PointToPoint::kEagerBytes / 4;
  std::vector<std::vector<int32_t>> msgs;
  std::vector<uint64_t> sends;
  for (int i = 0; i < 100; ++i) msgs.push_back(pattern(n, i));
  for (int i = 0; i < 100; ++i) sends.push_back(post(w, 0, Kind::kSend, 1, 9, DType::kInt32, msgs[i].data(), n));
  std::vector<int32_t> late = pattern(5, 77), lateGot(5);
  uint64_t lateSend = post(w, 0, Kind::kSend, 1, 8, DType::kInt32, late.data(), 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Status got8 = waitFor(w, 1, post(w, 1, Kind::kRecv, 0, 8, DType::kInt32, lateGot.data(), 5), 10);
  check(got8.isOk() && lateGot == late && waitFor(w, 0, lateSend).isOk(),
        std::string(netName(net)) + ": a tag gets through behind more unexpected messages than the credit", describe(got8));
  std::string failures;
  for (int i = 0; i < 100; ++i) {
    std::vector<int32_t> into(n);
    Status s = waitFor(w, 1, post(w, 1, Kind::kRecv, 0, 9, DType::kInt32, into.data(), n));
    if (!s.isOk() || into != msgs[i]) failures += " message " + std::to_string(i) + ": " + describe(s);
  }
  for (uint64_t id : sends) {
    Status s = waitFor(w, 0, id);
    if (!s.isOk()) failures += " send: " + describe(s);
  }
  check(failures.empty(), std::string(netName(net)) + ": then all 100 arrive in order", failures);
}

// A large message whose receive is of another count or dtype: both ends fail with kMismatch, whether the
// head was buffered (the receive came late) or read off the stream (the receive was waiting), and the head
// is dropped from the stream, so the next message arrives intact.
void testHeadMismatch(Net net) {
  World w;
  Status st = connectWorld(net, 2, 30000, &w);
  if (!st.isOk()) return check(false, std::string(netName(net)) + ": connect", describe(st));
  const size_t n = 70000;
  std::vector<int32_t> msg = pattern(n, 5), into(n + 1, -1);
  uint64_t late = post(w, 0, Kind::kSend, 1, 5, DType::kInt32, msg.data(), n);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Status lateRecv = waitFor(w, 1, post(w, 1, Kind::kRecv, 0, 5, DType::kInt32, into.data(), n + 1));
  Status lateSend = waitFor(w, 0, late);
  uint64_t waiting = post(w, 1, Kind::kRecv, 0, 5, DType::kFloat32, into.data(), n);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Status waitingSend = waitFor(w, 0, post(w, 0, Kind::kSend, 1, 5, DType::kInt32, msg.data(), n));
  Status waitingRecv = waitFor(w, 1, waiting);
  check(lateRecv.code() == Code::kMismatch && lateSend.code() == Code::kMismatch && waitingRecv.code() == Code::kMismatch &&
            waitingSend.code() == Code::kMismatch,
        std::string(netName(net)) + ": a large message meets a receive of another count (buffered head) or dtype (head on the stream): kMismatch on both ends",
        describe(lateRecv) + " / " + describe(lateSend) + " / " + describe(waitingRecv) + " / " + describe(waitingSend));
  std::vector<int32_t> good(n, -1);
  uint64_t next = post(w, 0, Kind::kSend, 1, 5, DType::kInt32, msg.data(), n);
  Status nextRecv = waitFor(w, 1, post(w, 1, Kind::kRecv, 0, 5, DType::kInt32, good.data(), n));
  check(nextRecv.isOk() && waitFor(w, 0, next).isOk() && good == msg, std::string(netName(net)) + ": then the next large message arrives intact",
        describe(nextRecv));
}

// Bytes written straight onto the message stream, as a broken or hostile peer would: the receive fails
// with ERR_INTERNAL naming the peer, and nothing is allocated from the claimed sizes.
void testViolation(Net net, const char* what, const p2p::FrameHeader& h, bool rawType99) {
  World w;
  Status st = connectWorld(net, 2, 30000, &w);
  if (!st.isOk()) return check(false, std::string(netName(net)) + ": connect", describe(st));
  std::vector<int32_t> into(4);
  uint64_t id = post(w, 1, Kind::kRecv, 0, 0, DType::kInt32, into.data(), 4);
  uint8_t frame[p2p::kHeaderBytes];
  p2p::encodeHeader(h, frame);
  if (rawType99) frame[0] = 99;
  size_t taken = 0;
  // Rank 0's engine has nothing to do with rank 1, so its driver does not touch this channel.
  w.ranks[0]->ctx->p2pChannel(1)->trySend(frame, sizeof(frame), &taken);
  Status s = waitFor(w, 1, id, 10);
  check(s.code() == Code::kInternal && s.message().find("rank 0 broke the message protocol") != std::string::npos && s.peer() == 0,
        std::string(netName(net)) + ": " + what + " fails the receive", describe(s));
}

// A peer that hangs up, or says its work failed (its notice), fails a receive waiting on it with
// ERR_PEER_LOST naming it, seen by the progress engine's look at the peer (Context::checkMessagePeer), which
// looks at most once per waits::kMessageLivenessMs per peer unless told to look at once.
void testPeerGone(Net net, bool notice) {
  const std::string name = std::string(netName(net)) + (notice ? ", notice" : ", hang-up");
  World w;
  Status st = connectWorld(net, 2, 30000, &w);
  if (!st.isOk()) return check(false, name + ": connect", describe(st));
  std::vector<int32_t> into(4);
  uint64_t id = post(w, 0, Kind::kRecv, 1, 0, DType::kInt32, into.data(), 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Rank 1 posts nothing: its driver never looks at the channel.
  if (notice) {
    w.ranks[1]->ctx->notifyPeers();
  } else {
    w.ranks[1]->ctx->hangUp();
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status s = waitFor(w, 0, id, 10);
  const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  // On TCP the channel's own read may see the hang-up first, in its words (tcp/pair.cc).
  const std::string words = notice ? "rank 1 ended its work after a failure of its own" : "rank 1 is gone (its connection to rank 0 closed)";
  const bool said = s.message() == words || (net == Net::kTcp && s.message().find("rank 1") != std::string::npos);
  check(s.code() == Code::kPeerLost && said && s.peer() == 1 && ms < 5000,
        name + ": a receive from the lost peer fails with ERR_PEER_LOST naming it", describe(s) + " after " + std::to_string(ms) + " ms");
  // The look itself, with the drivers stopped (one thread at a time looks).
  for (auto& r : w.ranks) {
    r->stop = true;
    r->ctx->wake();
    r->driver.join();
  }
  Context& ctx = *w.ranks[0]->ctx;
  const Clock::time_point now = Clock::now();
  const auto after = [&](int ms) { return now + std::chrono::milliseconds(ms); };
  const Status first = ctx.checkMessagePeer(1, now);
  const bool dueSoon = ctx.messageLookDue(1, after(waits::kMessageLivenessMs - 1));
  const bool dueLater = ctx.messageLookDue(1, after(waits::kMessageLivenessMs));
  const Status again = ctx.checkMessagePeer(1, after(1));
  check(first.code() == Code::kPeerLost && first.peer() == 1 && again.code() == Code::kPeerLost && !dueSoon && dueLater,
        name + ": checkMessagePeer says the peer is lost whenever it looks; the next look is due kMessageLivenessMs later",
        describe(first) + " / " + describe(again) + " / due soon " + std::to_string(dueSoon) + ", later " + std::to_string(dueLater));
}

}  // namespace

int main() {
  hora::testing::startWatchdog();

  testFrames();
  for (Net net : {Net::kShm, Net::kTcp, Net::kMixed}) testContents(net);
  for (Net net : {Net::kShm, Net::kTcp}) testCredit(net);
  for (Net net : {Net::kShm, Net::kTcp}) testWindow(net);
  for (Net net : {Net::kShm, Net::kTcp}) testHeadMismatch(net);
  for (Net net : {Net::kShm, Net::kTcp}) testPeerGone(net, /*notice=*/false);
  testPeerGone(Net::kShm, /*notice=*/true);
  p2p::FrameHeader eager;
  eager.type = p2p::FrameType::kEager;
  eager.dtype = static_cast<uint8_t>(DType::kInt32);
  eager.count = uint64_t(1) << 40;
  p2p::FrameHeader badDtype = eager;
  badDtype.count = 4;
  badDtype.dtype = 42;
  // A head of kHeadBytes is only sent ahead of a larger message.
  p2p::FrameHeader smallHead = badDtype;
  smallHead.type = p2p::FrameType::kRtsHead;
  smallHead.dtype = static_cast<uint8_t>(DType::kInt32);
  p2p::FrameHeader smallTail = smallHead;
  smallTail.type = p2p::FrameType::kDataTail;
  for (Net net : {Net::kShm, Net::kTcp}) {
    testViolation(net, "an unknown frame type", eager, true);
    testViolation(net, "an eager message of 4 TiB", eager, false);
    testViolation(net, "an unknown dtype", badDtype, false);
    testViolation(net, "an RTS_HEAD of a message no larger than its head", smallHead, false);
    testViolation(net, "a DATA_TAIL of a message no larger than a head", smallTail, false);
  }
  return hora::testing::finish();
}
