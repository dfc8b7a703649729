// Tests for the TCP pair's reads (transport/tcp/pair): tryRecvInto, peek/consume and tryRecvAhead, which
// may take bytes beyond what it was asked for and keep them. Over a real TCP connection on 127.0.0.1:
// the stream must come out whole and in order whichever mix of reads takes it, a read ahead must leave
// nothing in the kernel that it could have taken, and bytes read ahead must still be delivered when the
// peer has closed the connection behind them. And its gathered writes (trySendv): pieces that the socket
// takes in part go on from where it stopped, in order.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/tcp_pair_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pieces.h"
#include "tap.h"
#include "transport/tcp/pair.h"

using namespace hora;
using hora::testing::check;

namespace {

// A connected pair of TCP sockets on 127.0.0.1: *a is the reading end, *b the writing end.
bool connectedSockets(int* a, int* b) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return false;
  }
  *b = socket(AF_INET, SOCK_STREAM, 0);
  if (*b < 0 || connect(*b, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return false;
  *a = accept(listener, nullptr, nullptr);
  close(listener);
  return *a >= 0;
}

bool writeAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

int queuedInKernel(int fd) {
  int n = -1;
  ioctl(fd, FIONREAD, &n);
  return n;
}

// Reads len bytes into dst with `read`, retrying while nothing has arrived yet (at most 5 s).
template <typename Read>
Status readFully(Read read, uint8_t* dst, size_t len) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  size_t done = 0;
  while (done < len) {
    size_t got = 0;
    Status st = read(dst + done, len - done, &got);
    if (!st.isOk()) return st;
    done += got;
    if (got == 0) {
      if (std::chrono::steady_clock::now() > until) return Status(Code::kTimeout, "no bytes for 5 s");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return Status::ok();
}

// A stream of frames as the message layer writes them (a 32-byte header, then 0 to 200 KiB), read back
// by a random mix of the three ways of reading, from a writer thread that writes in pieces.
void testMixedReads() {
  int a = -1, b = -1;
  if (!connectedSockets(&a, &b)) return check(false, "mixed reads: connect on 127.0.0.1");
  std::mt19937 rng(12345);
  std::vector<uint8_t> stream;
  std::vector<size_t> parts;
  while (stream.size() < (16u << 20)) {
    const size_t payload = rng() % 3 == 0 ? rng() % (200 * 1024) : rng() % 600;
    parts.push_back(32);
    parts.push_back(payload);
    for (size_t i = 0; i < 32 + payload; ++i) stream.push_back(static_cast<uint8_t>(rng()));
  }
  std::thread writer([&] {
    std::mt19937 wr(7);
    for (size_t at = 0; at < stream.size();) {
      const size_t n = std::min<size_t>(stream.size() - at, 1 + wr() % (96 * 1024));
      if (!writeAll(b, stream.data() + at, n)) break;
      at += n;
    }
  });
  tcp::TcpPair pair(1, a);
  std::vector<uint8_t> out(stream.size());
  size_t at = 0;
  Status st;
  int aheads = 0, peeks = 0, plains = 0;
  for (size_t i = 0; i < parts.size() && st.isOk(); ++i) {
    const size_t len = parts[i];
    const int how = static_cast<int>(rng() % 4);
    if (how == 0 && len > 0 && len <= 1024) {
      // peek/consume, as the collectives read, for what fits its window.
      ++peeks;
      st = readFully([&](uint8_t* dst, size_t n, size_t* got) {
        const uint8_t* in = nullptr;
        Status s = pair.peek(n, &in, got);
        if (s.isOk() && *got > 0) {
          std::memcpy(dst, in, *got);
          pair.consume(*got);
        }
        return s;
      }, out.data() + at, len);
    } else if (how == 1) {
      ++plains;
      st = readFully([&](uint8_t* dst, size_t n, size_t* got) { return pair.tryRecvInto(dst, n, got); }, out.data() + at, len);
    } else {
      ++aheads;
      const size_t ahead = how == 2 ? 4096 : 1 + rng() % 300000;
      st = readFully([&](uint8_t* dst, size_t n, size_t* got) { return pair.tryRecvAhead(dst, n, ahead, got); },
                     out.data() + at, len);
    }
    at += len;
  }
  writer.join();
  close(b);
  check(st.isOk() && at == stream.size() && out == stream,
        "16 MiB of frames read by a mix of " + std::to_string(aheads) + " reads ahead, " + std::to_string(peeks) + " peeks and " +
            std::to_string(plains) + " plain reads come out whole and in order",
        st.isOk() ? "the bytes differ" : st.message());
}

// A header with a small payload and two more headers behind it: one read ahead takes them all, and the
// reads that follow find them without the socket.
void testOneCall() {
  int a = -1, b = -1;
  if (!connectedSockets(&a, &b)) return check(false, "one call: connect on 127.0.0.1");
  std::vector<uint8_t> bytes(32 + 8 + 32 + 32);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  writeAll(b, bytes.data(), bytes.size());
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (queuedInKernel(a) < static_cast<int>(bytes.size()) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  tcp::TcpPair pair(1, a);
  std::vector<uint8_t> out(bytes.size());
  size_t got = 0;
  Status st = pair.tryRecvAhead(out.data(), 32, 4096, &got);
  const int leftInKernel = queuedInKernel(a);
  check(st.isOk() && got == 32 && leftInKernel == 0, "a header read ahead takes the payload and the frames behind it in the same call",
        "got " + std::to_string(got) + ", " + std::to_string(leftInKernel) + " bytes left in the kernel");
  // The peer goes; what was read ahead is still delivered, in order, and then the loss is reported.
  close(b);
  size_t more = 0, rest = 0;
  Status st2 = pair.tryRecvInto(out.data() + 32, 8, &more);
  Status st3 = pair.tryRecvAhead(out.data() + 40, 64, 4096, &rest);
  check(st2.isOk() && more == 8 && st3.isOk() && rest == 64 && out == bytes, "bytes read ahead are delivered after the peer has closed");
  size_t none = 0;
  Status st4;
  for (int i = 0; i < 1000 && st4.isOk(); ++i) st4 = pair.tryRecvAhead(out.data(), 32, 4096, &none);
  check(st4.code() == Code::kPeerLost && st4.message().find("closed by the peer") != std::string::npos,
        "then a read ahead reports the closed connection", std::string(codeName(st4.code())) + " " + st4.message());
}

// Reads ahead of nothing: ahead 0 reads exactly as tryRecvInto does, and leaves the rest in the kernel.
void testNoAhead() {
  int a = -1, b = -1;
  if (!connectedSockets(&a, &b)) return check(false, "no ahead: connect on 127.0.0.1");
  uint8_t bytes[64];
  for (int i = 0; i < 64; ++i) bytes[i] = static_cast<uint8_t>(i);
  writeAll(b, bytes, sizeof(bytes));
  tcp::TcpPair pair(1, a);
  uint8_t out[32];
  Status st = readFully([&](uint8_t* dst, size_t n, size_t* got) { return pair.tryRecvAhead(dst, n, 0, got); }, out, 32);
  check(st.isOk() && std::memcmp(out, bytes, 32) == 0 && queuedInKernel(a) == 32, "ahead 0 takes only what was asked for");
  close(b);
}

// Gathered writes: one call takes at most kMaxSendPieces pieces; then, into a small send buffer, runs of
// up to 80 pieces (empty ones among them) go out in part and are offered again from where the socket
// stopped. The reader gets every byte, in order.
void testGatheredWrites() {
  int a = -1, b = -1;
  if (!connectedSockets(&a, &b)) return check(false, "gathered writes: connect on 127.0.0.1");
  std::mt19937 rng(99);
  std::vector<uint8_t> stream(8u << 20);
  for (auto& x : stream) x = static_cast<uint8_t>(rng());
  std::vector<uint8_t> out(stream.size());
  tcp::TcpPair pair(1, b);
  // 80 pieces of 10 bytes fit the socket: the call takes the first kMaxSendPieces of them.
  iovec first[80];
  for (int i = 0; i < 80; ++i) first[i] = {stream.data() + 10 * i, 10};
  size_t firstTaken = 0;
  Status firstSt = pair.trySendv(first, 80, &firstTaken);
  check(firstSt.isOk() && firstTaken == 10u * Pair::kMaxSendPieces, "one call takes at most kMaxSendPieces pieces",
        "took " + std::to_string(firstTaken) + " bytes");
  int small = 16 * 1024;
  setsockopt(b, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  std::thread reader([&] {
    size_t at = 0;
    while (at < out.size()) {
      ssize_t r = read(a, out.data() + at, std::min<size_t>(out.size() - at, 1 + rng() % (256 * 1024)));
      if (r <= 0) break;
      at += static_cast<size_t>(r);
    }
  });
  std::mt19937 cut(5);
  size_t at = firstTaken, calls = 0, partial = 0;
  Status st;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (at < stream.size() && st.isOk() && std::chrono::steady_clock::now() < until) {
    iovec iov[80];
    size_t offeredCapped = 0;
    const int n = testing::cutPieces(stream, at, cut, 5, 64 * 1024, iov, 80, &offeredCapped);
    size_t taken = 0;
    st = pair.trySendv(iov, n, &taken);
    ++calls;
    if (taken < offeredCapped) ++partial;
    if (taken > offeredCapped) break;
    at += taken;
    if (taken == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  shutdown(b, SHUT_WR);
  reader.join();
  check(st.isOk() && at == stream.size() && out == stream,
        "8 MiB gathered in runs of up to 80 pieces come out whole and in order (" + std::to_string(calls) + " calls, " +
            std::to_string(partial) + " taken in part)",
        st.isOk() ? "wrote " + std::to_string(at) + " bytes; the bytes read differ or are missing" : st.message());
  check(partial > 0, "the small send buffer made some calls write only part of what they were offered");
}

}  // namespace

int main() {
  testing::startWatchdog();
  testOneCall();
  testNoAhead();
  testMixedReads();
  testGatheredWrites();
  return testing::finish();
}
