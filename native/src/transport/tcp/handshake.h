// The data-plane handshake's wire messages and proofs (the protocol is described in connect.h).
//
// Every message has a fixed size and is encoded field by field, little-endian, so decoding cannot read
// past the bytes received; what the fields say is checked by the caller, which knows what to expect.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/sha256.h"
#include "common/status.h"

namespace hora {
namespace tcp {
namespace handshake {

constexpr uint32_t kMagic = 0x41524f48;  // "HORA" little-endian
constexpr uint16_t kVersion = 2;         // 1: unauthenticated Hello exchange
constexpr size_t kNonceBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;

// Acceptor -> connector, right after accept.
struct Challenge {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  int32_t rank = -1;  // the acceptor's rank
  Nonce nonce{};
};
constexpr size_t kChallengeBytes = 44;

// Connector -> acceptor.
struct Hello {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  int32_t rank = -1;  // the connector's rank
  int32_t size = 0;
  uint64_t jobTag = 0;
  Nonce nonce{};
  Sha256Digest proof{};  // connectProof()
};
constexpr size_t kHelloBytes = 88;

// What the acceptor made of a well-formed Hello.
enum class Verdict : uint16_t {
  kAccepted = 0,
  kBadProof = 1,   // the connector's proof does not verify: it has a different secret
  kOtherJob = 2,   // the job tag or world size differs
  kBadRank = 3,    // the claimed rank does not connect to this one
  kDuplicate = 4,  // this rank already has an authenticated connection from that rank
};
const char* verdictName(uint16_t verdict);

// Acceptor -> connector, in answer to a Hello; the proof is all zeros unless accepted.
struct Answer {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t verdict = 0;
  int32_t rank = -1;  // the acceptor's rank
  Sha256Digest proof{};  // acceptProof()
};
constexpr size_t kAnswerBytes = 44;

void encode(const Challenge& m, uint8_t out[kChallengeBytes]);
void encode(const Hello& m, uint8_t out[kHelloBytes]);
void encode(const Answer& m, uint8_t out[kAnswerBytes]);
Challenge decodeChallenge(const uint8_t in[kChallengeBytes]);
Hello decodeHello(const uint8_t in[kHelloBytes]);
Answer decodeAnswer(const uint8_t in[kAnswerBytes]);

// What both proofs of one connection cover.
struct Transcript {
  Nonce acceptorNonce{};
  Nonce connectorNonce{};
  int32_t connectorRank = -1;
  int32_t acceptorRank = -1;
  int32_t size = 0;
  uint64_t jobTag = 0;
};
Sha256Digest connectProof(const std::string& secret, const Transcript& t);
Sha256Digest acceptProof(const std::string& secret, const Transcript& t);

// Fills nonce from the kernel's random source (getrandom(2), else /dev/urandom).
Status randomNonce(Nonce* nonce);

}  // namespace handshake
}  // namespace tcp
}  // namespace hora
