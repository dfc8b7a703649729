// Tests for the data-plane handshake (transport/tcp/connect, transport/tcp/handshake): ranks are threads of
// this process, each with a listener on 127.0.0.1, and strangers are raw sockets driven by the test: silent,
// random bytes, Hellos with a wrong proof, rank, job or magic, replayed Hellos, more idle connections than
// the cap, and fake acceptors. Log lines are captured from stderr and checked too.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/connect_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed.
// HORA_TEST_WATCHDOG_S (default 120) bounds the whole run, so a hang fails instead of blocking CI.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "transport/context.h"
#include "transport/tcp/connect.h"
#include "transport/tcp/handshake.h"

#include "tap.h"

using namespace hora;
namespace hs = hora::tcp::handshake;

namespace {

using SteadyClock = std::chrono::steady_clock;

double secondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

using testing::check;
using testing::gCount;

std::string describe(const Status& st) { return std::string(codeName(st.code())) + " " + st.message(); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Sends what the core logs to stderr into a file while it lives, then hands it back.
class StderrCapture {
 public:
  StderrCapture() {
    char path[] = "/tmp/hora-connect-test-XXXXXX";
    file_ = mkstemp(path);
    unlink(path);
    saved_ = dup(STDERR_FILENO);
    dup2(file_, STDERR_FILENO);
  }
  ~StderrCapture() { stop(); }
  std::string stop() {
    if (saved_ >= 0) {
      dup2(saved_, STDERR_FILENO);
      close(saved_);
      saved_ = -1;
      lseek(file_, 0, SEEK_SET);
      char buf[4096];
      ssize_t n;
      while ((n = read(file_, buf, sizeof(buf))) > 0) text_.append(buf, static_cast<size_t>(n));
      close(file_);
    }
    return text_;
  }

 private:
  int file_ = -1;
  int saved_ = -1;
  std::string text_;
};

int countOf(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

// ---------------------------------------------------------------------------------------------------
// Ranks as threads.

constexpr uint64_t kJobTag = 0x1234abcd5678ef00ull;

struct Listeners {
  std::vector<int> fds;
  std::vector<tcp::PeerAddress> addrs;
  ~Listeners() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
};

void listenAll(int size, Listeners* l) {
  l->fds.assign(size, -1);
  l->addrs.resize(size);
  for (int r = 0; r < size; ++r) {
    int port = 0;
    Status st = tcp::listenOn("127.0.0.1", size + tcp::kMaxPendingAccepts, &l->fds[r], &port);
    if (!st.isOk()) {
      std::printf("Bail out! listen: %s\n", describe(st).c_str());
      std::exit(1);
    }
    l->addrs[r] = {"127.0.0.1", port};
  }
}

// As Context::connect does once the mesh is complete: connections still queued are reset.
void closeListeners(Listeners& l) {
  for (int& fd : l.fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

struct RankResult {
  Status status;
  std::vector<int> fds;
  double seconds = 0;
};

// Runs connectMesh for the given ranks, each in its own thread, rank r starting after delaysMs[r].
class MeshRun {
 public:
  MeshRun(Listeners& l, std::vector<std::string> secrets, int64_t timeoutMs, std::vector<int> delaysMs = {})
      : results_(secrets.size()) {
    const int size = static_cast<int>(secrets.size());
    delaysMs.resize(size, 0);
    for (int r = 0; r < size; ++r) {
      threads_.emplace_back([&l, secrets, timeoutMs, delaysMs, size, r, this] {
        std::this_thread::sleep_for(std::chrono::milliseconds(delaysMs[r]));
        tcp::MeshOptions o;
        o.rank = r;
        o.size = size;
        o.peers = l.addrs;
        o.jobTag = kJobTag;
        o.secret = secrets[r];
        auto t0 = SteadyClock::now();
        Deadline deadline(timeoutMs);
        results_[r].status = tcp::connectMesh(l.fds[r], o, deadline, &results_[r].fds);
        results_[r].seconds = secondsSince(t0);
      });
    }
  }
  ~MeshRun() {
    join();
    for (RankResult& r : results_) {
      for (int fd : r.fds) {
        if (fd >= 0) close(fd);
      }
    }
  }
  std::vector<RankResult>& join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    return results_;
  }

 private:
  std::vector<RankResult> results_;
  std::vector<std::thread> threads_;
};

std::string firstFailure(const std::vector<RankResult>& rs) {
  for (size_t r = 0; r < rs.size(); ++r) {
    if (!rs[r].status.isOk()) return "rank " + std::to_string(r) + ": " + describe(rs[r].status);
  }
  return "";
}

// Every rank sends its number to every peer and must read the peer's number back: each descriptor leads
// to the rank it is filed under.
bool meshCarriesData(const std::vector<RankResult>& rs, std::string* why) {
  const int size = static_cast<int>(rs.size());
  Deadline deadline(5000);
  for (int r = 0; r < size; ++r) {
    for (int p = 0; p < size; ++p) {
      if (p == r) continue;
      const uint8_t mine = static_cast<uint8_t>(r);
      Status st = tcp::sendAll(rs[r].fds[p], &mine, 1, deadline, p);
      if (!st.isOk()) {
        *why = "rank " + std::to_string(r) + " -> " + std::to_string(p) + ": " + describe(st);
        return false;
      }
    }
  }
  for (int r = 0; r < size; ++r) {
    for (int p = 0; p < size; ++p) {
      if (p == r) continue;
      uint8_t got = 255;
      Status st = tcp::recvAll(rs[r].fds[p], &got, 1, deadline, p);
      if (!st.isOk() || got != p) {
        *why = "rank " + std::to_string(r) + " read " + std::to_string(got) + " from the socket of rank " +
               std::to_string(p) + (st.isOk() ? "" : ": " + describe(st));
        return false;
      }
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Strangers: raw sockets.

int dialRaw(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

bool readExact(int fd, void* buf, size_t len, int timeoutMs) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  Deadline deadline(timeoutMs);
  while (len > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, deadline.remainingMs(timeoutMs)) <= 0) return false;
    ssize_t n = recv(fd, p, len, 0);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool writeAll(int fd, const void* buf, size_t len) {
  return send(fd, buf, len, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

// True when the other side closed (or reset) the connection within timeoutMs; data before that is skipped.
bool closedByPeer(int fd, int timeoutMs) {
  Deadline deadline(timeoutMs);
  for (;;) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, deadline.remainingMs(timeoutMs)) <= 0) return false;
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

// Plays a connector: reads the challenge, sends a Hello built by makeHello, reads the answer.
struct RawExchange {
  bool gotChallenge = false;
  bool gotAnswer = false;
  hs::Challenge challenge;
  hs::Hello hello;
  hs::Answer answer;
  int fd = -1;
};

RawExchange rawConnect(int port, const std::function<hs::Hello(const hs::Challenge&)>& makeHello) {
  RawExchange x;
  x.fd = dialRaw(port);
  if (x.fd < 0) return x;
  uint8_t buf[hs::kHelloBytes];
  x.gotChallenge = readExact(x.fd, buf, hs::kChallengeBytes, 5000);
  if (!x.gotChallenge) return x;
  x.challenge = hs::decodeChallenge(buf);
  x.hello = makeHello(x.challenge);
  hs::encode(x.hello, buf);
  if (!writeAll(x.fd, buf, hs::kHelloBytes)) return x;
  x.gotAnswer = readExact(x.fd, buf, hs::kAnswerBytes, 5000);
  if (x.gotAnswer) x.answer = hs::decodeAnswer(buf);
  return x;
}

// A Hello as rank `rank` would send it; with the right secret its proof verifies.
hs::Hello helloFor(const hs::Challenge& c, int rank, int size, uint64_t jobTag, const std::string& secret) {
  hs::Hello h;
  h.rank = rank;
  h.size = size;
  h.jobTag = jobTag;
  hs::randomNonce(&h.nonce);
  hs::Transcript t;
  t.acceptorNonce = c.nonce;
  t.connectorNonce = h.nonce;
  t.connectorRank = rank;
  t.acceptorRank = c.rank;
  t.size = size;
  t.jobTag = jobTag;
  h.proof = hs::connectProof(secret, t);
  return h;
}

// ---------------------------------------------------------------------------------------------------

void equalSecretsConnect() {
  for (int size : {2, 3, 5}) {
    Listeners l;
    listenAll(size, &l);
    MeshRun run(l, std::vector<std::string>(size, "the-secret"), 10000);
    auto& rs = run.join();
    std::string why = firstFailure(rs);
    check(why.empty(), "equal secrets: a mesh of " + std::to_string(size) + " connects", why);
    if (why.empty()) {
      check(meshCarriesData(rs, &why), "equal secrets: every socket of the mesh of " + std::to_string(size) +
                                           " leads to the rank it is filed under", why);
    }
  }
}

// Context::connect closes the listener once the mesh is complete: later strangers are refused.
void listenerClosedAfterInit() {
  const int size = 2;
  std::vector<std::unique_ptr<Context>> ctx;
  std::vector<PeerInfo> peers(size);
  for (int r = 0; r < size; ++r) {
    ctx.push_back(std::make_unique<Context>(r, size, 10000));
    int port = 0;
    ctx[r]->listen("127.0.0.1", &port);
    peers[r] = PeerInfo{r, "host" + std::to_string(r), "127.0.0.1", port, 0};
  }
  std::vector<Status> st(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { st[r] = ctx[r]->connect(peers, "connect-test-job", "s3cret", TransportChoice::kTcp); });
  }
  for (auto& t : threads) t.join();
  check(st[0].isOk() && st[1].isOk(), "Context::connect with equal secrets",
        describe(st[0]) + " / " + describe(st[1]));
  int fd = dialRaw(peers[0].port);
  const int err = errno;
  if (fd >= 0) close(fd);
  check(fd < 0 && err == ECONNREFUSED, "after init the data-plane port refuses connections",
        fd >= 0 ? "a connection was accepted" : strerror(err));
}

void differentSecrets() {
  // The connector with the odd secret is told at once; the acceptors cannot tell it from an impostor and
  // wait for the deadline, naming it. The acceptor that rejected its proof says so in its timeout; the
  // connector stops at its first rejection, so the other acceptor may never have heard from it.
  {
    Listeners l;
    listenAll(3, &l);
    MeshRun run(l, {"secret-a", "secret-a", "secret-b"}, 4000);
    auto& rs = run.join();
    const Status& odd = rs[2].status;
    check(odd.code() == Code::kAuth && (odd.peer() == 0 || odd.peer() == 1) && contains(odd.message(), "different secrets") &&
              contains(odd.message(), "rank " + std::to_string(odd.peer())),
          "a connecting rank with another secret fails with kAuth naming the peer", describe(odd));
    check(rs[2].seconds < 1.5, "... within 1.5 s, not at the deadline",
          std::to_string(rs[2].seconds) + " s");
    bool timedOut = true;
    std::string got;
    for (int r = 0; r < 2; ++r) {
      timedOut = timedOut && rs[r].status.code() == Code::kTimeout && rs[r].status.peer() == 2;
      got += describe(rs[r].status) + "; ";
    }
    const bool rejecterSaysSo =
        (odd.peer() == 0 || odd.peer() == 1) && contains(rs[odd.peer()].status.message(), "HORA_SECRET");
    check(timedOut && rejecterSaysSo, "the acceptors time out naming rank 2; the one that rejected its proof names the secret",
          got);
  }
  {
    Listeners l;
    listenAll(3, &l);
    MeshRun run(l, {"secret-b", "secret-a", "secret-a"}, 4000);
    auto& rs = run.join();
    bool fast = true;
    std::string got;
    for (int r = 1; r < 3; ++r) {
      fast = fast && rs[r].status.code() == Code::kAuth && rs[r].status.peer() == 0 && rs[r].seconds < 1.5;
      got += describe(rs[r].status) + " after " + std::to_string(rs[r].seconds) + " s; ";
    }
    check(fast, "an accepting rank with another secret: both connectors fail with kAuth naming rank 0 at once", got);
  }
}

void strangersDuringInit() {
  Listeners l;
  listenAll(3, &l);
  StderrCapture capture;
  const auto t0 = SteadyClock::now();
  // Rank 0 starts at once; the strangers hit it; ranks 1 and 2 come 300 ms later.
  MeshRun run(l, {"k", "k", "k"}, 20000, {0, 300, 300});
  const int port = l.addrs[0].port;
  std::mt19937 rng(7);
  std::vector<int> silent, noisy;
  for (int i = 0; i < 3; ++i) silent.push_back(dialRaw(port));
  for (int i = 0; i < 3; ++i) {
    int fd = dialRaw(port);
    std::vector<uint8_t> junk(200);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    writeAll(fd, junk.data(), junk.size());
    noisy.push_back(fd);
  }
  {
    // Half a Hello, then nothing.
    int fd = dialRaw(port);
    uint8_t half[40] = {0x48, 0x4f, 0x52, 0x41, 2, 0};
    writeAll(fd, half, sizeof(half));
    silent.push_back(fd);
  }
  std::vector<RawExchange> wrongProof, wrongRank, wrongJob, wrongMagic;
  for (int i = 0; i < 3; ++i) {
    wrongProof.push_back(rawConnect(port, [](const hs::Challenge& c) { return helloFor(c, 1, 3, kJobTag, "not-k"); }));
  }
  wrongRank.push_back(rawConnect(port, [](const hs::Challenge& c) { return helloFor(c, 0, 3, kJobTag, "k"); }));
  wrongRank.push_back(rawConnect(port, [](const hs::Challenge& c) { return helloFor(c, 7, 3, kJobTag, "k"); }));
  wrongJob.push_back(rawConnect(port, [](const hs::Challenge& c) { return helloFor(c, 1, 3, kJobTag + 1, "k"); }));
  wrongJob.push_back(rawConnect(port, [](const hs::Challenge& c) { return helloFor(c, 1, 4, kJobTag, "k"); }));
  wrongMagic.push_back(rawConnect(port, [](const hs::Challenge& c) {
    hs::Hello h = helloFor(c, 1, 3, kJobTag, "k");
    h.magic = 0xdeadbeef;
    return h;
  }));

  auto& rs = run.join();
  const double took = secondsSince(t0);
  closeListeners(l);
  std::string why = firstFailure(rs);
  check(why.empty(), "strangers during init: the real mesh still connects", why);
  check(took < 2.5, "... without waiting for the strangers' handshake deadline", std::to_string(took) + " s");
  if (why.empty()) check(meshCarriesData(rs, &why), "... and carries data between the right ranks", why);

  auto verdicts = [](const std::vector<RawExchange>& xs, hs::Verdict v) {
    for (const RawExchange& x : xs) {
      if (!x.gotChallenge || !x.gotAnswer || x.answer.verdict != static_cast<uint16_t>(v) || x.answer.rank != 0) {
        return false;
      }
      for (uint8_t b : x.answer.proof) {
        if (b != 0) return false;  // a rejected connector learns nothing the secret made
      }
    }
    return true;
  };
  check(verdicts(wrongProof, hs::Verdict::kBadProof), "a Hello with a wrong proof gets the verdict 'bad proof'");
  check(verdicts(wrongRank, hs::Verdict::kBadRank), "a Hello claiming rank 0 or 7 gets the verdict 'unexpected rank'");
  check(verdicts(wrongJob, hs::Verdict::kOtherJob), "a Hello with another job tag or size gets 'another job'");
  check(wrongMagic[0].gotChallenge && !wrongMagic[0].gotAnswer, "a Hello with a wrong magic gets no answer");

  bool allClosed = true;
  int open = 0;
  auto closedAll = [&](const std::vector<int>& fds) {
    for (int fd : fds) {
      if (!closedByPeer(fd, 3000)) {
        allClosed = false;
        ++open;
      }
      close(fd);
    }
  };
  closedAll(silent);
  closedAll(noisy);
  for (auto* xs : {&wrongProof, &wrongRank, &wrongJob, &wrongMagic}) {
    std::vector<int> fds;
    for (RawExchange& x : *xs) fds.push_back(x.fd);
    closedAll(fds);
  }
  check(allClosed, "every stranger's connection is closed by rank 0", std::to_string(open) + " still open");

  const std::string log = capture.stop();
  const int drops = countOf(log, "dropped data-plane connection from 127.0.0.1:");
  check(drops == 15, "one WARN line naming the address for each of the 15 strangers", std::to_string(drops) + " lines:\n" + log);
  check(contains(log, "claims rank 1 but its proof does not verify") && contains(log, "claims rank 0, which does not connect") &&
            contains(log, "claims rank 7") && contains(log, "a Hello for another job") && contains(log, "wrong magic") &&
            contains(log, "still unauthenticated when the mesh was complete"),
        "the WARN lines give the reasons", log);
}

void tooManyIdleStrangers() {
  Listeners l;
  listenAll(3, &l);
  StderrCapture capture;
  const int strangers = tcp::kMaxPendingAccepts + 36;
  MeshRun run(l, {"k", "k", "k"}, 20000, {0, 400, 400});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<int> fds;
  for (int i = 0; i < strangers; ++i) fds.push_back(dialRaw(l.addrs[0].port));
  const auto t0 = SteadyClock::now();
  auto& rs = run.join();
  const double took = secondsSince(t0);
  closeListeners(l);
  std::string why = firstFailure(rs);
  check(why.empty(), std::to_string(strangers) + " idle strangers (cap " + std::to_string(tcp::kMaxPendingAccepts) +
                         "): the real mesh still connects", why);
  check(took < 2.0, "... promptly", std::to_string(took) + " s");
  int closed = 0;
  for (int fd : fds) {
    if (fd >= 0 && closedByPeer(fd, 3000)) ++closed;
    if (fd >= 0) close(fd);
  }
  check(closed == strangers, "every idle stranger is closed", std::to_string(closed) + " of " + std::to_string(strangers));
  const std::string log = capture.stop();
  check(contains(log, "unauthenticated connections at once; the oldest makes room"), "the cap is logged", log.substr(0, 2000));
  // Strangers that the kernel queued after the mesh was complete are reset with the listener, unseen.
  int total = 0;
  const size_t summary = log.find(" data-plane connections in all");
  if (summary != std::string::npos) total = std::atoi(log.c_str() + log.rfind("dropped ", summary) + 8);
  check(countOf(log, "dropped data-plane connection from") == 32 && contains(log, "counted, not logged one by one") &&
            total > tcp::kMaxPendingAccepts,
        "dropped connections past the first 32 are counted, not logged one by one",
        log.size() > 1500 ? log.substr(log.size() - 1500) : log);
}

// Rank 0's accept queue is full (a backlog of 1, two strangers in it) when rank 1 dials it, so its kernel
// drops rank 1's SYN; rank 0's loop starts 150 ms later and drains the queue. Rank 1 dials again after
// kFirstConnectWaitMs instead of waiting for the kernel's SYN retry 1 s after the first.
void fullAcceptQueue() {
  Listeners l;
  l.fds.assign(2, -1);
  l.addrs.resize(2);
  for (int r = 0; r < 2; ++r) {
    int port = 0;
    Status st = tcp::listenOn("127.0.0.1", 1, &l.fds[r], &port);
    if (!st.isOk()) {
      std::printf("Bail out! listen: %s\n", describe(st).c_str());
      std::exit(1);
    }
    l.addrs[r] = {"127.0.0.1", port};
  }
  std::vector<int> strangers = {dialRaw(l.addrs[0].port), dialRaw(l.addrs[0].port)};
  StderrCapture capture;
  MeshRun run(l, {"k", "k"}, 20000, {150, 0});
  auto& rs = run.join();
  capture.stop();
  closeListeners(l);
  for (int fd : strangers) {
    if (fd >= 0) close(fd);
  }
  std::string why = firstFailure(rs);
  check(why.empty(), "a peer whose accept queue was full when dialed: the mesh connects", why);
  check(rs[1].seconds < 0.8, "... in " + std::to_string(rs[1].seconds) + " s, before the kernel's SYN retry (1 s)",
        std::to_string(rs[1].seconds) + " s");
}

// The test plays rank 1 and 2 of a job of 3 against a real rank 0, with the right secret.
void duplicatesAndReplays() {
  Listeners l;
  listenAll(3, &l);
  StderrCapture capture;
  Status st0;
  std::vector<int> fds0;
  std::thread rank0([&] {
    tcp::MeshOptions o;
    o.rank = 0;
    o.size = 3;
    o.peers = l.addrs;
    o.jobTag = kJobTag;
    o.secret = "k";
    Deadline deadline(10000);
    st0 = tcp::connectMesh(l.fds[0], o, deadline, &fds0);
  });
  const int port = l.addrs[0].port;
  RawExchange first = rawConnect(port, [](const hs::Challenge& c) { return helloFor(c, 1, 3, kJobTag, "k"); });
  bool acceptorProved = false;
  if (first.gotAnswer) {
    hs::Transcript t;
    t.acceptorNonce = first.challenge.nonce;
    t.connectorNonce = first.hello.nonce;
    t.connectorRank = 1;
    t.acceptorRank = 0;
    t.size = 3;
    t.jobTag = kJobTag;
    acceptorProved = hs::acceptProof("k", t) == first.answer.proof;
  }
  check(first.gotAnswer && first.answer.verdict == 0 && acceptorProved,
        "a Hello built from the protocol's description with the right secret is accepted, and rank 0 proves itself");
  RawExchange second = rawConnect(port, [](const hs::Challenge& c) { return helloFor(c, 1, 3, kJobTag, "k"); });
  check(second.gotAnswer && second.answer.verdict == static_cast<uint16_t>(hs::Verdict::kDuplicate),
        "a second authenticated connection for rank 1 gets the verdict 'duplicate connection'");
  const hs::Hello recorded = first.hello;
  RawExchange replay = rawConnect(port, [&](const hs::Challenge&) { return recorded; });
  check(replay.gotAnswer && replay.answer.verdict == static_cast<uint16_t>(hs::Verdict::kBadProof),
        "a Hello replayed on a new connection fails its proof (the nonce is new)");
  RawExchange reflected = rawConnect(port, [&](const hs::Challenge& c) {
    // Rank 0's accept proof from the first connection, offered back as a connect proof.
    hs::Hello h = helloFor(c, 2, 3, kJobTag, "k");
    h.proof = first.answer.proof;
    return h;
  });
  check(reflected.gotAnswer && reflected.answer.verdict == static_cast<uint16_t>(hs::Verdict::kBadProof),
        "an accept proof reflected as a connect proof is rejected");
  RawExchange rank2 = rawConnect(port, [](const hs::Challenge& c) { return helloFor(c, 2, 3, kJobTag, "k"); });
  rank0.join();
  check(st0.isOk() && rank2.gotAnswer && rank2.answer.verdict == 0, "rank 0 completes with the test's ranks 1 and 2",
        describe(st0));
  for (RawExchange* x : {&first, &second, &replay, &reflected, &rank2}) {
    if (x->fd >= 0) close(x->fd);
  }
  for (int fd : fds0) {
    if (fd >= 0) close(fd);
  }
  const std::string log = capture.stop();
  check(contains(log, "a second authenticated connection from rank 1"), "the duplicate is logged", log);
}

// A fake rank 0 for a real rank 1: whatever it gets wrong, rank 1 fails with kAuth naming rank 0, quickly.
void fakeAcceptors() {
  struct Fake {
    const char* what;
    const char* expect;
    std::function<void(int fd)> play;
  };
  const Fake fakes[] = {
      {"answers with garbage instead of a challenge", "not a hora rank",
       [](int fd) {
         uint8_t junk[hs::kChallengeBytes];
         memset(junk, 0x5a, sizeof(junk));
         writeAll(fd, junk, sizeof(junk));
       }},
      {"is another rank than the peer table says", "the process there is rank 5",
       [](int fd) {
         hs::Challenge c;
         c.rank = 5;
         hs::randomNonce(&c.nonce);
         uint8_t buf[hs::kChallengeBytes];
         hs::encode(c, buf);
         writeAll(fd, buf, sizeof(buf));
       }},
      {"accepts without knowing the secret", "could not prove",
       [](int fd) {
         hs::Challenge c;
         c.rank = 0;
         hs::randomNonce(&c.nonce);
         uint8_t buf[hs::kHelloBytes];
         hs::encode(c, buf);
         writeAll(fd, buf, hs::kChallengeBytes);
         readExact(fd, buf, hs::kHelloBytes, 5000);
         hs::Answer a;
         a.verdict = 0;
         a.rank = 0;
         for (auto& b : a.proof) b = 0x11;
         hs::encode(a, buf);
         writeAll(fd, buf, hs::kAnswerBytes);
       }},
  };
  for (const Fake& f : fakes) {
    Listeners l;
    listenAll(2, &l);
    std::thread fake([&] {
      int fd = accept(l.fds[0], nullptr, nullptr);
      if (fd < 0) return;
      f.play(fd);
      closedByPeer(fd, 5000);
      close(fd);
    });
    tcp::MeshOptions o;
    o.rank = 1;
    o.size = 2;
    o.peers = l.addrs;
    o.jobTag = kJobTag;
    o.secret = "k";
    std::vector<int> fds;
    Deadline deadline(5000);
    const auto t0 = SteadyClock::now();
    Status st = tcp::connectMesh(l.fds[1], o, deadline, &fds);
    const double took = secondsSince(t0);
    fake.join();
    check(st.code() == Code::kAuth && st.peer() == 0 && contains(st.message(), f.expect) && took < 1.5,
          std::string("a fake rank 0 that ") + f.what + ": kAuth naming rank 0 at once",
          describe(st) + " after " + std::to_string(took) + " s");
  }
}


std::string congestionControl(int fd) {
  char name[32] = {0};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return std::string("error: ") + strerror(errno);
  return std::string(name, strnlen(name, len));
}

// Both ends of a connection over a loopback address (listen, connect, accept). Returns false if the
// address family is not available here.
bool loopbackConnection(int family, int* client, int* server) {
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  }
  const int l = socket(family, SOCK_STREAM, 0);
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    if (l >= 0) close(l);
    return false;
  }
  *client = socket(family, SOCK_STREAM, 0);
  const bool ok = connect(*client, reinterpret_cast<sockaddr*>(&ss), len) == 0 && (*server = accept(l, nullptr, nullptr)) >= 0;
  close(l);
  if (!ok) close(*client);
  return ok;
}

// A data-plane connection between two processes of one host uses Reno, which does not pace: under a
// pacing congestion control (BBR) a 1 MiB message over loopback took 3.5 times as long.
void sameHostConnectionsDoNotPace() {
  for (int family : {AF_INET, AF_INET6}) {
    const char* name = family == AF_INET ? "127.0.0.1" : "::1";
    int client = -1, server = -1;
    if (!loopbackConnection(family, &client, &server)) {
      std::printf("ok %d - # SKIP %s: no loopback address of this family here\n", ++gCount, name);
      continue;
    }
    check(tcp::peerOnThisHost(client) && tcp::peerOnThisHost(server), std::string("a connection over ") + name + " is on this host");
    Status a = tcp::configureForDataPlane(client);
    Status b = tcp::configureForDataPlane(server);
    check(a.isOk() && b.isOk(), std::string("configureForDataPlane accepts both ends over ") + name, a.message() + " / " + b.message());
    check(congestionControl(client) == "reno" && congestionControl(server) == "reno",
          std::string("both ends over ") + name + " use Reno",
          congestionControl(client) + " / " + congestionControl(server));
    close(client);
    close(server);
  }
  int unconnected = socket(AF_INET, SOCK_STREAM, 0);
  check(!tcp::peerOnThisHost(unconnected), "a socket with no peer is not on this host");
  close(unconnected);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  testing::startWatchdog();
  equalSecretsConnect();
  listenerClosedAfterInit();
  differentSecrets();
  strangersDuringInit();
  tooManyIdleStrangers();
  fullAcceptQueue();
  duplicatesAndReplays();
  fakeAcceptors();
  sameHostConnectionsDoNotPace();
  return testing::finish();
}
