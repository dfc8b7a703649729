// Printable names for element types and reduction operators (logs, error messages, the JS binding).
#include "common/types.h"

namespace hora {

const char* dtypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUint8: return "uint8";
  }
  return "unknown-dtype";
}

const char* opName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProd: return "prod";
  }
  return "unknown-op";
}

}  // namespace hora
