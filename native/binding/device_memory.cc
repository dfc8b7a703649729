#include "device_memory.h"

#include <string>

#include "cuda/device.h"
#include "values.h"

namespace hora::binding {
namespace {

// cuda: device memory for hora.cuda.DeviceBuffer (ts/cuda.ts validates every argument first).

int deviceArg(const Napi::Value& v) {
  if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), "native: device must be a number");
  return v.As<Napi::Number>().Int32Value();
}

size_t sizeArg(const Napi::Value& v, const char* what) {
  if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), std::string("native: ") + what + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 9007199254740991.0) {
    throw Napi::RangeError::New(v.Env(), std::string("native: ") + what + " must be a safe non-negative integer");
  }
  return static_cast<size_t>(d);
}

void checked(Napi::Env env, const Status& st) {
  if (!st.isOk()) ThrowStatus(env, st);
}

Napi::Value CudaBuilt(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), hora::cuda::built()); }
Napi::Value CudaAvailable(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), hora::cuda::available()); }
Napi::Value CudaDeviceCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), hora::cuda::deviceCount()); }
Napi::Value CudaUnavailableReason(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), hora::cuda::unavailableReason());
}

// alloc(device, bytes): zero-filled device memory, as a BigInt pointer.
Napi::Value CudaAlloc(const Napi::CallbackInfo& info) {
  void* ptr = nullptr;
  checked(info.Env(), hora::cuda::allocate(deviceArg(info[0]), sizeArg(info[1], "bytes"), &ptr));
  return pointerValue(info.Env(), ptr);
}

// free(ptr): memory from alloc() (or handed over by an allgather's devicePtr).
Napi::Value CudaFree(const Napi::CallbackInfo& info) {
  checked(info.Env(), hora::cuda::release(pointerFrom(info[0], "ptr")));
  return info.Env().Undefined();
}

// copyFromHost(device, ptr, view, stream): view.byteLength bytes from the view to ptr.
Napi::Value CudaCopyFromHost(const Napi::CallbackInfo& info) {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  viewOf(info[2], &data, &bytes);
  checked(info.Env(), hora::cuda::copyFromHost(pointerFrom(info[1], "ptr"), data, bytes, deviceArg(info[0]),
                                               pointerFrom(info[3], "stream")));
  return info.Env().Undefined();
}

// copyToHost(device, ptr, view, stream): view.byteLength bytes from ptr into the view.
Napi::Value CudaCopyToHost(const Napi::CallbackInfo& info) {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  viewOf(info[2], &data, &bytes);
  checked(info.Env(), hora::cuda::copyToHost(data, pointerFrom(info[1], "ptr"), bytes, deviceArg(info[0]),
                                             pointerFrom(info[3], "stream")));
  return info.Env().Undefined();
}

// checkRange(device, ptr, bytes, stream): throws unless [ptr, ptr + bytes) is memory of that device.
Napi::Value CudaCheckRange(const Napi::CallbackInfo& info) {
  checked(info.Env(), hora::cuda::checkRange(pointerFrom(info[1], "ptr"), sizeArg(info[2], "bytes"),
                                             deviceArg(info[0]), pointerFrom(info[3], "stream")));
  return info.Env().Undefined();
}

// cast(device, src, fromDtype, dst, toDtype, count, stream): conversion, or a copy when the dtypes match.
Napi::Value CudaCast(const Napi::CallbackInfo& info) {
  checked(info.Env(), hora::cuda::cast(deviceArg(info[0]), pointerFrom(info[1], "src"), dtypeArg(info[2]),
                                       pointerFrom(info[3], "dst"), dtypeArg(info[4]), sizeArg(info[5], "count"),
                                       pointerFrom(info[6], "stream")));
  return info.Env().Undefined();
}

}  // namespace

Napi::Object cudaExports(Napi::Env env) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("built", Napi::Function::New(env, CudaBuilt));
  o.Set("available", Napi::Function::New(env, CudaAvailable));
  o.Set("deviceCount", Napi::Function::New(env, CudaDeviceCount));
  o.Set("unavailableReason", Napi::Function::New(env, CudaUnavailableReason));
  o.Set("alloc", Napi::Function::New(env, CudaAlloc));
  o.Set("free", Napi::Function::New(env, CudaFree));
  o.Set("copyFromHost", Napi::Function::New(env, CudaCopyFromHost));
  o.Set("copyToHost", Napi::Function::New(env, CudaCopyToHost));
  o.Set("checkRange", Napi::Function::New(env, CudaCheckRange));
  o.Set("cast", Napi::Function::New(env, CudaCast));
  return o;
}

}  // namespace hora::binding
