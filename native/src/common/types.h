// Element types and reduction operators shared by every layer of the native core (the enums and their
// names: common/enums.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/enums.h"

namespace hora {

inline size_t dtypeSize(DType t) {
  switch (t) {
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
    case DType::kUint16: return 2;
    case DType::kUint8:
    case DType::kInt8: return 1;
  }
  return 0;
}

}  // namespace hora
