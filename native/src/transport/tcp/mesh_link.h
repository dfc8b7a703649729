// One data-plane connection while connectMesh (connect.h) sets it up, in either direction: the step its
// handshake is at, the handshake message going out and the one coming in, and the non-blocking send and
// receive of those messages.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "transport/tcp/handshake.h"

namespace hora {
namespace tcp {

constexpr size_t kMaxMessageBytes = handshake::kHelloBytes;
static_assert(handshake::kChallengeBytes <= kMaxMessageBytes && handshake::kAnswerBytes <= kMaxMessageBytes,
              "every handshake message fits a Link's buffers");

// One connection being set up, in either direction.
struct Link {
  enum class Step {
    kRetryWait,       // outgoing: waiting to dial again (no socket)
    kConnecting,      // outgoing: non-blocking connect() in progress
    kAwaitChallenge,  // outgoing
    kSendHello,       // outgoing
    kAwaitAnswer,     // outgoing
    kSendChallenge,   // incoming
    kAwaitHello,      // incoming
    kSendAnswer,      // incoming: accepted; the socket is handed over once the answer is out
    kSendRejection,   // incoming: rejected; closed once the answer is out (or cannot go out)
    kDone,            // handed over or closed; removed at the end of the round
  };
  int fd = -1;
  bool outgoing = false;
  int peer = -1;       // outgoing: the rank dialed; incoming: the rank an accepted Hello proved
  std::string remote;  // "addr:port", for log lines and errors
  Step step = Step::kDone;
  Clock::time_point acceptedAt;  // incoming
  Clock::time_point expires;     // incoming: the end of its own handshake deadline
  Clock::time_point retryAt;     // outgoing, in kRetryWait
  Clock::time_point redialAt;    // outgoing, in kConnecting: dial again if the SYN has had no answer by then
  int attempts = 0;              // outgoing: dials so far
  int unanswered = 0;            // outgoing: dials in a row whose SYN had no answer
  std::string lastError;         // outgoing: why the last attempt failed
  sockaddr_in address{};         // outgoing: where to dial
  uint8_t out[kMaxMessageBytes];
  size_t outLen = 0, outDone = 0;
  uint8_t in[kMaxMessageBytes];
  size_t inLen = 0, inDone = 0;
  handshake::Nonce myNonce{};
  handshake::Nonce peerNonce{};

  // Counted against kMaxPendingAccepts: accepted, not yet judged.
  bool pendingIncoming() const { return !outgoing && (step == Step::kSendChallenge || step == Step::kAwaitHello); }
  // Bound by its own handshake deadline: accepted and not yet handed over or closed.
  bool openIncoming() const { return !outgoing && step != Step::kDone; }
  short pollEvents() const {
    switch (step) {
      case Step::kAwaitChallenge:
      case Step::kAwaitAnswer:
      case Step::kAwaitHello:
        return POLLIN;
      case Step::kRetryWait:
      case Step::kDone:
        return 0;
      default:
        return POLLOUT;
    }
  }
  void expect(size_t len) {
    inLen = len;
    inDone = 0;
  }
  void closeSocket() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

enum class Io { kWaiting, kComplete, kFailed };

// Sends what is left of l.out; on kFailed, *why says why.
Io pumpOut(Link& l, std::string* why);
// Reads no more than the message expected, so bytes that follow the handshake stay in the socket.
Io pumpIn(Link& l, std::string* why);

}  // namespace tcp
}  // namespace hora
