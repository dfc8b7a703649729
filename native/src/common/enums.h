// The enums that cross the Node-API boundary (and, for dtypes, ops and kinds, the wire between ranks):
// each with its count and its names, in one place.
//
// ts/native.ts holds the same tables on the JS side; the addon hands these out (`enums()` in
// native/binding/addon.cc) and test/enums.test.js checks that the two agree entry by entry. A name is
// bound to its member by a switch (the compiler warns of a member left out), a count to the last member.
// Wire values: never renumber; a new member goes last, with its name here and in ts/native.ts.
#pragma once

#include <cstdint>

namespace hora {

enum class DType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,   // IEEE binary16; reduced in float32, rounded to nearest even
  kBFloat16 = 3,  // bfloat16; reduced in float32, rounded to nearest even
  kInt32 = 4,
  kInt64 = 5,
  kUint8 = 6,     // bytes: broadcast / allgather; reductions treat them as unsigned integers
  kInt8 = 7,      // the integers wrap around on overflow, as kInt32, kInt64 and kUint8 do
  kInt16 = 8,
  kUint16 = 9,
};
constexpr int kNumDTypes = static_cast<int>(DType::kUint16) + 1;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,  // summed on the wire; divided by the world size once, at the end
  kMin = 2,
  kMax = 3,
  kProd = 4,
};
constexpr int kNumReduceOps = static_cast<int>(ReduceOp::kProd) + 1;

// What a Work is (engine/work.h).
enum class Kind : uint8_t {
  kAllreduce = 0,
  kBroadcast = 1,
  kAllgather = 2,
  kReduceScatter = 3,
  kBarrier = 4,
  kInvalid = 5,  // a placeholder for a call that failed validation on this rank, so the others hear of it
  // Point-to-point messages (engine/p2p.h): never part of the agreement, never on the collectives' streams.
  kSend = 6,
  kRecv = 7,
  // Collectives appended after the messages (wire values are never renumbered).
  kAlltoall = 8,  // every rank sends its block q to rank q: per-rank counts (engine/work.h Work::splits)
  kReduce = 9,    // every rank's data reduced into the root's out (algorithms/rooted.cc)
  kGather = 10,   // every rank's data concatenated at the root, lengths may differ (algorithms/rooted.cc)
  kScatter = 11,  // the root's blocks, block q to rank q (Work::splits on the root)
  // hora.join() (engine/agreement.h): a rank out of data takes part in the others' collectives with a
  // neutral contribution until every rank has joined.
  kJoin = 12,
};
constexpr int kNumKinds = static_cast<int>(Kind::kJoin) + 1;

// The allreduce algorithms (algorithms/collectives.h).
enum class Algorithm : uint8_t {
  kAuto = 0,
  kRing = 1,               // reduce-scatter + allgather around a ring, segmented; bandwidth-optimal
  kRecursiveDoubling = 2,  // latency-optimal, for small messages
  kHierarchical = 3,       // reduce-scatter in each host, allreduce across hosts, allgather in each host
  kMultiDim = 4,           // the same along each dimension of the HORA_TOPOLOGY grid (IBM DDL)
};
constexpr int kNumAlgorithms = static_cast<int>(Algorithm::kMultiDim) + 1;

// The outcome of a Status (common/status.h): the closed set that users see as HoraError.code
// (ARCHITECTURE.md).
enum class Code : int {
  kOk = 0,
  kTimeout,          // ERR_TIMEOUT: a wait passed its deadline (HORA_TIMEOUT_S)
  kPeerLost,         // ERR_PEER_LOST: a connection to a peer closed or failed
  kMismatch,         // ERR_MISMATCH: ranks submitted different collectives at the same position
  kInvalidArgument,  // ERR_INVALID_ARGUMENT: bad input, here or on another rank
  kNotInitialized,   // ERR_NOT_INITIALIZED
  kShutdown,         // ERR_SHUTDOWN: the communicator was closed before the work ran
  kAuth,             // ERR_AUTH: a connection failed the job's handshake
  kInternal,         // ERR_INTERNAL: a system call or invariant failed
  kIo,               // ERR_IO: a file operation failed (hora.checkpoint: a full disk, a path not writable); JS only
};
constexpr int kNumCodes = static_cast<int>(Code::kIo) + 1;

// Names for logs, error messages, the timeline and the JS binding.

constexpr const char* dtypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUint8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kUint16: return "uint16";
  }
  return "unknown-dtype";
}

constexpr const char* opName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProd: return "prod";
  }
  return "unknown-op";
}

// The engine's name of a kind, in its error messages and the timeline; the JS API calls kReduceScatter
// reduceScatter (ts/native.ts keeps both beside each other).
constexpr const char* kindName(Kind k) {
  switch (k) {
    case Kind::kAllreduce: return "allreduce";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAllgather: return "allgather";
    case Kind::kReduceScatter: return "reducescatter";
    case Kind::kBarrier: return "barrier";
    case Kind::kInvalid: return "invalid call";
    case Kind::kSend: return "send";
    case Kind::kRecv: return "recv";
    case Kind::kAlltoall: return "alltoall";
    case Kind::kReduce: return "reduce";
    case Kind::kGather: return "gather";
    case Kind::kScatter: return "scatter";
    case Kind::kJoin: return "join";
  }
  return "unknown collective";
}

// Also the values of HORA_ALGO.
constexpr const char* algorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kMultiDim: return "multidim";
  }
  return "?";
}

constexpr const char* codeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kTimeout: return "ERR_TIMEOUT";
    case Code::kPeerLost: return "ERR_PEER_LOST";
    case Code::kMismatch: return "ERR_MISMATCH";
    case Code::kInvalidArgument: return "ERR_INVALID_ARGUMENT";
    case Code::kNotInitialized: return "ERR_NOT_INITIALIZED";
    case Code::kShutdown: return "ERR_SHUTDOWN";
    case Code::kAuth: return "ERR_AUTH";
    case Code::kInternal: return "ERR_INTERNAL";
    case Code::kIo: return "ERR_IO";
  }
  return "ERR_INTERNAL";
}

}  // namespace hora
