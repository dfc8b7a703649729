// Tests for the collectives (native/src/algorithms) and the agreement (native/src/engine/agreement), with
// every rank a thread of this one process.
//
// As in Gloo's tests, each rank owns a Context that listens on an ephemeral port of 127.0.0.1, and all
// ranks connect concurrently, each from its own thread. One hostId for every rank gives shared memory,
// TransportChoice::kTcp gives TCP, and the mixed worlds put ranks {0,1}, {2,3}, {4,5} on three "hosts", so
// pairs on one host use shared memory and the others TCP. The sweep is transport x world size x element
// count x algorithm x dtype x op, each result checked against a scalar reference and for identical bytes on
// every rank. Inputs are small integers (signed powers of two for prod), so every partial result is exact
// and the reference does not depend on the order in which the ranks combined their data.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/algorithms_test
// Prints "ok N - what" or "not ok N - what: details" per group of cases (tap.h); exits 1 if any failed.
// HORA_TEST_WATCHDOG_S (default 240) bounds the whole run, so a hang fails instead of blocking CI.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"
#include "common/status.h"
#include "common/types.h"
#include "engine/agreement.h"
#include "engine/layout.h"
#include "engine/probe.h"
#include "engine/work.h"
#include "reduce/reduce.h"
#include "tap.h"
#include "transport/context.h"
#include "transport/shm/single_copy.h"

using namespace hora;

namespace {

using SteadyClock = std::chrono::steady_clock;

double secondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// ---------------------------------------------------------------------------------------------------
// Reporting: one line per group of cases, so the output stays readable while the sweep stays wide.

class Check {
 public:
  explicit Check(std::string what) : what_(std::move(what)), start_(SteadyClock::now()) { testing::setCurrent(what_); }
  ~Check() {
    if (failures_ == 0) {
      char took[64];
      std::snprintf(took, sizeof took, " (%d cases, %.2f s)", cases_, secondsSince(start_));
      testing::check(true, what_ + took);
    } else {
      std::string details;
      for (const std::string& d : details_) details += (details.empty() ? "" : "; ") + d;
      testing::check(false, what_, std::to_string(failures_) + " of " + std::to_string(cases_) + " cases failed: " + details);
    }
  }
  void pass() { ++cases_; }
  void fail(const std::string& detail) {
    ++cases_;
    ++failures_;
    if (details_.size() < 3) details_.push_back(detail);
  }
  void expect(bool cond, const std::string& detail) {
    if (cond) pass();
    else fail(detail);
  }

 private:
  std::string what_;
  SteadyClock::time_point start_;
  int cases_ = 0;
  int failures_ = 0;
  std::vector<std::string> details_;
};

// ---------------------------------------------------------------------------------------------------
// Worlds: `size` Contexts in this process, connected to each other.

enum class Net { kShm, kTcp, kMixed };

const char* netName(Net n) {
  switch (n) {
    case Net::kShm: return "shm";
    case Net::kTcp: return "tcp";
    case Net::kMixed: return "mixed";
  }
  return "?";
}

std::string hostIdOf(Net net, int rank) { return net == Net::kMixed ? "host" + std::to_string(rank / 2) : "host0"; }

bool expectSharedMemory(Net net, int a, int b) {
  return net == Net::kShm || (net == Net::kMixed && a / 2 == b / 2);
}

// Shared-memory segment names derive from the job id, so every world gets its own.
std::string newJobId() {
  static std::atomic<int> counter{0};
  return "algtest-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

std::string describeStatus(const Status& st) { return std::string(codeName(st.code())) + " " + st.message(); }

struct World {
  Net net = Net::kTcp;
  int size = 0;
  std::vector<std::unique_ptr<Context>> ctx;
  bool broken = false;  // a fatal failure left the connections out of step
  uint64_t seq = 0;     // next agreement sequence number
  std::string name() const { return std::string(netName(net)) + " size=" + std::to_string(size); }
};

Status connectWorld(Net net, int size, int64_t timeoutMs, World* w) {
  w->net = net;
  w->size = size;
  w->broken = false;
  w->seq = 0;
  w->ctx.clear();
  std::vector<PeerInfo> peers(size);
  for (int r = 0; r < size; ++r) {
    w->ctx.push_back(std::make_unique<Context>(r, size, timeoutMs));
    int port = 0;
    Status st = w->ctx[r]->listen("127.0.0.1", &port);
    if (!st.isOk()) return Status(st.code(), "rank " + std::to_string(r) + " listen: " + st.message());
    int localRank = 0;
    for (int q = 0; q < r; ++q) localRank += hostIdOf(net, q) == hostIdOf(net, r) ? 1 : 0;
    peers[r] = PeerInfo{r, hostIdOf(net, r), "127.0.0.1", port, localRank};
  }
  const std::string jobId = newJobId();
  const TransportChoice choice = net == Net::kTcp ? TransportChoice::kTcp : TransportChoice::kAuto;
  std::vector<Status> st(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { st[r] = w->ctx[r]->connect(peers, jobId, "algtest-secret", choice); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!st[r].isOk()) {
      w->broken = true;
      return Status(st[r].code(), "rank " + std::to_string(r) + " connect: " + st[r].message());
    }
  }
  return Status::ok();
}

bool isFatal(Code c) { return c != Code::kOk && c != Code::kMismatch && c != Code::kInvalidArgument; }

// Runs body on every rank at once, each in its own thread, with a fresh collective deadline.
std::vector<Status> onEveryRank(World& w, const std::function<Status(int, Context&)>& body) {
  std::vector<Status> st(w.size);
  std::vector<std::thread> threads;
  for (int r = 0; r < w.size; ++r) {
    threads.emplace_back([&, r] {
      Context& c = *w.ctx[r];
      c.startDeadline();
      st[r] = body(r, c);
      // As the engine does: a rank that fails for good hangs up, so peers blocked on it fail at once.
      if (isFatal(st[r].code())) c.hangUp();
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : st) {
    if (isFatal(s.code())) w.broken = true;
  }
  return st;
}

std::string firstFailure(const std::vector<Status>& st) {
  for (size_t r = 0; r < st.size(); ++r) {
    if (!st[r].isOk()) return "rank " + std::to_string(r) + " returned " + describeStatus(st[r]);
  }
  return "";
}

// ---------------------------------------------------------------------------------------------------
// Elements and the scalar reference.

const DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kFloat16,
                         DType::kBFloat16, DType::kInt8, DType::kInt16, DType::kUint16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd};
const Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kAuto};

constexpr size_t kGuardBytes = 64;  // after every buffer, to catch writes past its end
constexpr uint8_t kGuardByte = 0xA5;

double load(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::kFloat32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::kFloat64: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case DType::kFloat16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return halfToFloat(v); }
    case DType::kBFloat16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return bfloat16ToFloat(v); }
    case DType::kInt32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::kInt64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case DType::kUint8: return p[i];
    case DType::kInt8: return static_cast<int8_t>(p[i]);
    case DType::kInt16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DType::kUint16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
  }
  return 0;
}

void store(DType t, uint8_t* p, size_t i, double v) {
  switch (t) {
    case DType::kFloat32: { float f = static_cast<float>(v); std::memcpy(p + 4 * i, &f, 4); return; }
    case DType::kFloat64: std::memcpy(p + 8 * i, &v, 8); return;
    case DType::kFloat16: { uint16_t h = floatToHalf(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); return; }
    case DType::kBFloat16: { uint16_t h = floatToBfloat16(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); return; }
    case DType::kInt32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p + 4 * i, &x, 4); return; }
    case DType::kInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p + 8 * i, &x, 8); return; }
    case DType::kUint8: p[i] = static_cast<uint8_t>(v); return;
    case DType::kInt8: p[i] = static_cast<uint8_t>(static_cast<int8_t>(v)); return;
    case DType::kInt16: { int16_t x = static_cast<int16_t>(v); std::memcpy(p + 2 * i, &x, 2); return; }
    case DType::kUint16: { uint16_t x = static_cast<uint16_t>(v); std::memcpy(p + 2 * i, &x, 2); return; }
  }
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Chosen so that sums over six ranks and products of six values are exact in every dtype, bfloat16's
// eight significant bits included, and so that min and max pick different ranks at different elements.
double inputValue(DType t, ReduceOp op, int rank, size_t i, uint64_t salt) {
  const uint64_t h = mix(i * 0x100000001B3ull + static_cast<uint64_t>(rank) * 0x51ED27ull + salt);
  if (op == ReduceOp::kProd) {
    static const double kFactors[4] = {1, -1, 2, -2};
    return t == DType::kUint16 ? (kFactors[h & 3] < 0 ? -kFactors[h & 3] : kFactors[h & 3]) : kFactors[h & 3];  // unsigned: no negative factors
  }
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat64: return static_cast<double>(static_cast<int64_t>(h % 2001) - 1000) / 8;
    case DType::kFloat16:
    case DType::kBFloat16: return static_cast<double>(static_cast<int64_t>(h % 17) - 8);
    case DType::kInt32: return static_cast<double>(static_cast<int64_t>(h % 2000001) - 1000000);
    case DType::kInt64: return static_cast<double>((static_cast<int64_t>(h % 2000001) - 1000000) * (int64_t(1) << 30));
    case DType::kUint8: return static_cast<double>(h % 40);
    case DType::kInt8: return static_cast<double>(static_cast<int64_t>(h % 41) - 20);
    case DType::kInt16: return static_cast<double>(static_cast<int64_t>(h % 10001) - 5000);
    case DType::kUint16: return static_cast<double>(h % 10000);
  }
  return 0;
}

std::vector<uint8_t> makeInput(DType t, ReduceOp op, int rank, size_t count, uint64_t salt) {
  std::vector<uint8_t> b(count * dtypeSize(t) + kGuardBytes, kGuardByte);
  for (size_t i = 0; i < count; ++i) store(t, b.data(), i, inputValue(t, op, rank, i, salt));
  return b;
}

// The reduction of inputs[*][0, count): exact in double, then rounded once into the dtype, as the kernels
// do for kAvg (floats divide in their own precision, 16-bit floats in float32, integers truncate).
std::vector<uint8_t> reference(DType t, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs, size_t count,
                               bool divideAvg = true) {
  const int p = static_cast<int>(inputs.size());
  std::vector<uint8_t> out(count * dtypeSize(t));
  for (size_t i = 0; i < count; ++i) {
    double acc = load(t, inputs[0].data(), i);
    for (int r = 1; r < p; ++r) {
      const double v = load(t, inputs[r].data(), i);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: acc += v; break;
        case ReduceOp::kMin: acc = v < acc ? v : acc; break;
        case ReduceOp::kMax: acc = v > acc ? v : acc; break;
        case ReduceOp::kProd: acc *= v; break;
      }
    }
    if (op == ReduceOp::kAvg && divideAvg && p > 1) {
      switch (t) {
        case DType::kFloat64: acc = acc / p; break;
        case DType::kFloat32:
        case DType::kFloat16:
        case DType::kBFloat16: acc = static_cast<float>(acc) / static_cast<float>(p); break;
        default: acc = static_cast<double>(static_cast<int64_t>(acc) / p); break;
      }
    }
    store(t, out.data(), i, acc);
  }
  return out;
}

// The reduction of a scaled collective (prescaleFactor pre, postscaleFactor post): each input times pre
// (exact for the inputs above and pre a power of two), combined exactly, then finished as the last step
// does it, in the dtype's compute type: divided by p for kAvg, times post, rounded once into the dtype.
std::vector<uint8_t> scaledReference(DType t, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs, size_t count,
                                     const Scaling& s) {
  const int p = static_cast<int>(inputs.size());
  std::vector<uint8_t> out(count * dtypeSize(t));
  for (size_t i = 0; i < count; ++i) {
    double acc = load(t, inputs[0].data(), i) * s.pre;
    for (int r = 1; r < p; ++r) {
      const double v = load(t, inputs[r].data(), i) * s.pre;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: acc += v; break;
        case ReduceOp::kMin: acc = v < acc ? v : acc; break;
        case ReduceOp::kMax: acc = v > acc ? v : acc; break;
        case ReduceOp::kProd: acc *= v; break;
      }
    }
    const int divisor = op == ReduceOp::kAvg ? p : 1;
    if (t == DType::kFloat64) {
      acc = acc / divisor * s.post;
    } else {
      float f = static_cast<float>(acc);
      f = f / static_cast<float>(divisor);
      f = f * static_cast<float>(s.post);
      acc = f;
    }
    store(t, out.data(), i, acc);
  }
  return out;
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// "" when got[0, count) equals want; otherwise where and how it differs.
std::string compareElements(DType t, const uint8_t* want, const uint8_t* got, size_t count, const std::string& who) {
  const size_t elem = dtypeSize(t);
  if (count == 0 || std::memcmp(want, got, count * elem) == 0) return "";
  size_t i = 0;
  while (std::memcmp(want + i * elem, got + i * elem, elem) == 0) ++i;
  size_t wrong = 0;
  for (size_t j = 0; j < count; ++j) wrong += std::memcmp(want + j * elem, got + j * elem, elem) != 0 ? 1 : 0;
  return who + ": element " + std::to_string(i) + " is " + fmt(load(t, got, i)) + ", expected " +
         fmt(load(t, want, i)) + " (" + std::to_string(wrong) + " of " + std::to_string(count) + " wrong)";
}

bool guardIntact(const std::vector<uint8_t>& b, size_t bytes) {
  for (size_t i = bytes; i < b.size(); ++i) {
    if (b[i] != kGuardByte) return false;
  }
  return true;
}

// "" when every rank's [0, bytes) is identical and nothing was written past it.
std::string identicalOnEveryRank(const std::vector<std::vector<uint8_t>>& bufs, size_t bytes) {
  for (size_t r = 0; r < bufs.size(); ++r) {
    if (!guardIntact(bufs[r], bytes)) return "rank " + std::to_string(r) + " wrote past the end of its buffer";
    if (r > 0 && bytes > 0 && std::memcmp(bufs[0].data(), bufs[r].data(), bytes) != 0) {
      return "rank " + std::to_string(r) + "'s result bytes differ from rank 0's";
    }
  }
  return "";
}

// "" when every rank holds `want` and the same bytes; otherwise names the first rank that does not.
std::string expectOnEveryRank(DType t, const std::vector<uint8_t>& want, const std::vector<std::vector<uint8_t>>& bufs) {
  const size_t count = want.size() / dtypeSize(t);
  for (size_t r = 0; r < bufs.size(); ++r) {
    std::string err = compareElements(t, want.data(), bufs[r].data(), count, "rank " + std::to_string(r));
    if (!err.empty()) return err;
  }
  return identicalOnEveryRank(bufs, want.size());
}

// ---------------------------------------------------------------------------------------------------
// Collectives.

std::string caseName(DType t, ReduceOp op, size_t count) {
  return std::string(dtypeName(t)) + " " + opName(op) + " x " + std::to_string(count);
}

void allreduceCase(World& w, Check& check, Algorithm algo, DType t, ReduceOp op, size_t count,
                   const Scaling& scaling = Scaling()) {
  std::string what = std::string(algorithmName(algo)) + " " + caseName(t, op, count);
  if (scaling.active()) what += " prescale " + fmt(scaling.pre) + " postscale " + fmt(scaling.post);
  if (w.broken) return check.fail(what + ": skipped, an earlier failure broke this world");
  const uint64_t salt = mix(count * 31 + static_cast<uint64_t>(t) * 7 + static_cast<uint64_t>(op));
  std::vector<std::vector<uint8_t>> bufs;
  for (int r = 0; r < w.size; ++r) bufs.push_back(makeInput(t, op, r, count, salt));
  const std::vector<uint8_t> want = scaling.active() ? scaledReference(t, op, bufs, count, scaling) : reference(t, op, bufs, count);
  const std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
    AllreduceOptions o;
    o.data = bufs[r].data();
    o.count = count;
    o.dtype = t;
    o.op = op;
    o.algorithm = algo;
    o.scaling = scaling;
    return allreduce(c, o);
  });
  std::string err = firstFailure(st);
  if (err.empty()) err = expectOnEveryRank(t, want, bufs);
  if (err.empty()) check.pass();
  else check.fail(what + ": " + err);
}

void allreduceTests(World& w) {
  const size_t smallCounts[] = {0, 1, 7, static_cast<size_t>(w.size) * 3 + 1};
  for (Algorithm algo : kAlgorithms) {
    Check check("allreduce " + w.name() + " " + algorithmName(algo) + ": every dtype x op, counts 0, 1, 7, 3p+1");
    for (size_t count : smallCounts) {
      for (DType t : kDTypes) {
        for (ReduceOp op : kOps) allreduceCase(w, check, algo, t, op, count);
      }
    }
  }
  // Past one 64 KiB shared-memory slot and the recursive-doubling threshold, and then well past both.
  Check check("allreduce " + w.name() + ": counts 100003 and 1<<20, every algorithm");
  const struct {
    DType t;
    ReduceOp op;
  } kLarge[] = {{DType::kFloat32, ReduceOp::kSum}, {DType::kFloat64, ReduceOp::kMax}, {DType::kInt32, ReduceOp::kMin},
                {DType::kInt64, ReduceOp::kSum}, {DType::kFloat16, ReduceOp::kAvg}, {DType::kBFloat16, ReduceOp::kProd}};
  for (Algorithm algo : kAlgorithms) {
    for (const auto& c : kLarge) allreduceCase(w, check, algo, c.t, c.op, 100003);
    allreduceCase(w, check, algo, DType::kFloat32, ReduceOp::kAvg, size_t(1) << 20);
  }
}

void reduceScatterCase(World& w, Check& check, DType t, ReduceOp op, size_t count, const Scaling& scaling = Scaling()) {
  std::string what = caseName(t, op, count);
  if (scaling.active()) what += " prescale " + fmt(scaling.pre) + " postscale " + fmt(scaling.post);
  if (w.broken) return check.fail(what + ": skipped, an earlier failure broke this world");
  const uint64_t salt = mix(count * 17 + static_cast<uint64_t>(t) * 5 + static_cast<uint64_t>(op) + 99);
  std::vector<std::vector<uint8_t>> bufs;
  for (int r = 0; r < w.size; ++r) bufs.push_back(makeInput(t, op, r, count, salt));
  const std::vector<uint8_t> want = scaling.active() ? scaledReference(t, op, bufs, count, scaling) : reference(t, op, bufs, count);
  const std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
    ReduceScatterOptions o;
    o.data = bufs[r].data();
    o.count = count;
    o.dtype = t;
    o.op = op;
    o.scaling = scaling;
    return reduceScatter(c, o);
  });
  std::string err = firstFailure(st);
  const size_t elem = dtypeSize(t);
  for (int r = 0; r < w.size && err.empty(); ++r) {
    if (!guardIntact(bufs[r], count * elem)) err = "rank " + std::to_string(r) + " wrote past the end of its buffer";
    const size_t off = blockStart(count, w.size, r) * elem;
    if (err.empty()) {
      err = compareElements(t, want.data() + off, bufs[r].data() + off, blockCount(count, w.size, r),
                            "rank " + std::to_string(r) + "'s block (from element " +
                                std::to_string(blockStart(count, w.size, r)) + ")");
    }
  }
  if (err.empty()) check.pass();
  else check.fail(what + ": " + err);
}

void reduceScatterTests(World& w) {
  Check check("reducescatter " + w.name() + ": rank r gets block r; every dtype x op, counts 0, 1, 7, 3p+1, 100003");
  const size_t counts[] = {0, 1, 7, static_cast<size_t>(w.size) * 3 + 1};
  for (size_t count : counts) {
    for (DType t : kDTypes) {
      for (ReduceOp op : kOps) reduceScatterCase(w, check, t, op, count);
    }
  }
  reduceScatterCase(w, check, DType::kFloat32, ReduceOp::kSum, 100003);
  reduceScatterCase(w, check, DType::kInt64, ReduceOp::kMax, 100003);
  reduceScatterCase(w, check, DType::kFloat16, ReduceOp::kAvg, 100003);
}

uint8_t patternByte(int rank, size_t i) { return static_cast<uint8_t>(mix(i * 131 + static_cast<uint64_t>(rank)) >> 13); }

void allgatherCase(World& w, Check& check, const std::string& pattern, const std::vector<size_t>& bytesPerRank) {
  const std::string what = "bytes per rank " + pattern;
  if (w.broken) return check.fail(what + ": skipped, an earlier failure broke this world");
  std::vector<size_t> offset(w.size + 1, 0);
  for (int r = 0; r < w.size; ++r) offset[r + 1] = offset[r] + bytesPerRank[r];
  const size_t total = offset[w.size];
  std::vector<uint8_t> want(total);
  for (int r = 0; r < w.size; ++r) {
    for (size_t i = 0; i < bytesPerRank[r]; ++i) want[offset[r] + i] = patternByte(r, i);
  }
  std::vector<std::vector<uint8_t>> bufs(w.size, std::vector<uint8_t>(total + kGuardBytes, kGuardByte));
  for (int r = 0; r < w.size; ++r) {
    std::memset(bufs[r].data(), 0xEE, total);
    std::memcpy(bufs[r].data() + offset[r], want.data() + offset[r], bytesPerRank[r]);
  }
  const std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
    AllgatherOptions o;
    o.output = bufs[r].data();
    o.bytesPerRank = bytesPerRank;
    return allgather(c, o);
  });
  std::string err = firstFailure(st);
  if (err.empty()) err = expectOnEveryRank(DType::kUint8, want, bufs);
  if (err.empty()) check.pass();
  else check.fail(what + ": " + err);
}

void allgatherTests(World& w) {
  Check check("allgather " + w.name() + ": different bytes per rank, some empty, some past 64 KiB");
  const int p = w.size;
  std::vector<size_t> none(p, 0), byRank(p), odd(p), large(p), oneBig(p, 5);
  for (int r = 0; r < p; ++r) {
    byRank[r] = static_cast<size_t>(r);  // rank 0 contributes nothing
    odd[r] = static_cast<size_t>(3 * r + 1);
    large[r] = 70001 + 1013 * static_cast<size_t>(r);
  }
  oneBig[p - 1] = 600001;
  allgatherCase(w, check, "0", none);
  allgatherCase(w, check, "r", byRank);
  allgatherCase(w, check, "3r+1", odd);
  allgatherCase(w, check, "70001+1013r", large);
  allgatherCase(w, check, "5, last rank 600001", oneBig);
}

void broadcastCase(World& w, Check& check, int root, size_t bytes) {
  const std::string what = "root " + std::to_string(root) + ", " + std::to_string(bytes) + " bytes";
  if (w.broken) return check.fail(what + ": skipped, an earlier failure broke this world");
  std::vector<uint8_t> want(bytes);
  for (size_t i = 0; i < bytes; ++i) want[i] = patternByte(root + 1000, i);
  std::vector<std::vector<uint8_t>> bufs(w.size, std::vector<uint8_t>(bytes + kGuardBytes, kGuardByte));
  for (int r = 0; r < w.size; ++r) {
    if (r == root) std::memcpy(bufs[r].data(), want.data(), bytes);
    else std::memset(bufs[r].data(), 0xEE, bytes);
  }
  const std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
    BroadcastOptions o;
    o.data = bufs[r].data();
    o.bytes = bytes;
    o.root = root;
    return broadcast(c, o);
  });
  std::string err = firstFailure(st);
  if (err.empty()) err = expectOnEveryRank(DType::kUint8, want, bufs);
  if (err.empty()) check.pass();
  else check.fail(what + ": " + err);
}

void broadcastTests(World& w) {
  Check check("broadcast " + w.name() + ": every root; tree below 64 KiB, chain above, several 512 KiB segments");
  const size_t sizes[] = {0, 1, 4097, 65536, 65537, 300001, 512 * 1024 + 1, 1024 * 1024, 1300000};
  for (int root = 0; root < w.size; ++root) {
    for (size_t bytes : sizes) broadcastCase(w, check, root, bytes);
  }
}

// Reduce to one root: the root's out holds the reduction (scaled when asked), nobody's input changes,
// nothing is written past a buffer.
void reduceCase(World& w, Check& check, Algorithm algo, int root, DType t, ReduceOp op, size_t count,
                const Scaling& scaling = Scaling()) {
  std::string what = std::string(algorithmName(algo)) + " root " + std::to_string(root) + " " + caseName(t, op, count);
  if (scaling.active()) what += " prescale " + fmt(scaling.pre) + " postscale " + fmt(scaling.post);
  if (w.broken) return check.fail(what + ": skipped, an earlier failure broke this world");
  const uint64_t salt = mix(count * 13 + static_cast<uint64_t>(t) * 3 + static_cast<uint64_t>(op) + 7);
  std::vector<std::vector<uint8_t>> in;
  for (int r = 0; r < w.size; ++r) in.push_back(makeInput(t, op, r, count, salt));
  const std::vector<std::vector<uint8_t>> before = in;
  const std::vector<uint8_t> want = scaling.active() ? scaledReference(t, op, in, count, scaling) : reference(t, op, in, count);
  const size_t bytes = count * dtypeSize(t);
  std::vector<uint8_t> out(bytes + kGuardBytes, kGuardByte);
  const std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
    ReduceOptions o;
    o.input = in[r].data();
    o.output = r == root ? out.data() : nullptr;
    o.count = count;
    o.dtype = t;
    o.op = op;
    o.algorithm = algo;
    o.scaling = scaling;
    o.root = root;
    return reduce(c, o);
  });
  std::string err = firstFailure(st);
  if (err.empty()) err = compareElements(t, want.data(), out.data(), count, "the root");
  if (err.empty() && !guardIntact(out, bytes)) err = "the root wrote past the end of its out";
  for (int r = 0; r < w.size && err.empty(); ++r) {
    if (in[r] != before[r]) err = "rank " + std::to_string(r) + "'s input changed";
  }
  if (err.empty()) check.pass();
  else check.fail(what + ": " + err);
}

void reduceTests(World& w) {
  const size_t smallCounts[] = {0, 1, 7, static_cast<size_t>(w.size) * 3 + 1};
  for (Algorithm algo : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kRecursiveDoubling}) {
    Check check("reduce " + w.name() + " " + algorithmName(algo) + ": every root x dtype x op, counts 0, 1, 7, 3p+1");
    for (int root = 0; root < w.size; ++root) {
      for (size_t count : smallCounts) {
        for (DType t : kDTypes) {
          for (ReduceOp op : kOps) reduceCase(w, check, algo, root, t, op, count);
        }
      }
    }
  }
  Check check("reduce " + w.name() + ": every root, counts 100003 and 1<<20 (the ring and the blocks to the root), scaled");
  for (int root = 0; root < w.size; ++root) {
    reduceCase(w, check, Algorithm::kAuto, root, DType::kFloat32, ReduceOp::kSum, 100003);
    reduceCase(w, check, Algorithm::kAuto, root, DType::kInt64, ReduceOp::kMax, 100003);
    reduceCase(w, check, Algorithm::kAuto, root, DType::kFloat16, ReduceOp::kAvg, 100003);
    reduceCase(w, check, Algorithm::kAuto, root, DType::kFloat32, ReduceOp::kAvg, size_t(1) << 20);
    reduceCase(w, check, Algorithm::kAuto, root, DType::kFloat64, ReduceOp::kAvg, 100003, Scaling{0.5, 3});
    reduceCase(w, check, Algorithm::kRecursiveDoubling, root, DType::kBFloat16, ReduceOp::kSum, 7, Scaling{2, 0.25});
  }
}

// Gather to one root: the root's output holds every rank's block in rank order; the others' outputs are
// not touched.
void gatherCase(World& w, Check& check, int root, const std::string& pattern, const std::vector<size_t>& bytesPerRank) {
  const std::string what = "root " + std::to_string(root) + ", bytes per rank " + pattern;
  if (w.broken) return check.fail(what + ": skipped, an earlier failure broke this world");
  std::vector<size_t> offset(w.size + 1, 0);
  for (int r = 0; r < w.size; ++r) offset[r + 1] = offset[r] + bytesPerRank[r];
  const size_t total = offset[w.size];
  std::vector<uint8_t> want(total);
  std::vector<std::vector<uint8_t>> in(w.size);
  for (int r = 0; r < w.size; ++r) {
    for (size_t i = 0; i < bytesPerRank[r]; ++i) want[offset[r] + i] = patternByte(r, i);
    in[r].assign(want.begin() + offset[r], want.begin() + offset[r + 1]);
  }
  std::vector<std::vector<uint8_t>> out(w.size, std::vector<uint8_t>(total + kGuardBytes, kGuardByte));
  const std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
    GatherOptions o;
    o.input = in[r].data();
    o.output = out[r].data();
    o.bytesPerRank = bytesPerRank;
    o.root = root;
    return gather(c, o);
  });
  std::string err = firstFailure(st);
  if (err.empty()) err = compareElements(DType::kUint8, want.data(), out[root].data(), total, "the root");
  for (int r = 0; r < w.size && err.empty(); ++r) {
    if (!guardIntact(out[r], r == root ? total : 0)) err = "rank " + std::to_string(r) + " wrote where it should not";
  }
  if (err.empty()) check.pass();
  else check.fail(what + ": " + err);
}

void gatherTests(World& w) {
  Check check("gather " + w.name() + ": every root; different bytes per rank, some empty, some past 64 KiB");
  const int p = w.size;
  std::vector<size_t> none(p, 0), byRank(p), large(p), oneBig(p, 5);
  for (int r = 0; r < p; ++r) {
    byRank[r] = static_cast<size_t>(r);  // rank 0 contributes nothing
    large[r] = 70001 + 1013 * static_cast<size_t>(r);
  }
  oneBig[p - 1] = 600001;
  for (int root = 0; root < p; ++root) {
    gatherCase(w, check, root, "0", none);
    gatherCase(w, check, root, "r", byRank);
    gatherCase(w, check, root, "70001+1013r", large);
    gatherCase(w, check, root, "5, last rank 600001", oneBig);
  }
}

// ---------------------------------------------------------------------------------------------------
// Agreement.

Work makeWork(Kind kind, size_t count, DType t = DType::kFloat32, ReduceOp op = ReduceOp::kSum) {
  Work wk;
  wk.kind = kind;
  wk.count = count;
  wk.dtype = t;
  wk.op = op;
  wk.name = "grad/w";
  return wk;
}

// Runs agree() on every rank with proposal mine(r); payloads[r] (if any) rides along.
std::vector<Status> agreeOnEveryRank(World& w, const std::function<Proposal(int)>& mine,
                                     const std::function<std::string(int)>& invalidReason,
                                     std::vector<std::vector<uint8_t>>* payloads = nullptr) {
  return onEveryRank(w, [&](int r, Context& c) {
    return agree(c, mine(r), invalidReason(r), payloads != nullptr ? (*payloads)[r].data() : nullptr);
  });
}

std::string noReason(int) { return ""; }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// "" when every rank returned `code` with the same message, and that message passes mentions().
std::string expectSameVerdict(const std::vector<Status>& st, Code code,
                              const std::function<std::string(const std::string&)>& mentions) {
  for (size_t r = 0; r < st.size(); ++r) {
    if (st[r].code() != code) {
      return "rank " + std::to_string(r) + " returned " + describeStatus(st[r]) + ", expected " + codeName(code);
    }
    if (st[r].message() != st[0].message()) {
      return "ranks disagree on the verdict: rank 0 says '" + st[0].message() + "', rank " + std::to_string(r) +
             " says '" + st[r].message() + "'";
    }
  }
  return mentions(st[0].message());
}

// Every rank can still agree (and so move data in step) after whatever happened before.
std::string stillUsable(World& w) {
  const uint64_t seq = w.seq++;
  const std::vector<Status> st =
      agreeOnEveryRank(w, [&](int) { return proposalFor(makeWork(Kind::kBarrier, 0), seq, 1, 0); }, noReason);
  std::string err = firstFailure(st);
  if (!err.empty()) return "the agreement after it failed: " + err;
  std::vector<std::vector<uint8_t>> bufs;
  for (int r = 0; r < w.size; ++r) bufs.push_back(makeInput(DType::kInt32, ReduceOp::kSum, r, 100003, 5));
  const std::vector<uint8_t> want = reference(DType::kInt32, ReduceOp::kSum, bufs, 100003);
  err = firstFailure(onEveryRank(w, [&](int r, Context& c) {
    AllreduceOptions o;
    o.data = bufs[r].data();
    o.count = 100003;
    o.dtype = DType::kInt32;
    o.algorithm = Algorithm::kRing;
    return allreduce(c, o);
  }));
  if (err.empty()) err = expectOnEveryRank(DType::kInt32, want, bufs);
  return err.empty() ? "" : "the allreduce after it: " + err;
}

void agreementTests(World& w) {
  const int p = w.size;
  {
    Check check("agree " + w.name() + ": equal proposals of every kind succeed on every rank");
    const Work works[] = {makeWork(Kind::kAllreduce, 100000), makeWork(Kind::kBroadcast, 10),
                          makeWork(Kind::kReduceScatter, 77, DType::kInt64, ReduceOp::kMax),
                          makeWork(Kind::kBarrier, 0)};
    for (const Work& wk : works) {
      const uint64_t seq = w.seq++;
      Work mine = wk;
      if (mine.kind == Kind::kBroadcast) mine.root = p - 1;
      std::string err = firstFailure(
          agreeOnEveryRank(w, [&](int) { return proposalFor(mine, seq, 1, mine.count); }, noReason));
      check.expect(err.empty(), std::string(kindName(wk.kind)) + ": " + err);
    }
    // Allgather is the one collective where each rank brings its own count.
    const uint64_t seq = w.seq++;
    std::string err = firstFailure(agreeOnEveryRank(
        w, [&](int r) { return proposalFor(makeWork(Kind::kAllgather, r + 1), seq, 1, r + 1); }, noReason));
    check.expect(err.empty(), "allgather with a different count per rank: " + err);
  }
  if (p < 2) return;
  {
    Check check("agree " + w.name() + ": a different count on one rank is ERR_MISMATCH on every rank, naming both");
    for (int k = 0; k < p && !w.broken; ++k) {
      const uint64_t seq = w.seq++;
      const std::vector<Status> st = agreeOnEveryRank(
          w,
          [&](int r) {
            const size_t count = r == k ? 1001 : 1000;
            return proposalFor(makeWork(Kind::kAllreduce, count), seq, 1, count);
          },
          noReason);
      std::string err = expectSameVerdict(st, Code::kMismatch, [&](const std::string& m) -> std::string {
        bool other = false;
        for (int j = 0; j < p; ++j) other |= j != k && contains(m, "rank " + std::to_string(j) + " submitted");
        if (!contains(m, "rank " + std::to_string(k) + " submitted") || !other) {
          return "the message does not name rank " + std::to_string(k) + " and another rank: " + m;
        }
        return contains(m, "1001") && contains(m, "1000") ? "" : "the message does not show both counts: " + m;
      });
      if (err.empty()) err = stillUsable(w);
      check.expect(err.empty(), "odd rank " + std::to_string(k) + ": " + err);
    }
    // A different op or root is as much a mismatch as a different count.
    if (!w.broken) {
      const uint64_t seq = w.seq++;
      const std::vector<Status> st = agreeOnEveryRank(
          w,
          [&](int r) {
            Work wk = makeWork(Kind::kAllreduce, 64, DType::kFloat32, r == p - 1 ? ReduceOp::kMax : ReduceOp::kSum);
            return proposalFor(wk, seq, 1, 64);
          },
          noReason);
      std::string err = expectSameVerdict(st, Code::kMismatch, [&](const std::string& m) -> std::string {
        return contains(m, "rank " + std::to_string(p - 1)) && contains(m, "op max") ? "" : "message: " + m;
      });
      check.expect(err.empty(), "different op on the last rank: " + err);
    }
  }
  {
    Check check("agree " + w.name() + ": an invalid call on one rank is ERR_INVALID_ARGUMENT on every rank");
    for (int k = 0; k < p && !w.broken; ++k) {
      const uint64_t seq = w.seq++;
      const std::string reason = "buffer on rank " + std::to_string(k) + " is detached";
      const std::vector<Status> st = agreeOnEveryRank(
          w,
          [&](int r) {
            Work wk = makeWork(r == k ? Kind::kInvalid : Kind::kAllreduce, 1000);
            return proposalFor(wk, seq, 1, 1000);
          },
          [&](int r) { return r == k ? reason : std::string(); });
      std::string err = expectSameVerdict(st, Code::kInvalidArgument, [&](const std::string& m) -> std::string {
        return contains(m, "rank " + std::to_string(k)) && contains(m, reason) ? "" : "message: " + m;
      });
      if (err.empty()) err = stillUsable(w);
      check.expect(err.empty(), "invalid on rank " + std::to_string(k) + ": " + err);
    }
    if (p >= 3 && !w.broken) {
      // Two invalid calls: the verdict is the lowest rank's, on every rank.
      const uint64_t seq = w.seq++;
      const std::vector<Status> st = agreeOnEveryRank(
          w,
          [&](int r) {
            Work wk = makeWork(r == 1 || r == p - 1 ? Kind::kInvalid : Kind::kAllreduce, 1000);
            return proposalFor(wk, seq, 1, 1000);
          },
          [&](int r) { return "bad input " + std::to_string(r); });
      std::string err = expectSameVerdict(st, Code::kInvalidArgument, [&](const std::string& m) -> std::string {
        return contains(m, "rank 1 ") && contains(m, "bad input 1") ? "" : "message: " + m;
      });
      check.expect(err.empty(), "invalid on ranks 1 and " + std::to_string(p - 1) + ": " + err);
    }
  }
}

// The name is the proposal's variable part: names that differ past what a proposal holds are shown whole.
// Reduce and gather agree on their root; reduce on its count too, gather not (lengths may differ by rank).
void agreementRootedTests(World& w) {
  const int p = w.size;
  Check check("agree " + w.name() + ": reduce and gather: roots compared, reduce's count compared, gather's not");
  {
    const uint64_t seq = w.seq++;
    Work g = makeWork(Kind::kGather, 0);
    g.root = p - 1;
    std::string err = firstFailure(agreeOnEveryRank(w, [&](int r) { return proposalFor(g, seq, 1, r * 5); }, noReason));
    check.expect(err.empty(), "gather with a different count per rank: " + err);
  }
  if (p < 2 || w.broken) return;
  for (Kind kind : {Kind::kReduce, Kind::kGather}) {
    const uint64_t seq = w.seq++;
    const std::vector<Status> st = agreeOnEveryRank(
        w,
        [&](int r) {
          Work wk = makeWork(kind, 10);
          wk.root = r == p - 1 ? 1 : 0;
          return proposalFor(wk, seq, 1, 10);
        },
        noReason);
    std::string err = expectSameVerdict(st, Code::kMismatch, [&](const std::string& m) -> std::string {
      return contains(m, std::string(kindName(kind)) + " 'grad/w' (float32 x 10") && contains(m, ", root 1)") ? "" : "message: " + m;
    });
    check.expect(err.empty(), std::string(kindName(kind)) + " to root 1 on the last rank only: ERR_MISMATCH on every rank: " + err);
  }
  {
    const uint64_t seq = w.seq++;
    const std::vector<Status> st = agreeOnEveryRank(
        w,
        [&](int r) {
          const size_t count = r == p - 1 ? 11 : 10;
          return proposalFor(makeWork(Kind::kReduce, count, DType::kFloat32, ReduceOp::kMax), seq, 1, count);
        },
        noReason);
    std::string err = expectSameVerdict(st, Code::kMismatch, [](const std::string& m) -> std::string {
      return contains(m, "reduce 'grad/w' (float32 x 11, op max, root 0)") ? "" : "message: " + m;
    });
    check.expect(err.empty(), "reduce of 11 on the last rank, 10 on the others: ERR_MISMATCH on every rank: " + err);
  }
}

void agreementNameTests(World& w) {
  const int p = w.size;
  if (p < 2) return;
  Check check("agree " + w.name() + ": names that differ past the proposal's 31 bytes are ERR_MISMATCH on every rank, both shown whole");
  const std::string lead = "pipeline.batch 12: 32 samples in 4 micro-batches, ";
  for (int k = 0; k < p && !w.broken; ++k) {
    const uint64_t seq = w.seq++;
    const std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
      Work wk = makeWork(Kind::kBarrier, 0);
      wk.name = lead + (r == k ? "shapes [8, 9]" : "shapes [8, 8]");
      const Layout layout(wk);
      return agree(c, proposalFor(wk, seq, 1, 0), "", nullptr, &layout);
    });
    std::string err = expectSameVerdict(st, Code::kMismatch, [&](const std::string& m) -> std::string {
      const int other = k == 0 ? 1 : 0;
      const std::string a = "rank " + std::to_string(other) + " submitted barrier '" + lead + "shapes [8, 8]' as collective #";
      const std::string b = "rank " + std::to_string(k) + " submitted barrier '" + lead + "shapes [8, 9]' as collective #";
      return contains(m, a) && contains(m, b) ? "" : "the message does not show both names whole: " + m;
    });
    if (err.empty()) err = stillUsable(w);
    check.expect(err.empty(), "odd rank " + std::to_string(k) + ": " + err);
  }
}

// An invalid call's reason longer than the verdict's text is shown whole, on every rank.
void agreementLongReasonTests(World& w) {
  const int p = w.size;
  if (p < 2) return;
  Check check("agree " + w.name() + ": an invalid call's reason longer than the verdict holds is shown whole on every rank");
  std::string reason = "stage 1 failed: ";
  while (reason.size() < 900) reason += "layer 'dense_" + std::to_string(reason.size()) + "' gave NaN; ";
  reason += "the end";
  for (int k = 0; k < p && !w.broken; ++k) {
    const uint64_t seq = w.seq++;
    const std::vector<Status> st = agreeOnEveryRank(
        w, [&](int r) { return proposalFor(makeWork(r == k ? Kind::kInvalid : Kind::kAllreduce, 1000), seq, 1, 1000); },
        [&](int r) { return r == k ? reason : std::string(); });
    std::string err = expectSameVerdict(st, Code::kInvalidArgument, [&](const std::string& m) -> std::string {
      return m == "rank " + std::to_string(k) + " made an invalid call: " + reason ? "" : "message: " + m;
    });
    if (err.empty()) err = st[0].peer() == k ? "" : "the error's peer is " + std::to_string(st[0].peer());
    if (err.empty()) err = stillUsable(w);
    check.expect(err.empty(), "invalid on rank " + std::to_string(k) + ": " + err);
  }
}

void agreementPayloadTests(World& w) {
  const int p = w.size;
  Check check("agree " + w.name() + ": small allreduces ride in the agreement, reduced (avg not yet divided)");
  {
    const size_t elemsAtLimit = kSmallAllreduceBytes / dtypeSize(DType::kFloat32);
    Work ring = makeWork(Kind::kAllreduce, 10);
    ring.algorithm = Algorithm::kRing;
    check.expect(carriesPayload(proposalFor(makeWork(Kind::kAllreduce, elemsAtLimit), 0, 1, elemsAtLimit), *w.ctx[0]),
                 "carriesPayload is false for exactly kSmallAllreduceBytes");
    check.expect(!carriesPayload(proposalFor(makeWork(Kind::kAllreduce, elemsAtLimit + 1), 0, 1, elemsAtLimit + 1), *w.ctx[0]),
                 "carriesPayload is true past kSmallAllreduceBytes");
    check.expect(!carriesPayload(proposalFor(makeWork(Kind::kAllreduce, 0), 0, 1, 0), *w.ctx[0]), "carriesPayload is true for count 0");
    check.expect(!carriesPayload(proposalFor(ring, 0, 1, 10), *w.ctx[0]), "carriesPayload is true with the ring forced");
    check.expect(!carriesPayload(proposalFor(makeWork(Kind::kBroadcast, 10), 0, 1, 10), *w.ctx[0]), "carriesPayload is true for a broadcast");
  }
  for (DType t : kDTypes) {
    const size_t counts[] = {1, 7, kSmallAllreduceBytes / dtypeSize(t)};
    for (size_t count : counts) {
      for (ReduceOp op : kOps) {
        const std::string what = caseName(t, op, count);
        if (w.broken) {
          check.fail(what + ": skipped, an earlier failure broke this world");
          continue;
        }
        const uint64_t seq = w.seq++;
        const Proposal proposal = proposalFor(makeWork(Kind::kAllreduce, count, t, op), seq, 1, count);
        if (!carriesPayload(proposal, *w.ctx[0])) {
          check.fail(what + ": carriesPayload is false");
          continue;
        }
        std::vector<std::vector<uint8_t>> bufs;
        for (int r = 0; r < p; ++r) bufs.push_back(makeInput(t, op, r, count, seq));
        const std::vector<uint8_t> want = reference(t, op, bufs, count, /*divideAvg=*/false);
        std::string err = firstFailure(agreeOnEveryRank(w, [&](int) { return proposal; }, noReason, &bufs));
        if (err.empty()) err = expectOnEveryRank(t, want, bufs);
        check.expect(err.empty(), what + ": " + err);
      }
    }
  }
  if (p < 2) return;
  // A disagreement must leave every caller's buffer as it was, whatever had already been reduced.
  for (int k = 0; k < p && !w.broken; ++k) {
    const uint64_t seq = w.seq++;
    std::vector<std::vector<uint8_t>> bufs, before;
    for (int r = 0; r < p; ++r) bufs.push_back(makeInput(DType::kFloat32, ReduceOp::kSum, r, r == k ? 301 : 300, seq));
    before = bufs;
    const std::vector<Status> st = agreeOnEveryRank(
        w,
        [&](int r) {
          const size_t count = r == k ? 301 : 300;
          return proposalFor(makeWork(Kind::kAllreduce, count), seq, 1, count);
        },
        noReason, &bufs);
    std::string err = expectSameVerdict(st, Code::kMismatch, [](const std::string&) { return std::string(); });
    for (int r = 0; r < p && err.empty(); ++r) {
      if (bufs[r] != before[r]) err = "rank " + std::to_string(r) + "'s payload buffer changed";
    }
    if (err.empty()) err = stillUsable(w);
    check.expect(err.empty(), "payloads of different sizes, odd rank " + std::to_string(k) + ": " + err);
  }
}

// A fused run of allreduces: its Works as the engine holds them, from (name, count) pairs.
std::vector<std::shared_ptr<Work>> makeRun(const std::vector<std::pair<std::string, size_t>>& tensors) {
  std::vector<std::shared_ptr<Work>> run;
  for (const auto& t : tensors) {
    auto wk = std::make_shared<Work>(makeWork(Kind::kAllreduce, t.second));
    wk->name = t.first;
    run.push_back(wk);
  }
  return run;
}

// Runs agree() on every rank with rank r's run of tensors (fused when it holds more than one, as
// Communicator::runFused proposes it; else as execute() does), its payload riding along when small.
// alike[r]: what agree() said rank r's run has alike with every other rank's.
std::vector<Status> agreeOnRuns(World& w, const std::vector<std::vector<std::shared_ptr<Work>>>& runs,
                                std::vector<std::vector<uint8_t>>* payloads, std::vector<size_t>* alike = nullptr) {
  const uint64_t seq = w.seq++;
  std::vector<size_t> mine(w.size, 0);
  std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
    const auto& run = runs[r];
    size_t total = 0;
    for (const auto& wk : run) total += wk->count;
    const Layout fused(run.data(), run.size());
    const Layout lone(*run[0]);
    const Layout& layout = run.size() > 1 ? fused : lone;
    const Proposal prop = run.size() > 1 ? proposalForRun(layout, seq, total) : proposalFor(*run[0], seq, 1, total);
    uint8_t* payload = carriesPayload(prop, c) ? (*payloads)[r].data() : nullptr;
    return agree(c, prop, "", payload, &layout, &mine[r]);
  });
  if (alike != nullptr) *alike = mine;
  return st;
}

// The digest and the words, without a network.
void layoutUnitTests() {
  Check check("layout: the digest of a fused run changes with any name, count, order or split; the words name the first tensor that differs");
  auto digest = [](const std::vector<std::pair<std::string, size_t>>& t) {
    const auto run = makeRun(t);
    return layoutDigest(Layout(run.data(), run.size()));
  };
  const uint64_t ab = digest({{"a", 2}, {"b", 3}});
  check.expect(ab == digest({{"a", 2}, {"b", 3}}), "the digest of one layout is not stable");
  check.expect(ab != digest({{"b", 3}, {"a", 2}}), "the digest does not change with the order");
  check.expect(ab != digest({{"a", 3}, {"b", 2}}), "the digest does not change with the counts");
  check.expect(ab != digest({{"a", 2}, {"c", 3}}), "the digest does not change with a name");
  check.expect(digest({{"", 2}, {"", 3}}) != digest({{"", 3}, {"", 2}}), "unnamed: the digest does not change with the split");
  check.expect(digest({{"", 5}}) != digest({{"", 2}, {"", 3}}), "the digest does not change with the number of tensors");

  auto entries = [](const std::vector<std::pair<std::string, size_t>>& t) {
    std::vector<LayoutEntry> e;
    for (const auto& wk : makeRun(t)) e.push_back(layoutEntry(*wk));
    return e;
  };
  auto view = [](int rank, const std::vector<LayoutEntry>& e) {
    LayoutView v;
    v.rank = rank;
    v.numTensors = e.size();
    v.entries = e.data();
    v.shown = e.size();
    return v;
  };
  const auto e0 = entries({{"grad_b", 2}, {"grad_a", 2}}), e1 = entries({{"grad_a", 2}, {"grad_b", 2}});
  std::string m = describeLayoutDifference(5, 0, view(0, e0), view(1, e1));
  check.expect(m == "rank 0 and rank 1 fused different tensors into allreduce #5: tensor 1 of 2 is 'grad_b' (float32 x 2) "
                    "on rank 0 but 'grad_a' (float32 x 2) on rank 1", "order: " + m);
  const auto five = entries({{"", 5}}), split = entries({{"", 2}, {"", 3}});
  m = describeLayoutDifference(7, 3, view(2, split), view(4, five));
  check.expect(m == "rank 2 and rank 4 fused different tensors into allreduce #7 of group 3: tensor 1 of 2 is unnamed "
                    "(float32 x 2) on rank 2 but tensor 1 of 1 is unnamed (float32 x 5) on rank 4", "split: " + m);
  const auto more = entries({{"a", 1}, {"b", 1}, {"c", 4}}), fewer = entries({{"a", 1}, {"b", 1}});
  m = describeLayoutDifference(1, 0, view(0, fewer), view(1, more));
  check.expect(contains(m, "tensor 3 of 3 is 'c' (float32 x 4) on rank 1 but rank 0 fused only 2"), "one more: " + m);
  check.expect(!layoutsDiffer(view(0, e0), view(1, e0)) && layoutsDiffer(view(0, e0), view(1, e1)) &&
                   layoutsDiffer(view(0, fewer), view(1, more)),
               "layoutsDiffer");
  const LayoutView three[] = {view(0, more), view(1, fewer), view(2, more)};
  const LayoutView swapped[] = {view(0, e0), view(1, e1)};
  check.expect(commonPrefix(three, 3) == 2 && commonPrefix(three, 1) == 3 && commonPrefix(swapped, 2) == 0, "commonPrefix");
  // Past what was exchanged, the words say so rather than read entries that are not there.
  LayoutView capped0 = view(0, fewer), capped1 = view(1, fewer);
  capped0.numTensors = 5000;
  capped1.numTensors = 6000;
  m = describeLayoutDifference(1, 0, capped0, capped1);
  check.expect(contains(m, "their first 2 tensors are the same") && contains(m, "5000 tensors on rank 0, 6000 on rank 1"), "capped: " + m);
  // A long name is cut at a character, and marked; bytes from the network are bounded before use.
  Work longName = makeWork(Kind::kAllreduce, 1);
  longName.name = std::string(44, 'x') + "\xc3\xa9tail";  // the cut falls inside the two-byte e-acute
  LayoutEntry cut = layoutEntry(longName);
  check.expect(cut.nameCut == 1 && cut.nameBytes == 44, "a long name: nameBytes " + std::to_string(cut.nameBytes));
  LayoutEntry hostile = cut;
  hostile.nameBytes = 255;
  hostile.dtype = 200;
  hostile.name[3] = '\n';
  std::vector<LayoutEntry> h0{hostile}, h1{entries({{"y", 1}})[0]};
  m = describeLayoutDifference(1, 0, view(0, h0), view(1, h1));
  check.expect(contains(m, "'xxx?") && contains(m, "...' (unknown-dtype x 1)") && m.find('\n') == std::string::npos, "hostile entry: " + m);
}

void agreementLayoutTests(World& w) {
  const int p = w.size;
  if (p < 2) return;
  Check check("agree " + w.name() + ": fused runs are checked tensor by tensor; a difference is ERR_MISMATCH on every rank naming the first tensor, payloads untouched; runs that begin alike say how many tensors they share");
  auto payloadsFor = [&](size_t count) {
    std::vector<std::vector<uint8_t>> bufs;
    for (int r = 0; r < p; ++r) bufs.push_back(makeInput(DType::kFloat32, ReduceOp::kSum, r, count, 11));
    return bufs;
  };
  auto expectMismatch = [&](const std::string& what, const std::vector<std::vector<std::shared_ptr<Work>>>& runs,
                            size_t total, const std::string& words, size_t wantAlike = 0) {
    if (w.broken) return check.fail(what + ": skipped, an earlier failure broke this world");
    std::vector<std::vector<uint8_t>> bufs = payloadsFor(total);
    const auto before = bufs;
    std::vector<size_t> alike;
    std::string err = expectSameVerdict(agreeOnRuns(w, runs, &bufs, &alike), Code::kMismatch, [&](const std::string& m) {
      return contains(m, words) ? std::string() : "message: " + m;
    });
    for (int r = 0; r < p && err.empty(); ++r) {
      if (alike[r] != wantAlike) {
        err = "rank " + std::to_string(r) + " has " + std::to_string(alike[r]) + " tensors alike, expected " + std::to_string(wantAlike);
      }
    }
    for (int r = 0; r < p && err.empty(); ++r) {
      if (bufs[r] != before[r]) err = "rank " + std::to_string(r) + "'s payload buffer changed";
    }
    if (err.empty()) err = stillUsable(w);
    check.expect(err.empty(), what + ": " + err);
  };
  for (size_t count : {size_t(3), size_t(40000)}) {  // rides along with the agreement, and not
    const std::string n = std::to_string(count);
    {
      std::vector<std::vector<std::shared_ptr<Work>>> runs(p, makeRun({{"a", count}, {"b", count}}));
      std::vector<std::vector<uint8_t>> bufs = payloadsFor(2 * count);
      check.expect(firstFailure(agreeOnRuns(w, runs, &bufs)).empty(), "the same run on every rank fails");
    }
    for (int k = 0; k < p; ++k) {
      std::vector<std::vector<std::shared_ptr<Work>>> runs(p, makeRun({{"a", count}, {"b", count}}));
      runs[k] = makeRun({{"b", count}, {"a", count}});
      const std::string a = "'a' (float32 x " + n + ")", b = "'b' (float32 x " + n + ")";
      expectMismatch("order on rank " + std::to_string(k) + ", count " + n, runs, 2 * count,
                     "rank 0 and rank " + std::to_string(k == 0 ? 1 : k) + " fused different tensors into allreduce #" +
                         std::to_string(w.seq) + ": tensor 1 of 2 is " + (k == 0 ? b : a) + " on rank 0 but " +
                         (k == 0 ? a : b) + " on rank " + std::to_string(k == 0 ? 1 : k));
      // The same total split differently, unnamed; on one rank not fused at all.
      runs.assign(p, makeRun({{"", count}, {"", 2 * count}}));
      runs[k] = makeRun({{"", 3 * count}});
      expectMismatch("split on rank " + std::to_string(k) + ", count " + n, runs, 3 * count,
                     k == 0 ? "tensor 1 of 1 is unnamed (float32 x " + std::to_string(3 * count) +
                                  ") on rank 0 but tensor 1 of 2 is unnamed (float32 x " + n + ") on rank 1"
                            : "tensor 1 of 2 is unnamed (float32 x " + n + ") on rank 0 but tensor 1 of 1 is unnamed (float32 x " +
                                  std::to_string(3 * count) + ") on rank " + std::to_string(k));
      // Runs that begin alike: rank k's was cut after its first two tensors (by an invalid call, say).
      // Every rank learns that the first two are alike, and runs them.
      runs.assign(p, makeRun({{"a", count}, {"b", count}, {"c", count}}));
      runs[k] = makeRun({{"a", count}, {"b", count}});
      expectMismatch("runs that begin alike, rank " + std::to_string(k) + " shorter, count " + n, runs, 3 * count,
                     k == 0 ? "tensor 3 of 3 is 'c' (float32 x " + n + ") on rank 1 but rank 0 fused only 2"
                            : "tensor 3 of 3 is 'c' (float32 x " + n + ") on rank 0 but rank " + std::to_string(k) + " fused only 2",
                     2);
      runs[k] = makeRun({{"a", count}});
      expectMismatch("runs that begin alike, rank " + std::to_string(k) + " alone, count " + n, runs, 3 * count,
                     "tensor 2 of 3 is 'b'", 1);
    }
  }
  if (p >= 4 && !w.broken) {
    // Runs that begin alike, but rank 2 runs another op: nothing runs (the first tensor fails on every rank).
    std::vector<std::vector<std::shared_ptr<Work>>> runs(p, makeRun({{"a", 3}, {"b", 3}}));
    runs[1] = makeRun({{"a", 3}});
    runs[2] = makeRun({{"a", 3}, {"b", 3}});  // its own Works (the others share theirs)
    for (auto& wk : runs[2]) wk->op = ReduceOp::kMax;
    expectMismatch("runs that begin alike, another op on rank 2", runs, 6, "rank 0 and rank 1 fused different tensors", 0);
  }
}

// prescaleFactor and postscaleFactor: every algorithm, the reduce-scatter, and the payload that rides the
// agreement, against the reference and identical on every rank; a world of one scales alone.
void scaledTests(World& w) {
  Check check("scaled " + w.name() + ": prescale and postscale in every algorithm, reducescatter and the agreement, " +
              "float dtypes, ops sum avg max prod");
  const DType kFloats[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  const ReduceOp kScaledOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kProd};
  const Scaling kScalings[] = {{0.5, 3}, {2, 1}, {1, 0.25}, {-0.5, 1.5}};
  const size_t counts[] = {1, 7, static_cast<size_t>(w.size) * 3 + 1, 100003};
  for (Algorithm algo : {Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kAuto}) {
    for (DType t : kFloats) {
      for (ReduceOp op : kScaledOps) {
        for (size_t k = 0; k < 4; ++k) {
          const size_t count = counts[(k + static_cast<size_t>(op)) % 4];
          allreduceCase(w, check, algo, t, op, count, kScalings[k]);
        }
      }
    }
  }
  for (DType t : kFloats) {
    for (ReduceOp op : kScaledOps) {
      reduceScatterCase(w, check, t, op, counts[static_cast<size_t>(op) % 4], kScalings[static_cast<size_t>(t) % 4]);
    }
  }
  // The agreement's payload comes back finished when scaled (avg divided), as the allreduce leaves it.
  for (DType t : kFloats) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      const size_t count = 7;
      const std::string what = std::string("agreement payload ") + caseName(t, op, count) + " prescale 0.5 postscale 3";
      if (w.broken) return check.fail(what + ": skipped, an earlier failure broke this world");
      Work wk = makeWork(Kind::kAllreduce, count, t, op);
      wk.scaling = Scaling{0.5, 3};
      const Proposal proposal = proposalFor(wk, w.seq++, 1, count);
      std::vector<std::vector<uint8_t>> bufs;
      for (int r = 0; r < w.size; ++r) bufs.push_back(makeInput(t, op, r, count, proposal.seq));
      const std::vector<uint8_t> want = scaledReference(t, op, bufs, count, wk.scaling);
      std::string err = firstFailure(agreeOnEveryRank(w, [&](int) { return proposal; }, noReason, &bufs));
      if (err.empty()) err = expectOnEveryRank(t, want, bufs);
      check.expect(err.empty(), what + ": " + err);
    }
  }
  if (w.size < 2 || w.broken) return;
  // Factors that differ between ranks are a mismatch, named, before any data moves.
  const uint64_t seq = w.seq++;
  std::vector<std::vector<uint8_t>> bufs, before;
  for (int r = 0; r < w.size; ++r) bufs.push_back(makeInput(DType::kFloat32, ReduceOp::kSum, r, 10, seq));
  before = bufs;
  const std::vector<Status> st = agreeOnEveryRank(
      w,
      [&](int r) {
        Work wk = makeWork(Kind::kAllreduce, 10);
        if (r == w.size - 1) wk.scaling = Scaling{0.5, 1};
        return proposalFor(wk, seq, 1, 10);
      },
      noReason, &bufs);
  std::string err = expectSameVerdict(st, Code::kMismatch, [](const std::string& m) -> std::string {
    return contains(m, "prescaleFactor 0.5") ? "" : "message does not name the factor: " + m;
  });
  for (int r = 0; r < w.size && err.empty(); ++r) {
    if (bufs[r] != before[r]) err = "rank " + std::to_string(r) + "'s payload buffer changed";
  }
  check.expect(err.empty(), "prescale 0.5 on the last rank only: ERR_MISMATCH on every rank: " + err);
}

// ---------------------------------------------------------------------------------------------------
// Failures: a peer that goes away, and one that never calls in.

void peerLossTest(Net net, bool destroy) {
  const std::string how = destroy ? "destroys its Context" : "calls hangUp()";
  Check check(std::string("peer loss ") + netName(net) + " size=3: rank 2 " + how +
              " during a large allreduce -> ERR_PEER_LOST within 2 s");
  World w;
  // Well above the 2 s allowed, well below the watchdog: a missed hang-up fails in a few seconds.
  Status st = connectWorld(net, 3, 5000, &w);
  if (!st.isOk()) return check.fail("connect: " + describeStatus(st));
  const size_t count = size_t(1) << 22;
  std::vector<std::vector<uint8_t>> bufs(2, std::vector<uint8_t>(count * 4, 0));
  std::vector<Status> result(2);
  std::vector<double> returnedAt(2, 0);
  std::atomic<double> goneAt{0};
  const auto t0 = SteadyClock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Context& c = *w.ctx[r];
      c.startDeadline();
      AllreduceOptions o;
      o.data = bufs[r].data();
      o.count = count;
      o.algorithm = Algorithm::kRing;
      result[r] = allreduce(c, o);
      returnedAt[r] = secondsSince(t0);
      if (isFatal(result[r].code())) c.hangUp();
    });
  }
  threads.emplace_back([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the others are waiting on rank 2 by now
    goneAt = secondsSince(t0);
    if (destroy) w.ctx[2].reset();
    else w.ctx[2]->hangUp();
  });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    const double after = returnedAt[r] - goneAt.load();
    std::string err;
    if (result[r].code() != Code::kPeerLost) err = "returned " + describeStatus(result[r]);
    else if (after < 0) err = "returned before rank 2 went away";
    else if (after > 2.0) err = "took " + fmt(after) + " s to notice";
    check.expect(err.empty(), "rank " + std::to_string(r) + ": " + err);
  }
}

void timeoutTest(Net net) {
  Check check(std::string("timeout ") + netName(net) +
              " size=2: rank 1 never calls in, timeoutMs=300 -> ERR_TIMEOUT on rank 0 naming rank 1");
  World w;
  Status st = connectWorld(net, 2, 300, &w);
  if (!st.isOk()) return check.fail("connect: " + describeStatus(st));
  std::vector<float> data(1000, 1.0f);
  Context& c = *w.ctx[0];
  const auto t0 = SteadyClock::now();
  c.startDeadline();
  AllreduceOptions o;
  o.data = reinterpret_cast<uint8_t*>(data.data());
  o.count = data.size();
  Status result = allreduce(c, o);
  const double took = secondsSince(t0);
  std::string err;
  if (result.code() != Code::kTimeout) err = "returned " + describeStatus(result);
  else if (took < 0.25 || took > 2.0) err = "took " + fmt(took) + " s";
  else if (!contains(result.message(), "rank 1")) err = "the message does not name rank 1: " + result.message();
  check.expect(err.empty(), err);
}

void abortTest(Net net) {
  Check check(std::string("abort ") + netName(net) +
              " size=2: abort() from another thread ends a blocked allreduce at once with its reason");
  World w;
  Status st = connectWorld(net, 2, 10000, &w);
  if (!st.isOk()) return check.fail("connect: " + describeStatus(st));
  std::vector<float> data(size_t(1) << 20, 1.0f);
  Context& c = *w.ctx[0];
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    c.abort(Status(Code::kShutdown, "closed by the test"));
  });
  const auto t0 = SteadyClock::now();
  c.startDeadline();
  AllreduceOptions o;
  o.data = reinterpret_cast<uint8_t*>(data.data());
  o.count = data.size();
  o.algorithm = Algorithm::kRing;
  Status result = allreduce(c, o);
  const double took = secondsSince(t0);
  aborter.join();
  std::string err;
  if (result.code() != Code::kShutdown || result.message() != "closed by the test") {
    err = "returned " + describeStatus(result);
  } else if (took > 1.5) {
    err = "took " + fmt(took) + " s";
  }
  check.expect(err.empty(), err);
}

// ---------------------------------------------------------------------------------------------------

// The ways to lay `size` ranks out on a grid that the tests walk: one dimension (a ring), and every
// two-dimensional factorization.
std::vector<std::vector<int>> gridsFor(int size) {
  std::vector<std::vector<int>> grids = {{size}};
  for (int a = 2; a < size; ++a) {
    if (size % a == 0) grids.push_back({a, size / a});
  }
  if (size == 6) grids.push_back({1, 3, 2});  // a dimension of size 1 is skipped
  return grids;
}

// The multi-dimensional and hierarchical allreduce, with the topology completed as the engine does at
// connect (rank 0 probes the links when there is more than one host, and broadcasts the costs).
void gridTests(World& w) {
  const int p = w.size;
  for (const std::vector<int>& grid : gridsFor(p)) {
    Check check("grid " + w.name() + " " + describeGrid(grid) + ": multidim allreduce, every dtype, counts 0, 1, 7, 3p+1, 100003");
    if (w.broken) return check.fail("skipped, an earlier failure broke this world");
    std::string err = firstFailure(onEveryRank(w, [&](int, Context& c) { return completeTopology(c, grid, {}, {}); }));
    for (int r = 1; r < p && err.empty(); ++r) {
      const Topology& a = w.ctx[0]->topology();
      const Topology& b = w.ctx[r]->topology();
      if (a.local.alpha != b.local.alpha || a.cross.beta != b.cross.beta || a.measured != b.measured) {
        err = "rank " + std::to_string(r) + " holds other link costs than rank 0";
      }
    }
    if (!err.empty()) {
      check.fail(err);
      continue;
    }
    const size_t counts[] = {0, 1, 7, static_cast<size_t>(p) * 3 + 1, 100003};
    for (size_t count : counts) {
      for (DType t : kDTypes) allreduceCase(w, check, Algorithm::kMultiDim, t, ReduceOp::kSum, count);
      allreduceCase(w, check, Algorithm::kMultiDim, DType::kFloat32, ReduceOp::kAvg, count);
      allreduceCase(w, check, Algorithm::kMultiDim, DType::kFloat64, ReduceOp::kMax, count);
      allreduceCase(w, check, Algorithm::kMultiDim, DType::kFloat32, ReduceOp::kAvg, count, Scaling{0.5, 3});
      allreduceCase(w, check, Algorithm::kMultiDim, DType::kBFloat16, ReduceOp::kSum, count, Scaling{2, 0.25});
    }
  }
  const Topology& t = w.ctx[0]->topology();
  Check check("hierarchical " + w.name() + ": " + (t.uniform() ? "matches the reference" : "hosts of unequal size fail cleanly"));
  if (w.broken) return check.fail("skipped, an earlier failure broke this world");
  if (t.uniform()) {
    for (size_t count : {size_t(1), size_t(7), size_t(100003), size_t(1) << 20}) {
      allreduceCase(w, check, Algorithm::kHierarchical, DType::kFloat32, ReduceOp::kSum, count);
      allreduceCase(w, check, Algorithm::kAuto, DType::kFloat32, ReduceOp::kAvg, count);
    }
    // Large enough to be cut into pipelined segments (several ticks with two segments in flight).
    if (t.numHosts > 1 && t.ranksPerHost() > 1) {
      allreduceCase(w, check, Algorithm::kHierarchical, DType::kFloat32, ReduceOp::kAvg, 9000011);
      allreduceCase(w, check, Algorithm::kHierarchical, DType::kFloat16, ReduceOp::kAvg, 9000011, Scaling{0.5, 3});
      allreduceCase(w, check, Algorithm::kHierarchical, DType::kBFloat16, ReduceOp::kMax, 20000003);
    }
  } else {
    std::vector<uint8_t> buf(400);
    std::string err = expectSameVerdict(onEveryRank(w, [&](int, Context& c) {
      std::vector<uint8_t> mine(buf);
      AllreduceOptions o;
      o.data = mine.data();
      o.count = 100;
      o.algorithm = Algorithm::kHierarchical;
      return allreduce(c, o);
    }), Code::kInvalidArgument, [](const std::string& m) -> std::string {
      return contains(m, "same number of ranks on every host") ? "" : "message: " + m;
    });
    check.expect(err.empty(), err);
  }
}

// The timeline's reduce time: summed only while kernel timing is on, for the ring (kernels inside the
// progress loop) and recursive doubling (a kernel per step).
void kernelTimingTests(World& w) {
  if (w.size < 2 || w.broken) return;
  Check check("kernel timing " + w.name() + ": reduction time is summed only while timing is on");
  for (Algorithm algo : {Algorithm::kRing, Algorithm::kRecursiveDoubling}) {
    for (bool on : {false, true, false}) {
      std::vector<std::vector<float>> bufs(w.size, std::vector<float>(algo == Algorithm::kRing ? 100003 : 64, 1.0f));
      std::vector<int64_t> nanos(w.size);
      std::vector<uint32_t> calls(w.size);
      const std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
        c.setKernelTiming(on);
        c.takeKernelTime(&nanos[r], &calls[r]);  // start from zero
        AllreduceOptions o;
        o.data = reinterpret_cast<uint8_t*>(bufs[r].data());
        o.count = bufs[r].size();
        o.dtype = DType::kFloat32;
        o.op = ReduceOp::kSum;
        o.algorithm = algo;
        Status s = allreduce(c, o);
        c.takeKernelTime(&nanos[r], &calls[r]);
        c.setKernelTiming(false);
        return s;
      });
      const std::string what = std::string(algorithmName(algo)) + (on ? " on" : " off");
      std::string err = firstFailure(st);
      if (!err.empty()) {
        check.fail(what + ": " + err);
        continue;
      }
      // Off: nothing counted anywhere. On: every rank reduces in the ring; in recursive doubling the ranks
      // that sit out (world size not a power of two) only pass data on, so only some ranks do.
      int counted = 0;
      for (int r = 0; r < w.size; ++r) {
        const bool any = calls[r] > 0 && nanos[r] > 0;
        counted += any;
        const bool ok = !on ? calls[r] == 0 && nanos[r] == 0 : algo != Algorithm::kRing || any;
        check.expect(ok, what + ": rank " + std::to_string(r) + " counted " + std::to_string(calls[r]) + " calls, " +
                             std::to_string(nanos[r]) + " ns");
      }
      if (on) check.expect(counted > 0, what + ": no rank counted any reduction");
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Process groups: Context views of the world (Context(world, members)), two disjoint groups at a time.

// The even ranks, listed highest first (so group ranks differ from world ranks), and the odd ranks.
std::vector<int> groupOf(int size, int rank) {
  std::vector<int> m;
  if (rank % 2 == 0) {
    for (int r = size - 1; r >= 0; --r) {
      if (r % 2 == 0) m.push_back(r);
    }
  } else {
    for (int r = 1; r < size; r += 2) m.push_back(r);
  }
  return m;
}

void groupTests(World& w) {
  if (w.size < 4 || w.broken) return;
  std::vector<std::unique_ptr<Context>> views;
  for (int r = 0; r < w.size; ++r) views.push_back(std::make_unique<Context>(*w.ctx[r], groupOf(w.size, r)));
  auto onEveryView = [&](const std::function<Status(int, Context&)>& body) {
    return onEveryRank(w, [&](int r, Context&) { return body(r, *views[r]); });
  };
  {
    Check check("groups " + w.name() + ": a view's ranks, size, pairs and world ranks");
    for (int r = 0; r < w.size; ++r) {
      const std::vector<int> m = groupOf(w.size, r);
      Context& v = *views[r];
      check.expect(v.size() == static_cast<int>(m.size()) && m[v.rank()] == r,
                   "rank " + std::to_string(r) + ": view rank " + std::to_string(v.rank()) + " of " + std::to_string(v.size()));
      for (int g = 0; g < v.size(); ++g) {
        check.expect(v.worldRank(g) == m[g], "rank " + std::to_string(r) + ": worldRank(" + std::to_string(g) + ")");
        check.expect(g == v.rank() || v.pair(g) == w.ctx[r]->pair(m[g]), "rank " + std::to_string(r) + ": pair(" + std::to_string(g) + ")");
      }
    }
  }
  {
    Check check("groups " + w.name() + ": allreduce, broadcast, reducescatter, allgather in two groups at once");
    for (Algorithm algo : {Algorithm::kRing, Algorithm::kRecursiveDoubling}) {
      for (size_t count : {size_t(7), size_t(100003)}) {
        const std::string what = std::string(algorithmName(algo)) + " x " + std::to_string(count);
        std::vector<std::vector<uint8_t>> bufs;
        for (int r = 0; r < w.size; ++r) bufs.push_back(makeInput(DType::kInt32, ReduceOp::kSum, r, count, count));
        const std::vector<std::vector<uint8_t>> inputs = bufs;
        std::string err = firstFailure(onEveryView([&](int r, Context& v) {
          AllreduceOptions o;
          o.data = bufs[r].data();
          o.count = count;
          o.dtype = DType::kInt32;
          o.algorithm = algo;
          return allreduce(v, o);
        }));
        for (int r = 0; r < w.size && err.empty(); ++r) {
          std::vector<std::vector<uint8_t>> members;
          for (int m : groupOf(w.size, r)) members.push_back(inputs[m]);
          err = expectOnEveryRank(DType::kInt32, reference(DType::kInt32, ReduceOp::kSum, members, count), {bufs[r]});
          if (!err.empty()) err = "allreduce " + what + " on rank " + std::to_string(r) + ": " + err;
        }
        check.expect(err.empty(), err);
      }
    }
    // Broadcast from group rank 1: the second member of each group.
    std::vector<std::vector<uint8_t>> bufs;
    for (int r = 0; r < w.size; ++r) bufs.push_back(makeInput(DType::kInt32, ReduceOp::kSum, r, 5001, 3));
    const std::vector<std::vector<uint8_t>> inputs = bufs;
    std::string err = firstFailure(onEveryView([&](int r, Context& v) {
      BroadcastOptions o;
      o.data = bufs[r].data();
      o.bytes = 5001 * 4;
      o.root = 1;
      return broadcast(v, o);
    }));
    for (int r = 0; r < w.size && err.empty(); ++r) {
      const int root = groupOf(w.size, r)[1];
      if (memcmp(bufs[r].data(), inputs[root].data(), 5001 * 4) != 0) err = "broadcast: rank " + std::to_string(r) + " differs from world rank " + std::to_string(root);
    }
    check.expect(err.empty(), err);
    // Reduce-scatter: group rank g ends with block g of the group's sum.
    bufs = inputs;
    err = firstFailure(onEveryView([&](int r, Context& v) {
      ReduceScatterOptions o;
      o.data = bufs[r].data();
      o.count = 5001;
      o.dtype = DType::kInt32;
      return reduceScatter(v, o);
    }));
    for (int r = 0; r < w.size && err.empty(); ++r) {
      const std::vector<int> m = groupOf(w.size, r);
      std::vector<std::vector<uint8_t>> members;
      for (int q : m) members.push_back(inputs[q]);
      const std::vector<uint8_t> want = reference(DType::kInt32, ReduceOp::kSum, members, 5001);
      const int g = views[r]->rank(), d = static_cast<int>(m.size());
      const size_t at = blockStart(5001, d, g) * 4, len = blockCount(5001, d, g) * 4;
      if (memcmp(bufs[r].data() + at, want.data() + at, len) != 0) err = "reducescatter: rank " + std::to_string(r) + "'s block differs";
    }
    check.expect(err.empty(), err);
    // Allgather: every member's 3 + g bytes, by group rank.
    std::vector<std::vector<uint8_t>> outs(w.size);
    err = firstFailure(onEveryView([&](int r, Context& v) {
      AllgatherOptions o;
      size_t total = 0, before = 0;
      for (int g = 0; g < v.size(); ++g) {
        o.bytesPerRank.push_back(3 + g);
        if (g < v.rank()) before += 3 + g;
        total += 3 + g;
      }
      outs[r].assign(total, 0);
      for (int i = 0; i < 3 + v.rank(); ++i) outs[r][before + i] = static_cast<uint8_t>(r * 16 + i);
      o.output = outs[r].data();
      return allgather(v, o);
    }));
    for (int r = 0; r < w.size && err.empty(); ++r) {
      std::vector<uint8_t> want;
      const std::vector<int> m = groupOf(w.size, r);
      for (size_t g = 0; g < m.size(); ++g) {
        for (size_t i = 0; i < 3 + g; ++i) want.push_back(static_cast<uint8_t>(m[g] * 16 + i));
      }
      if (outs[r] != want) err = "allgather: rank " + std::to_string(r) + " got other bytes";
    }
    check.expect(err.empty(), err);
  }
  {
    Check check("groups " + w.name() + ": a mismatch inside a group names world ranks, and the world goes on");
    std::vector<Status> st = onEveryView([&](int r, Context& v) {
      const size_t count = r == 2 ? 11 : 10;
      return agree(v, proposalFor(makeWork(Kind::kAllreduce, count), 0, 1, count), "");
    });
    for (int r = 0; r < w.size; ++r) {
      const bool even = r % 2 == 0;
      check.expect(st[r].code() == (even ? Code::kMismatch : Code::kOk), "rank " + std::to_string(r) + ": " + describeStatus(st[r]));
      if (even) {
        check.expect(contains(st[r].message(), "rank 2 submitted") && contains(st[r].message(), "11"),
                     "rank " + std::to_string(r) + " does not name world rank 2: " + st[r].message());
      }
    }
    const std::string err = stillUsable(w);
    check.expect(err.empty(), err);
  }
}

// Rank s sends rank q bytes(s, q) bytes whose values name s, q and the index; every rank must receive the
// blocks for it, in rank order, and write nothing past them.
// singleCopy(r): whether rank r offers and reads single copies (AlltoallOptions::singleCopy); none: all do.
void alltoallCase(World& w, Check& check, const std::string& pattern, const std::function<size_t(int, int)>& bytes, bool countsFirst,
                  const std::function<bool(int)>& singleCopy = nullptr) {
  const std::string what = "bytes " + pattern + (countsFirst ? ", counts exchanged" : ", counts known");
  if (w.broken) return check.fail(what + ": skipped, an earlier failure broke this world");
  const int p = w.size;
  auto value = [](int s, int q, size_t i) { return static_cast<uint8_t>(mix(i * 131 + static_cast<uint64_t>(s) * 7 + static_cast<uint64_t>(q)) >> 13); };
  std::vector<std::vector<uint8_t>> in(p), out(p), want(p);
  for (int r = 0; r < p; ++r) {
    for (int q = 0; q < p; ++q) {
      for (size_t i = 0; i < bytes(r, q); ++i) in[r].push_back(value(r, q, i));
      for (size_t i = 0; i < bytes(q, r); ++i) want[r].push_back(value(q, r, i));
    }
    out[r].assign(want[r].size() + kGuardBytes, kGuardByte);
  }
  const std::vector<Status> st = onEveryRank(w, [&](int r, Context& c) {
    AlltoallOptions o;
    o.input = in[r].data();
    o.output = out[r].data();
    if (singleCopy) o.singleCopy = singleCopy(r);
    std::vector<uint64_t> send(p), recv;
    for (int q = 0; q < p; ++q) {
      o.sendBytes.push_back(bytes(r, q));
      send[q] = bytes(r, q);
    }
    if (countsFirst) {
      uint64_t total = 0;
      HORA_RETURN_IF_ERROR(alltoallCounts(c, send, -1, 1, &recv, &total));
      if (total != want[r].size()) return Status(Code::kInternal, "the counts sum to " + std::to_string(total));
      for (uint64_t n : recv) o.recvBytes.push_back(n);
    } else {
      for (int q = 0; q < p; ++q) o.recvBytes.push_back(bytes(q, r));
    }
    return alltoall(c, o);
  });
  std::string err = firstFailure(st);
  for (int r = 0; r < p && err.empty(); ++r) {
    if (!std::equal(want[r].begin(), want[r].end(), out[r].begin())) err = "rank " + std::to_string(r) + " received other bytes";
    for (size_t i = want[r].size(); i < out[r].size() && err.empty(); ++i) {
      if (out[r][i] != kGuardByte) err = "rank " + std::to_string(r) + " wrote past its output";
    }
  }
  if (err.empty()) check.pass();
  else check.fail(what + ": " + err);
}

// Blocks of kSingleCopyMinBytes and more between ranks of one host are read from the sender's memory
// (transport/shm/single_copy.h); a rank that does not read (singleCopy false: HORA_SHM_SINGLE_COPY=0, or
// a kernel that refuses) refuses the offers, the blocks come through the rings, and its senders stop
// offering on that pair.
void singleCopyTests(World& w) {
  const size_t min = shm::kSingleCopyMinBytes;
  Check check("alltoall " + w.name() + ": single copy of large blocks, offers refused, read or not by pair");
  auto sizes = [min](int s, int q) { return (s + q) % 3 == 0 ? size_t(0) : (s + q) % 3 == 1 ? min - 1 + 8 * s : min + 4096 * q; };
  alltoallCase(w, check, "around the single-copy bound, every rank reading", sizes, false);
  alltoallCase(w, check, "around the single-copy bound, no rank reading", sizes, false, [](int) { return false; });
  if (w.size < 2 || w.broken) return;
  const int last = w.size - 1;
  auto big = [min](int s, int q) { return min * 5 + 24 * static_cast<size_t>(s) + static_cast<size_t>(q); };
  for (int round = 0; round < 2; ++round) {
    alltoallCase(w, check, "5 x the bound, rank " + std::to_string(last) + " not reading (round " + std::to_string(round + 1) + ")", big,
                 round == 1, [last](int r) { return r != last; });
  }
  for (int r = 0; r < w.size && !w.broken; ++r) {
    for (int q = 0; q < w.size; ++q) {
      if (q == r || !w.ctx[r]->usesSharedMemory(q)) continue;
      const bool offers = w.ctx[r]->pair(q)->offersSingleCopy();
      check.expect(offers == (q != last), "rank " + std::to_string(r) + "'s pair with rank " + std::to_string(q) +
                                              (offers ? " still offers" : " no longer offers") + " a single copy");
    }
  }
  // And the refusing rank reads again: its senders stream to it, it offers to them and they read.
  alltoallCase(w, check, "5 x the bound after the refusals, every rank reading", big, false);
}

void alltoallTests(World& w) {
  Check check("alltoall " + w.name() + ": pairwise, different bytes per pair, some empty, some past 64 KiB");
  for (bool countsFirst : {false, true}) {
    alltoallCase(w, check, "0", [](int, int) { return size_t(0); }, countsFirst);
    alltoallCase(w, check, "(s + 2q) % 3", [](int s, int q) { return static_cast<size_t>((s + 2 * q) % 3); }, countsFirst);
    alltoallCase(w, check, "only rank 0 sends", [](int s, int) { return s == 0 ? size_t(9) : size_t(0); }, countsFirst);
    alltoallCase(w, check, "70001 + 1013s + 17q", [](int s, int q) { return size_t(70001) + 1013 * s + 17 * q; }, countsFirst);
  }
  singleCopyTests(w);
  if (w.size < 2 || w.broken) return;
  // The agreement's splits check: recvSplits that match every sender's splits agree; one that differs is
  // ERR_MISMATCH on every rank, naming the sender, the receiver and both counts.
  const int p = w.size;
  auto proposals = [&](int odd, uint64_t seq) {
    return onEveryRank(w, [&, odd, seq](int r, Context& c) {
      Work wk = makeWork(Kind::kAlltoall, 0);
      for (int q = 0; q < p; ++q) wk.splits.push_back(static_cast<uint64_t>(r + q));
      for (int q = 0; q < p; ++q) wk.splits.push_back(static_cast<uint64_t>(q + r + (r == odd && q == 0 ? 1 : 0)));
      for (int q = 0; q < p; ++q) wk.count += wk.splits[q];
      Proposal mine = proposalFor(wk, seq, 1, wk.count);
      mine.recvSplits = 1;
      return agree(c, mine, "", nullptr, nullptr, nullptr, &wk.splits);
    });
  };
  Check agreeCheck("agree " + w.name() + ": an alltoall's recvSplits against every sender's splits");
  std::string err = firstFailure(proposals(-1, w.seq++));
  agreeCheck.expect(err.empty(), "matching splits: " + err);
  err = expectSameVerdict(proposals(p - 1, w.seq++), Code::kMismatch, [&](const std::string& m) -> std::string {
    const std::string want = "rank 0 sends " + std::to_string(p - 1) + " elements to rank " + std::to_string(p - 1) +
                             " (its options.splits), but rank " + std::to_string(p - 1) + " expects " + std::to_string(p);
    return contains(m, want) ? "" : "the message does not say '" + want + "': " + m;
  });
  if (err.empty()) err = stillUsable(w);
  agreeCheck.expect(err.empty(), "rank " + std::to_string(p - 1) + " expects one more from rank 0: " + err);
}

void worldTests(Net net, int size) {
  World w;
  {
    Check check("connect " + std::string(netName(net)) + " size=" + std::to_string(size) +
                ": every rank connects, shared memory exactly between ranks of one host");
    Status st = connectWorld(net, size, 15000, &w);
    if (!st.isOk()) {
      check.fail(describeStatus(st));
      return;
    }
    for (int r = 0; r < size; ++r) {
      for (int q = 0; q < size; ++q) {
        if (q == r) continue;
        const bool shm = w.ctx[r]->usesSharedMemory(q);
        check.expect(shm == expectSharedMemory(net, r, q),
                     "rank " + std::to_string(r) + " reaches rank " + std::to_string(q) + " over " +
                         (shm ? "shared memory" : "TCP"));
      }
    }
  }
  // A fatal failure leaves the connections out of step; later groups get a fresh world.
  auto fresh = [&] {
    if (w.broken) connectWorld(net, size, 15000, &w);
  };
  allreduceTests(w);
  fresh();
  kernelTimingTests(w);
  fresh();
  reduceScatterTests(w);
  fresh();
  allgatherTests(w);
  fresh();
  alltoallTests(w);
  fresh();
  broadcastTests(w);
  fresh();
  reduceTests(w);
  fresh();
  gatherTests(w);
  fresh();
  agreementTests(w);
  agreementRootedTests(w);
  agreementNameTests(w);
  agreementLongReasonTests(w);
  fresh();
  agreementPayloadTests(w);
  fresh();
  agreementLayoutTests(w);
  fresh();
  scaledTests(w);
  fresh();
  gridTests(w);
  fresh();
  groupTests(w);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  testing::startWatchdog(240);
  layoutUnitTests();
  for (int size = 1; size <= 6; ++size) {
    worldTests(Net::kShm, size);
    worldTests(Net::kTcp, size);
    if (size >= 3) worldTests(Net::kMixed, size);
  }
  peerLossTest(Net::kTcp, true);
  peerLossTest(Net::kTcp, false);
  peerLossTest(Net::kShm, true);
  peerLossTest(Net::kShm, false);
  timeoutTest(Net::kTcp);
  timeoutTest(Net::kShm);
  abortTest(Net::kTcp);
  abortTest(Net::kShm);
  return testing::finish();
}
