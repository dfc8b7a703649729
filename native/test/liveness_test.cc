// Tests for the one liveness rule (transport/liveness): what checkPeer() makes of a peer's quiet sockets,
// and the words, code and peer of each error, for a collective's wait and for the messages'. Over
// connected Unix stream sockets standing in for a pair's liveness and notice sockets.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/liveness_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed.
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tap.h"
#include "transport/liveness.h"

using namespace hora;
using hora::testing::check;

namespace {

// A pair that is nothing but its sockets: checkPeer() looks at nothing else.
class SocketsOnly : public Pair {
 public:
  SocketsOnly(int peer, int livenessFd, int noticeFd) : Pair(peer), liveness_(livenessFd), notice_(noticeFd) {}
  Status trySend(const uint8_t*, size_t, size_t* taken) override {
    *taken = 0;
    return Status::ok();
  }
  Status tryRecvInto(uint8_t*, size_t, size_t* got) override {
    *got = 0;
    return Status::ok();
  }
  Status peek(size_t, const uint8_t**, size_t* avail) override {
    *avail = 0;
    return Status::ok();
  }
  void consume(size_t) override {}
  int pollFd() const override { return -1; }
  int livenessFd() const override { return liveness_; }
  int noticeFd() const override { return notice_; }
  Status skipThrough(MarkerScan*, bool* found) override {
    *found = false;
    return Status::ok();
  }

 private:
  int liveness_;
  int notice_;
};

struct Sockets {
  int mine = -1;    // this rank's end
  int theirs = -1;  // the peer's end
  Sockets() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0) {
      mine = fds[0];
      theirs = fds[1];
    }
  }
  ~Sockets() {
    if (mine >= 0) close(mine);
    if (theirs >= 0) close(theirs);
  }
  void peerSays() const {
    const char byte = 'N';
    ssize_t ignored = write(theirs, &byte, 1);
    (void)ignored;
  }
  void peerGoes() {
    close(theirs);
    theirs = -1;
  }
};

std::string describe(const Status& st) {
  return std::string(codeName(st.code())) + " peer " + std::to_string(st.peer()) + ": " + st.message();
}

// st is ERR_PEER_LOST naming peer 3 with exactly this message.
void expectLost(const Status& st, const std::string& message, const std::string& what) {
  check(st.code() == Code::kPeerLost && st.peer() == 3 && st.message() == message, what, describe(st));
}

void quietPeer() {
  Sockets liveness, notice;
  SocketsOnly shared(3, liveness.mine, liveness.mine);
  SocketsOnly data(3, liveness.mine, -1);
  check(checkPeer(shared, shared.noticeFd(), 0, Waiter::kCollective).isOk(), "a quiet shared-memory peer is there");
  check(checkPeer(data, notice.mine, 0, Waiter::kMessage).isOk(), "a quiet message channel's peer is there");
  SocketsOnly none(3, -1, -1);
  check(checkPeer(none, -1, 0, Waiter::kMessage).isOk(), "a pair without sockets is taken as there");
}

void notices() {
  {
    // Shared memory: the liveness socket is the notice socket, and a byte on it is a notice.
    Sockets s;
    SocketsOnly pair(3, s.mine, s.mine);
    s.peerSays();
    expectLost(checkPeer(pair, pair.noticeFd(), 0, Waiter::kCollective),
               "rank 3 ended this collective after a failure of its own (rank 0 waited on it)",
               "a byte on a shared-memory pair's socket: the collective's error says the peer's work failed");
    expectLost(checkPeer(pair, pair.noticeFd(), 0, Waiter::kMessage), "rank 3 ended its work after a failure of its own",
               "the same for a message's wait");
    check(noticeWaiting(s.mine), "the notice is peeked, not taken");
  }
  {
    // A message channel: its liveness socket carries data; the notice comes on the collectives' pair's.
    Sockets channel, notice;
    SocketsOnly pair(3, channel.mine, -1);
    channel.peerSays();
    check(checkPeer(pair, notice.mine, 0, Waiter::kMessage).isOk(), "a byte on a data socket is data, not a notice");
    notice.peerSays();
    expectLost(checkPeer(pair, notice.mine, 0, Waiter::kMessage), "rank 3 ended its work after a failure of its own",
               "a byte on the notice socket: the message's error says the peer's work failed");
  }
  {
    Sockets s;
    check(!noticeWaiting(s.mine), "noticeWaiting: nothing on a quiet socket");
    s.peerSays();
    check(noticeWaiting(s.mine), "noticeWaiting: a byte");
  }
}

void gone() {
  {
    Sockets s;
    SocketsOnly pair(3, s.mine, s.mine);
    s.peerGoes();
    expectLost(checkPeer(pair, pair.noticeFd(), 0, Waiter::kCollective),
               "rank 3 is gone (its connection closed while it shared memory with rank 0)",
               "a shared-memory peer's closed socket: gone, for a collective");
  }
  {
    Sockets channel, notice;
    SocketsOnly pair(3, channel.mine, -1);
    channel.peerGoes();
    expectLost(checkPeer(pair, notice.mine, 0, Waiter::kMessage), "rank 3 is gone (its connection to rank 0 closed)",
               "a message channel's closed socket: gone, for a message");
    expectLost(checkPeer(pair, -1, 0, Waiter::kMessage), "rank 3 is gone (its connection to rank 0 closed)",
               "the same without a notice socket");
  }
  {
    Sockets s;
    s.peerGoes();
    Status st = sendingPeerLostStatus(s.mine, 3, 0);
    const std::string start = "connection to rank 3 was closed by the peer while rank 0 was sending to it";
    check(st.code() == Code::kPeerLost && st.peer() == 3 && st.message().compare(0, start.size(), start) == 0,
          "a send's socket hung up: ERR_PEER_LOST naming the peer", describe(st));
  }
}

}  // namespace

int main() {
  hora::testing::startWatchdog(30);
  quietPeer();
  notices();
  gone();
  return hora::testing::finish();
}
