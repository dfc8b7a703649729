#ifdef HORA_CUDA

#include "cuda/nccl.h"

#include <dlfcn.h>

#include <mutex>

namespace hora {
namespace cuda {
namespace nccl {
namespace {

// ncclAvg, the newest operator hora passes, appeared in 2.10.
constexpr int kMinVersion = 21000;

struct Loaded {
  Api api{};
  bool ok = false;
  std::string why;
};

template <typename F>
bool bind(void* lib, const char* name, F* fn, std::string* why) {
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    *why = std::string("libnccl.so.2 has no ") + name;
    return false;
  }
  *fn = reinterpret_cast<F>(sym);
  return true;
}

Loaded open() {
  Loaded l;
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    l.why = std::string("libnccl.so.2 not loaded: ") + (err != nullptr ? err : "not found");
    return l;
  }
  Api& a = l.api;
  bool all = bind(lib, "ncclGetVersion", &a.getVersion, &l.why) && bind(lib, "ncclGetUniqueId", &a.getUniqueId, &l.why) &&
             bind(lib, "ncclCommInitRank", &a.commInitRank, &l.why) && bind(lib, "ncclCommDestroy", &a.commDestroy, &l.why) &&
             bind(lib, "ncclCommAbort", &a.commAbort, &l.why) &&
             bind(lib, "ncclCommGetAsyncError", &a.commGetAsyncError, &l.why) &&
             bind(lib, "ncclGetErrorString", &a.getErrorString, &l.why) && bind(lib, "ncclAllReduce", &a.allReduce, &l.why) &&
             bind(lib, "ncclBroadcast", &a.broadcast, &l.why) && bind(lib, "ncclAllGather", &a.allGather, &l.why) &&
             bind(lib, "ncclReduceScatter", &a.reduceScatter, &l.why) && bind(lib, "ncclGroupStart", &a.groupStart, &l.why) &&
             bind(lib, "ncclGroupEnd", &a.groupEnd, &l.why);
  if (!all) return l;
  if (a.getVersion(&a.version) != kSuccess || a.version < kMinVersion) {
    l.why = "libnccl.so.2 is version " + std::to_string(a.version) + "; hora needs 2.10 or later";
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

const Api* load(std::string* why) {
  static Loaded loaded = open();
  if (!loaded.ok) {
    *why = loaded.why;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace nccl
}  // namespace cuda
}  // namespace hora

#endif  // HORA_CUDA
