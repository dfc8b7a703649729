// The Node-API boundary (native/binding/): JS values become plain engine structs here, and nowhere else.
//
// The contract with the JS side is ts/native.ts. This file registers the module; the rest of the
// binding is one file per job:
//   communicator.h/.cc  the Communicator class: one engine communicator, its lifecycle
//   work_calls.cc       the Communicator's calls once per collective or message, and the results back
//   timeline.h/.cc      takeTimeline()'s rows
//   device_memory.h/.cc the `cuda` object (device memory for hora.cuda.DeviceBuffer)
//   values.h            the JS <-> C++ value conversions they share
//   backing_store.h/.cc keeping a pending work's ArrayBuffer memory valid
#include <napi.h>

#include <ctime>
#include <string>

#include "backing_store.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "communicator.h"
#include "device_memory.h"
#include "reduce/reduce.h"
#include "timeline.h"
#include "values.h"

namespace hora::binding {
namespace {

// clocks(): [monotonic nanoseconds, wall clock minus monotonic in microseconds], read together. The first
// is the engine's clock (WorkTimes); the second turns it into wall-clock time for the timeline.
Napi::Value Clocks(const Napi::CallbackInfo& info) {
  timespec before{}, wall{}, after{};
  clock_gettime(CLOCK_MONOTONIC, &before);
  clock_gettime(CLOCK_REALTIME, &wall);
  clock_gettime(CLOCK_MONOTONIC, &after);
  auto nanos = [](const timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; };
  const int64_t mono = (nanos(before) + nanos(after)) / 2;
  Napi::Array out = Napi::Array::New(info.Env(), 2);
  out.Set(0u, Napi::Number::New(info.Env(), double(mono)));
  out.Set(1u, Napi::Number::New(info.Env(), double(nanos(wall) - mono) / 1000.0));
  return out;
}

// scaleAlone(view, dtype, prescale, postscale): a world of one's allreduce or reducescatter with factors,
// where nothing is combined (reduce/reduce.h); the view is scaled in place. Float dtypes only.
Napi::Value ScaleAlone(const Napi::CallbackInfo& info) {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  viewOf(info[0], &data, &bytes);
  const hora::DType dtype = dtypeArg(info[1]);
  if (!hora::scalable(dtype)) throw Napi::RangeError::New(info.Env(), "native: scaleAlone takes float dtypes");
  hora::Scaling s;
  s.pre = info[2].As<Napi::Number>().DoubleValue();
  s.post = info[3].As<Napi::Number>().DoubleValue();
  hora::scaleAlone(dtype, data, bytes / hora::dtypeSize(dtype), s);
  return info.Env().Undefined();
}

// crc32c(view): the CRC-32C of a typed array's bytes (common/crc32c.h), the checksum of a checkpoint's
// chunks (ts/checkpoint-manifest.ts). On the calling thread: a 4 MiB chunk takes well under a millisecond.
Napi::Value Crc32c(const Napi::CallbackInfo& info) {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  viewOf(info[0], &data, &bytes);
  return Napi::Number::New(info.Env(), double(hora::crc32c(data, bytes)));
}

// setLogLevel(level): HORA_DEBUG as ts/config.ts parsed it (0 WARN, 1 INFO, 2 TRACE), passed when the addon
// is loaded, before any communicator exists; each communicator's options pass it again.
Napi::Value SetLogLevel(const Napi::CallbackInfo& info) {
  const int level = info[0].As<Napi::Number>().Int32Value();
  if (level < 0 || level >= hora::kNumLogLevels) {
    throw Napi::RangeError::New(info.Env(), "native: log level out of range: " + std::to_string(level));
  }
  hora::setLogLevel(static_cast<hora::LogLevel>(level));
  return info.Env().Undefined();
}

// enums(): the names of every enum that crosses this boundary, in the order of their values
// (common/enums.h, the timeline's columns, and the keys of a submitted item), for test/enums.test.js to
// compare with ts/native.ts.
template <typename E, typename Name>
Napi::Array namesOf(Napi::Env env, int count, Name name) {
  Napi::Array out = Napi::Array::New(env, count);
  for (int i = 0; i < count; ++i) out.Set(static_cast<uint32_t>(i), name(static_cast<E>(i)));
  return out;
}

Napi::Value Enums(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  out.Set("dtypes", namesOf<hora::DType>(env, hora::kNumDTypes, hora::dtypeName));
  out.Set("dtypeBytes", namesOf<hora::DType>(env, hora::kNumDTypes, [](hora::DType d) { return double(hora::dtypeSize(d)); }));
  out.Set("ops", namesOf<hora::ReduceOp>(env, hora::kNumReduceOps, hora::opName));
  out.Set("algorithms", namesOf<hora::Algorithm>(env, hora::kNumAlgorithms, hora::algorithmName));
  out.Set("kinds", namesOf<hora::Kind>(env, hora::kNumKinds, hora::kindName));
  out.Set("codes", namesOf<hora::Code>(env, hora::kNumCodes, hora::codeName));
  out.Set("timelineColumns", namesOf<TimelineColumn>(env, kNumTimelineColumns, timelineColumnName));
  out.Set("itemKeys", namesOf<ItemKey>(env, kNumItemKeys, [](ItemKey k) { return kItemKeyNames[k]; }));
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("Communicator", CommunicatorWrap::Define(env));
  exports.Set("clocks", Napi::Function::New(env, Clocks));
  exports.Set("scaleAlone", Napi::Function::New(env, ScaleAlone));
  exports.Set("crc32c", Napi::Function::New(env, Crc32c));
  exports.Set("enums", Napi::Function::New(env, Enums));
  exports.Set("setLogLevel", Napi::Function::New(env, SetLogLevel));
  exports.Set("cuda", cudaExports(env));
  exports.Set("abiVersion", Napi::Number::New(env, 1));
  exports.Set("holdsArrayBuffers", Napi::Boolean::New(env, hora::binding::canHoldBackingStores()));
  return exports;
}

}  // namespace
}  // namespace hora::binding

using hora::binding::Init;
NODE_API_MODULE(hora, Init)
