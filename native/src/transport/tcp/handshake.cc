#include "transport/tcp/handshake.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace hora {
namespace tcp {
namespace handshake {
namespace {

class Writer {
 public:
  explicit Writer(uint8_t* out) : p_(out) {}
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void bytes(const uint8_t* b, size_t n) {
    memcpy(p_, b, n);
    p_ += n;
  }
  uint8_t* at() const { return p_; }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) *p_++ = static_cast<uint8_t>(v >> (8 * i));
  }
  uint8_t* p_;
};

class Reader {
 public:
  explicit Reader(const uint8_t* in) : p_(in) {}
  uint16_t u16() { return static_cast<uint16_t>(le(2)); }
  uint32_t u32() { return static_cast<uint32_t>(le(4)); }
  uint64_t u64() { return le(8); }
  void bytes(uint8_t* b, size_t n) {
    memcpy(b, p_, n);
    p_ += n;
  }

 private:
  uint64_t le(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(*p_++) << (8 * i);
    return v;
  }
  const uint8_t* p_;
};

Sha256Digest proof(const char* label, const std::string& secret, const Transcript& t) {
  // The label's terminating zero is part of the input, so no label is a prefix of another's input.
  const size_t labelLen = strlen(label) + 1;
  std::vector<uint8_t> data(labelLen + 2 * kNonceBytes + 3 * 4 + 8);
  Writer w(data.data());
  w.bytes(reinterpret_cast<const uint8_t*>(label), labelLen);
  w.bytes(t.acceptorNonce.data(), kNonceBytes);
  w.bytes(t.connectorNonce.data(), kNonceBytes);
  w.u32(static_cast<uint32_t>(t.connectorRank));
  w.u32(static_cast<uint32_t>(t.acceptorRank));
  w.u32(static_cast<uint32_t>(t.size));
  w.u64(t.jobTag);
  return hmacSha256(secret.data(), secret.size(), data.data(), data.size());
}

}  // namespace

const char* verdictName(uint16_t verdict) {
  switch (static_cast<Verdict>(verdict)) {
    case Verdict::kAccepted: return "accepted";
    case Verdict::kBadProof: return "bad proof";
    case Verdict::kOtherJob: return "another job";
    case Verdict::kBadRank: return "unexpected rank";
    case Verdict::kDuplicate: return "duplicate connection";
  }
  return "unknown verdict";
}

void encode(const Challenge& m, uint8_t out[kChallengeBytes]) {
  Writer w(out);
  w.u32(m.magic);
  w.u16(m.version);
  w.u16(0);
  w.u32(static_cast<uint32_t>(m.rank));
  w.bytes(m.nonce.data(), kNonceBytes);
}

void encode(const Hello& m, uint8_t out[kHelloBytes]) {
  Writer w(out);
  w.u32(m.magic);
  w.u16(m.version);
  w.u16(0);
  w.u32(static_cast<uint32_t>(m.rank));
  w.u32(static_cast<uint32_t>(m.size));
  w.u64(m.jobTag);
  w.bytes(m.nonce.data(), kNonceBytes);
  w.bytes(m.proof.data(), kSha256Bytes);
}

void encode(const Answer& m, uint8_t out[kAnswerBytes]) {
  Writer w(out);
  w.u32(m.magic);
  w.u16(m.version);
  w.u16(m.verdict);
  w.u32(static_cast<uint32_t>(m.rank));
  w.bytes(m.proof.data(), kSha256Bytes);
}

Challenge decodeChallenge(const uint8_t in[kChallengeBytes]) {
  Reader r(in);
  Challenge m;
  m.magic = r.u32();
  m.version = r.u16();
  r.u16();
  m.rank = static_cast<int32_t>(r.u32());
  r.bytes(m.nonce.data(), kNonceBytes);
  return m;
}

Hello decodeHello(const uint8_t in[kHelloBytes]) {
  Reader r(in);
  Hello m;
  m.magic = r.u32();
  m.version = r.u16();
  r.u16();
  m.rank = static_cast<int32_t>(r.u32());
  m.size = static_cast<int32_t>(r.u32());
  m.jobTag = r.u64();
  r.bytes(m.nonce.data(), kNonceBytes);
  r.bytes(m.proof.data(), kSha256Bytes);
  return m;
}

Answer decodeAnswer(const uint8_t in[kAnswerBytes]) {
  Reader r(in);
  Answer m;
  m.magic = r.u32();
  m.version = r.u16();
  m.verdict = r.u16();
  m.rank = static_cast<int32_t>(r.u32());
  r.bytes(m.proof.data(), kSha256Bytes);
  return m;
}

Sha256Digest connectProof(const std::string& secret, const Transcript& t) {
  return proof("hora-dp-1 connect", secret, t);
}

Sha256Digest acceptProof(const std::string& secret, const Transcript& t) {
  return proof("hora-dp-1 accept", secret, t);
}

Status randomNonce(Nonce* nonce) {
  uint8_t* p = nonce->data();
  size_t left = nonce->size();
  while (left > 0) {
    ssize_t n = getrandom(p, left, 0);
    if (n > 0) {
      p += n;
      left -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOSYS) break;
    return Status(Code::kInternal, std::string("getrandom: ") + strerror(errno));
  }
  if (left == 0) return Status::ok();
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status(Code::kInternal, std::string("open /dev/urandom: ") + strerror(errno));
  while (left > 0) {
    ssize_t n = read(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return Status(Code::kInternal, "cannot read /dev/urandom");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  close(fd);
  return Status::ok();
}

}  // namespace handshake
}  // namespace tcp
}  // namespace hora
