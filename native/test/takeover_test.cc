// Tests for taking connections over from one world into the next (transport/resync, Context::connect
// with kept connections), every rank a thread of this one process, as in p2p_test.
//
// A world of three workers connects, leaves bytes of an unfinished exchange in its pairs (a ring or socket
// filled and not read, a message cut short), and hands its connections over. A next world is formed from
// two of them, renumbered, and a new worker: the two survivors must get their old pairs back (the same
// objects, no new connection), the stale bytes must be gone, and every pair, old and new, must carry
// exact data. Checked on shared memory, TCP, and a mixed world. Also: a rank's notice of its failure
// (as an elastic world sends it, without hanging up) fails a peer's wait at once and is gone from the
// pair once taken over; the marker scanner on pieces and look-alike prefixes; and a take-over whose peer
// has let its connection go fails at once with ERR_PEER_LOST instead of waiting.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/takeover_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed. HORA_TEST_WATCHDOG_S (default
// 120) bounds the whole run.
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tap.h"
#include "transport/context.h"
#include "transport/resync.h"

using namespace hora;
using hora::testing::check;

namespace {

enum class Net { kShm, kTcp, kMixed };
const char* netName(Net n) { return n == Net::kShm ? "shm" : n == Net::kTcp ? "tcp" : "mixed"; }

std::string describe(const Status& st) { return std::string(codeName(st.code())) + " " + st.message(); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A worker: a host, and a context in the world it is in.
struct Worker {
  std::string host;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<KeptConnections> kept;
  int rank = -1;  // in the current world
};

// Connects the workers `members` (in rank order) as one world. keptRank[r][q]: what rank r passes as
// peer q's keptRank. Returns each rank's status.
std::vector<Status> connectWorld(Net net, std::vector<Worker*> members, const std::vector<std::vector<int>>& keptRank,
                                 const std::string& jobId, int64_t timeoutMs = 20000) {
  const int size = static_cast<int>(members.size());
  std::vector<PeerInfo> table(size);
  for (int r = 0; r < size; ++r) {
    Worker& w = *members[r];
    w.rank = r;
    w.ctx = std::make_unique<Context>(r, size, timeoutMs);
    w.ctx->setElastic(true);
    int port = 0;
    Status st = w.ctx->listen("127.0.0.1", &port);
    if (!st.isOk()) return std::vector<Status>(size, st);
    int localRank = 0;
    for (int q = 0; q < r; ++q) localRank += members[q]->host == w.host ? 1 : 0;
    table[r] = PeerInfo{r, w.host, "127.0.0.1", port, localRank};
  }
  std::vector<Status> st(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      std::vector<PeerInfo> peers = table;
      for (int q = 0; q < size; ++q) peers[q].keptRank = keptRank.empty() ? -1 : keptRank[r][q];
      st[r] = members[r]->ctx->connect(peers, jobId, "takeover-secret",
                                       net == Net::kTcp ? TransportChoice::kTcp : TransportChoice::kAuto,
                                       members[r]->kept.get());
    });
  }
  for (auto& t : threads) t.join();
  return st;
}

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 2654435761u + seed * 97u) >> 13);
  return v;
}

// Every rank sends `bytes` to every other rank on both streams (collectives' and messages'), at once, and
// checks what it receives. Returns "" or what went wrong.
std::string exchange(std::vector<Worker*> members, size_t bytes) {
  const int size = static_cast<int>(members.size());
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Context& ctx = *members[r]->ctx;
      std::vector<std::vector<uint8_t>> out, in;
      std::vector<SendOp> sends;
      std::vector<RecvOp> recvs;
      out.reserve(2 * size);
      in.reserve(2 * size);
      for (int q = 0; q < size; ++q) {
        if (q == r) continue;
        for (int stream = 0; stream < 2; ++stream) {
          Pair* p = stream == 0 ? ctx.pair(q) : ctx.p2pChannel(q);
          out.push_back(pattern(bytes, 100 * r + 10 * q + stream));
          in.emplace_back(bytes, 0);
          sends.push_back(SendOp{p, out.back().data(), bytes});
          recvs.push_back(RecvOp{p, in.back().data(), bytes});
        }
      }
      ctx.startDeadline();
      Status st = ctx.progress(sends.data(), static_cast<int>(sends.size()), recvs.data(), static_cast<int>(recvs.size()));
      if (!st.isOk()) {
        errors[r] = "rank " + std::to_string(r) + ": " + describe(st);
        return;
      }
      size_t i = 0;
      for (int q = 0; q < size; ++q) {
        if (q == r) continue;
        for (int stream = 0; stream < 2; ++stream, ++i) {
          if (in[i] != pattern(bytes, 100 * q + 10 * r + stream)) {
            errors[r] += "rank " + std::to_string(r) + " got wrong bytes from rank " + std::to_string(q) +
                         (stream == 0 ? " (collectives) " : " (messages) ");
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string all;
  for (auto& e : errors) all += e;
  return all;
}

// Leaves an exchange unfinished: pushes as much as fits from `from` to `to` on both streams without
// anyone reading it, and cuts a message short the other way (part read, part not).
void leaveGarbage(Worker& from, Worker& to) {
  std::vector<uint8_t> junk = pattern(3 << 20, 7);
  for (int stream = 0; stream < 2; ++stream) {
    Pair* p = stream == 0 ? from.ctx->pair(to.rank) : from.ctx->p2pChannel(to.rank);
    size_t taken = 0;
    p->trySend(junk.data(), junk.size(), &taken);
    Pair* back = stream == 0 ? to.ctx->pair(from.rank) : to.ctx->p2pChannel(from.rank);
    back->trySend(junk.data(), 1000, &taken);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    uint8_t part[300];
    size_t got = 0;
    Pair* reader = stream == 0 ? from.ctx->pair(to.rank) : from.ctx->p2pChannel(to.rank);
    reader->tryRecvInto(part, sizeof(part), &got);
  }
}

void testMarkerScan() {
  const Sha256Digest marker = resyncMarker("secret", "job-g1");
  // The marker after a look-alike: its first 20 bytes, then all of it, fed one byte at a time.
  std::vector<uint8_t> stream = pattern(5000, 3);
  stream.insert(stream.end(), marker.begin(), marker.begin() + 20);
  stream.insert(stream.end(), marker.begin(), marker.end());
  stream.push_back(0xab);
  MarkerScan scan(marker);
  size_t consumed = 0;
  bool found = false;
  while (!found && consumed < stream.size()) consumed += scan.feed(stream.data() + consumed, 1, &found);
  check(found && consumed == stream.size() - 1, "the marker is found byte by byte after a partial copy of itself, and not a byte further",
        "found " + std::to_string(found) + ", consumed " + std::to_string(consumed) + " of " + std::to_string(stream.size()));
  MarkerScan whole(marker);
  size_t n = whole.feed(stream.data(), stream.size(), &found);
  check(found && n == stream.size() - 1, "the marker is found in one piece, and not a byte further");
  MarkerScan none(marker);
  std::vector<uint8_t> noise = pattern(1 << 20, 5);
  n = none.feed(noise.data(), noise.size(), &found);
  check(!found && n == noise.size(), "1 MiB without the marker is all looked at, and no marker is found");
  check(resyncMarker("secret", "job-g1") != resyncMarker("secret", "job-g2") &&
            resyncMarker("secret", "job-g1") != resyncMarker("other", "job-g1"),
        "the marker differs between worlds and between secrets");
}

void testTakeOver(Net net) {
  static int counter = 0;
  const std::string name = netName(net);
  const std::string job = "takeover-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  // Workers 0 and 1 share a host; 2 is on the same host except in the mixed world; 3 joins later.
  Worker w[4];
  w[0].host = w[1].host = "hostA";
  w[2].host = net == Net::kMixed ? "hostB" : "hostA";
  w[3].host = w[2].host;
  std::vector<Status> st = connectWorld(net, {&w[0], &w[1], &w[2]}, {}, job + "-g0");
  bool ok = true;
  for (auto& s : st) ok &= s.isOk();
  check(ok, name + ": the first world connects", describe(st[0]) + " / " + describe(st[1]) + " / " + describe(st[2]));
  if (!ok) return;
  std::string bad = exchange({&w[0], &w[1], &w[2]}, 200000);
  check(bad.empty(), name + ": the first world exchanges exact data", bad);

  // Worker 0's collective fails, and it tells its peers (as an elastic world does) without hanging up:
  // worker 2, waiting to receive from it, fails at once.
  w[0].ctx->notifyPeers();
  {
    // More than any stale bytes in the way, so that the wait outlasts them.
    std::vector<uint8_t> sink(64 << 20);
    RecvOp r{w[2].ctx->pair(0), sink.data(), sink.size()};
    w[2].ctx->startDeadline();
    auto waited = std::chrono::steady_clock::now();
    Status got = w[2].ctx->progress(nullptr, 0, &r, 1);
    const double waitedMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - waited).count();
    check(got.code() == Code::kPeerLost && contains(got.message(), "ended this collective after a failure of its own") && waitedMs < 5000,
          name + ": a peer told of the failure fails its wait with ERR_PEER_LOST (" + std::to_string(static_cast<int>(waitedMs)) + " ms)",
          describe(got));
  }
  // An exchange cut off by the failure of worker 1: stale bytes both ways between the survivors.
  leaveGarbage(w[0], w[2]);
  leaveGarbage(w[2], w[0]);
  Pair* old02 = w[0].ctx->pair(2);
  Pair* old20 = w[2].ctx->pair(0);
  Pair* oldMsg02 = w[0].ctx->p2pChannel(2);
  const int fd02 = old02->livenessFd();
  for (int i : {0, 1, 2}) {
    w[i].kept = w[i].ctx->keepConnections();
    w[i].ctx.reset();
  }
  w[1].kept.reset();  // worker 1 is gone: its ends close

  // The next world: worker 2 is rank 0, worker 0 rank 1, and worker 3 (new) rank 2.
  std::vector<std::vector<int>> keptRank = {{-1, 0, -1}, {2, -1, -1}, {-1, -1, -1}};
  auto t0 = std::chrono::steady_clock::now();
  st = connectWorld(net, {&w[2], &w[0], &w[3]}, keptRank, job + "-g1");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ok = true;
  for (auto& s : st) ok &= s.isOk();
  check(ok, name + ": the next world connects, taking over the survivors' pair (" + std::to_string(static_cast<int>(ms)) + " ms)",
        describe(st[0]) + " / " + describe(st[1]) + " / " + describe(st[2]));
  if (!ok) return;
  check(w[0].ctx->pair(0) == old02 && w[2].ctx->pair(1) == old20 && w[0].ctx->p2pChannel(0) == oldMsg02 &&
            old02->livenessFd() == fd02,
        name + ": the survivors hold the same pair objects and socket as before");
  check(old02->peer() == 0 && old20->peer() == 1, name + ": the pairs taken over name the peers' new ranks",
        std::to_string(old02->peer()) + ", " + std::to_string(old20->peer()));
  pollfd notice{old20->noticeFd(), POLLIN, 0};
  check(old20->noticeFd() >= 0 && poll(&notice, 1, 0) == 0, name + ": the notice of the last world is gone from the pair taken over");
  check(w[0].ctx->usesSharedMemory(0) == (net != Net::kTcp && net != Net::kMixed) &&
            w[3].ctx->usesSharedMemory(0) == (net != Net::kTcp),
        name + ": each pair's transport is as the hosts say");
  bad = exchange({&w[2], &w[0], &w[3]}, 1 << 20);
  check(bad.empty(), name + ": every pair of the next world, taken over or new, carries exact data (1 MiB, both streams)", bad);
  bad = exchange({&w[2], &w[0], &w[3]}, 7);
  check(bad.empty(), name + ": and 7 bytes after that", bad);

  // A third world without a loss: all three pairs are taken over.
  for (Worker* x : {&w[2], &w[0], &w[3]}) {
    x->kept = x->ctx->keepConnections();
    x->ctx.reset();
  }
  std::vector<std::vector<int>> all = {{-1, 1, 2}, {0, -1, 2}, {0, 1, -1}};
  st = connectWorld(net, {&w[2], &w[0], &w[3]}, all, job + "-g2");
  ok = true;
  for (auto& s : st) ok &= s.isOk();
  check(ok, name + ": a world formed from the same three takes over every pair", describe(st[0]));
  if (ok) {
    bad = exchange({&w[2], &w[0], &w[3]}, 300000);
    check(bad.empty(), name + ": and carries exact data", bad);
  }

  // A peer that let its connections go: the take-over fails at once, it does not wait for the deadline.
  for (Worker* x : {&w[2], &w[0], &w[3]}) {
    x->kept = x->ctx->keepConnections();
    x->ctx.reset();
  }
  w[3].kept.reset();
  Worker fresh;
  fresh.host = w[3].host;
  // (The others then wait for it in the mesh until their short deadline.)
  st = connectWorld(net, {&w[2], &w[0], &fresh}, {{-1, 1, 2}, {0, -1, -1}, {-1, -1, -1}}, job + "-g3", 3000);
  check(st[0].code() == Code::kPeerLost && contains(st[0].message(), "rank 2"),
        name + ": taking over the pair of a peer that let it go fails with ERR_PEER_LOST naming it, before the deadline",
        describe(st[0]));
  w[0].kept.reset();
  w[2].kept.reset();
}

}  // namespace

int main() {
  hora::testing::startWatchdog();

  testMarkerScan();
  for (Net net : {Net::kShm, Net::kTcp, Net::kMixed}) testTakeOver(net);
  return hora::testing::finish();
}
