// NCCL, loaded at run time: libnccl.so.2 is opened with dlopen() the first time it is asked for, so no
// NCCL headers or libraries are needed to build hora, and a machine without NCCL runs the other paths.
// HORA_NCCL=0 keeps it unloaded (the communicator's nccl option: load() is then never called). CUDA build only.
//
// The declarations below are the few entry points hora calls, with the types and enum values of NCCL's
// public API (nccl.h, stable since NCCL 2.0; ncclAvg since 2.10).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace hora {
namespace cuda {
namespace nccl {

typedef struct ncclComm* Comm;
struct UniqueId {
  char internal[128];
};
enum Result : int { kSuccess = 0, kInProgress = 7 };
enum DataType : int {
  kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5,
  kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9,
};
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

struct Api {
  Result (*getVersion)(int* version);
  Result (*getUniqueId)(UniqueId* id);
  Result (*commInitRank)(Comm* comm, int nranks, UniqueId id, int rank);
  Result (*commDestroy)(Comm comm);
  Result (*commAbort)(Comm comm);
  Result (*commGetAsyncError)(Comm comm, Result* asyncError);
  const char* (*getErrorString)(Result result);
  Result (*allReduce)(const void* sendbuff, void* recvbuff, size_t count, DataType datatype, RedOp op, Comm comm,
                      cudaStream_t stream);
  Result (*broadcast)(const void* sendbuff, void* recvbuff, size_t count, DataType datatype, int root, Comm comm,
                      cudaStream_t stream);
  Result (*allGather)(const void* sendbuff, void* recvbuff, size_t sendcount, DataType datatype, Comm comm,
                      cudaStream_t stream);
  Result (*reduceScatter)(const void* sendbuff, void* recvbuff, size_t recvcount, DataType datatype, RedOp op,
                          Comm comm, cudaStream_t stream);
  Result (*groupStart)();
  Result (*groupEnd)();
  int version = 0;  // e.g. 22304 for 2.23.4
};

// The loaded library, or nullptr (not found, or too old); *why says which.
const Api* load(std::string* why);

}  // namespace nccl
}  // namespace cuda
}  // namespace hora
