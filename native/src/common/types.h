// Element types and reduction operators shared by every layer of the native core.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hora {

// Wire values are part of the cross-rank header: never renumber.
enum class DType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,   // IEEE binary16; reduced in float32, rounded to nearest even
  kBFloat16 = 3,  // bfloat16; reduced in float32, rounded to nearest even
  kInt32 = 4,
  kInt64 = 5,
  kUint8 = 6,     // bytes: broadcast / allgather; reductions treat them as unsigned integers
};
constexpr int kNumDTypes = 7;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,  // summed on the wire; divided by the world size once, at the end
  kMin = 2,
  kMax = 3,
  kProd = 4,
};
constexpr int kNumReduceOps = 5;

inline size_t dtypeSize(DType t) {
  switch (t) {
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kUint8: return 1;
  }
  return 0;
}

const char* dtypeName(DType t);
const char* opName(ReduceOp op);

}  // namespace hora
