#include "communicator.h"

#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/cost.h"
#include "common/cycles.h"
#include "common/log.h"
#include "timeline.h"
#include "values.h"

namespace hora::binding {

using hora::Code;
using hora::Status;
using hora::Work;

namespace {

template <typename T>
T enumFrom(const Napi::Object& o, const char* key, int limit) {
  return checkedEnum<T>(o.Env(), o.Has(key) ? o.Get(key).As<Napi::Number>().Int32Value() : 0, key, limit);
}

// {alpha, beta} in seconds and seconds per byte, when present.
hora::LinkOverride linkOverride(const Napi::Object& o, const char* key) {
  hora::LinkOverride out;
  if (!o.Has(key) || !o.Get(key).IsObject()) return out;
  Napi::Object c = o.Get(key).As<Napi::Object>();
  out.set = true;
  out.cost.alpha = c.Get("alpha").As<Napi::Number>().DoubleValue();
  out.cost.beta = c.Get("beta").As<Napi::Number>().DoubleValue();
  return out;
}

}  // namespace

Napi::Function CommunicatorWrap::Define(Napi::Env env) {
  return DefineClass(env, "Communicator",
                     {InstanceMethod("listen", &CommunicatorWrap::Listen),
                      InstanceMethod("connect", &CommunicatorWrap::Connect),
                      InstanceMethod("submit", &CommunicatorWrap::Submit),
                      InstanceMethod("addGroup", &CommunicatorWrap::AddGroup),
                      InstanceMethod("collective", &CommunicatorWrap::Collective),
                      InstanceMethod("message", &CommunicatorWrap::Message),
                      InstanceMethod("result", &CommunicatorWrap::Result),
                      InstanceMethod("abort", &CommunicatorWrap::Abort),
                      InstanceMethod("estimate", &CommunicatorWrap::Estimate),
                      InstanceMethod("takeTimeline", &CommunicatorWrap::TakeTimeline),
                      InstanceMethod("close", &CommunicatorWrap::Close)});
}

CommunicatorWrap::CommunicatorWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CommunicatorWrap>(info) {
  Napi::Env env = info.Env();
  hora::IntervalClock::get();  // measured here, not in the middle of the first collective()
  Napi::Object o = info[0].As<Napi::Object>();
  hora::CommunicatorOptions opts;
  opts.rank = o.Get("rank").As<Napi::Number>().Int32Value();
  opts.size = o.Get("size").As<Napi::Number>().Int32Value();
  opts.timeoutMs = o.Get("timeoutMs").As<Napi::Number>().Int64Value();
  opts.fusionBytes = static_cast<size_t>(o.Get("fusionBytes").As<Napi::Number>().Int64Value());
  opts.algorithm = enumFrom<hora::Algorithm>(o, "algorithm", hora::kNumAlgorithms);
  opts.transport = enumFrom<hora::TransportChoice>(o, "transport", hora::kNumTransportChoices);
  opts.bindHost = o.Get("bindHost").As<Napi::String>().Utf8Value();
  opts.secret = o.Get("secret").As<Napi::String>().Utf8Value();
  if (o.Has("grid")) {
    Napi::Array grid = o.Get("grid").As<Napi::Array>();
    for (uint32_t i = 0; i < grid.Length(); ++i) opts.grid.push_back(grid.Get(i).As<Napi::Number>().Int32Value());
  }
  opts.costLocal = linkOverride(o, "costLocal");
  opts.costCross = linkOverride(o, "costCross");
  opts.timeline = o.Has("timeline") && o.Get("timeline").ToBoolean().Value();
  opts.ipcSlots = o.Has("ipcSlots") && o.Get("ipcSlots").ToBoolean().Value();
  opts.nccl = !o.Has("nccl") || o.Get("nccl").ToBoolean().Value();
  opts.shmSingleCopy = !o.Has("shmSingleCopy") || o.Get("shmSingleCopy").ToBoolean().Value();
  opts.elastic = o.Has("elastic") && o.Get("elastic").ToBoolean().Value();
  if (o.Has("logLevel")) hora::setLogLevel(enumFrom<hora::LogLevel>(o, "logLevel", hora::kNumLogLevels));
  if (opts.size < 1 || opts.rank < 0 || opts.rank >= opts.size) {
    throw Napi::RangeError::New(env, "native: rank " + std::to_string(opts.rank) + " outside world of " +
                                         std::to_string(opts.size));
  }
  // Node-API references hold objects only: the names live in an array.
  Napi::Array keys = Napi::Array::New(env, kNumItemKeys);
  for (uint32_t k = 0; k < kNumItemKeys; ++k) keys.Set(k, Napi::String::New(env, kItemKeyNames[k]));
  keys_ = Napi::Persistent(keys);
  tsfn_ = Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "hora.completion", 0, 1);
  tsfn_.Unref(env);
  Napi::ThreadSafeFunction tsfn = tsfn_;
  comm_ = std::make_unique<hora::Communicator>(opts, [tsfn](const std::shared_ptr<Work>& w) mutable {
    auto* copy = new std::shared_ptr<Work>(w);
    napi_status s = tsfn.NonBlockingCall(copy, [](Napi::Env env, Napi::Function cb, std::shared_ptr<Work>* data) {
      std::unique_ptr<std::shared_ptr<Work>> owned(data);
      // A wait() that took the result meanwhile leaves nothing to report: skip the call into JS.
      if (env == nullptr || (*owned)->takenInJs) return;
      // Nothing may escape from here: there is no JS frame above to catch it.
      try {
        cb.Call({Napi::Number::New(env, static_cast<double>((*owned)->id))});
      } catch (const Napi::Error& e) {
        // While the environment is torn down, calling into JS fails with no message: nothing to report.
        if (!e.Message().empty()) fprintf(stderr, "hora: a completion callback threw: %s\n", e.Message().c_str());
      }
    });
    if (s != napi_ok) delete copy;
  });
  // The calls made once per collective or message are also the object's own functions, bound to this
  // wrap: a method of the class finds its C++ object through napi_unwrap, a lookup of a private symbol
  // on every call, which took about as long as the JS side's own bookkeeping of a small collective.
  Napi::Object self = info.This().As<Napi::Object>();
  bindOwn(env, self, "collective", &CommunicatorWrap::Collective);
  bindOwn(env, self, "message", &CommunicatorWrap::Message);
  bindOwn(env, self, "result", &CommunicatorWrap::Result);
}

CommunicatorWrap::~CommunicatorWrap() {
  *self_ = nullptr;
  Shutdown();
}

// Defines self[name] as a function that calls method on this wrap. The function holds self_, not the
// wrap: one taken off the object and called after the wrap is gone throws instead of reaching freed memory.
void CommunicatorWrap::bindOwn(Napi::Env env, Napi::Object self, const char* name, Method method) {
  std::shared_ptr<CommunicatorWrap*> wrap = self_;
  Napi::Function f = Napi::Function::New(
      env,
      [wrap, method](const Napi::CallbackInfo& info) -> Napi::Value {
        if (*wrap == nullptr) throw Napi::Error::New(info.Env(), "native: communicator is gone");
        return ((*wrap)->*method)(info);
      },
      name);
  self.DefineProperty(Napi::PropertyDescriptor::Value(name, f, static_cast<napi_property_attributes>(napi_writable | napi_configurable)));
}

void CommunicatorWrap::Shutdown() {
  if (comm_ != nullptr) {
    comm_->abort(Status(Code::kShutdown, "the process is exiting"));
    comm_.reset();
  }
  if (!released_) {
    released_ = true;
    tsfn_.Release();
  }
}

Napi::Value CommunicatorWrap::Listen(const Napi::CallbackInfo& info) {
  int port = 0;
  Status st = comm_->listen(&port);
  if (!st.isOk()) ThrowStatus(info.Env(), st);
  return Napi::Number::New(info.Env(), port);
}

// connect(id, peers: [{rank, hostId, addr, port, localRank, keptRank?}], jobId, kept?): kept is what
// close({keep: true}) returned in the last world; a peer with keptRank >= 0 gets that world's pair.
Napi::Value CommunicatorWrap::Connect(const Napi::CallbackInfo& info) {
  auto w = Track(info.Env(), info[0]);
  Napi::Array arr = info[1].As<Napi::Array>();
  std::vector<hora::PeerInfo> peers(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Object p = arr.Get(i).As<Napi::Object>();
    peers[i].rank = p.Get("rank").As<Napi::Number>().Int32Value();
    peers[i].hostId = p.Get("hostId").As<Napi::String>().Utf8Value();
    peers[i].addr = p.Get("addr").As<Napi::String>().Utf8Value();
    peers[i].port = p.Get("port").As<Napi::Number>().Int32Value();
    peers[i].localRank = p.Get("localRank").As<Napi::Number>().Int32Value();
    if (p.Has("keptRank")) peers[i].keptRank = p.Get("keptRank").As<Napi::Number>().Int32Value();
  }
  std::unique_ptr<hora::KeptConnections> kept;
  if (info.Length() > 3 && info[3].IsExternal()) {
    // Taken out of the handle: a second connect() with it finds it empty.
    kept = info[3].As<Napi::External<hora::KeptConnections>>().Data()->takeAll();
  }
  comm_->connect(w, std::move(peers), info[2].As<Napi::String>().Utf8Value(), std::move(kept));
  return info.Env().Undefined();
}

// addGroup(id, members): makes process group id of members (world ranks, this rank among them).
Napi::Value CommunicatorWrap::AddGroup(const Napi::CallbackInfo& info) {
  const uint32_t id = info[0].As<Napi::Number>().Uint32Value();
  Napi::Array arr = info[1].As<Napi::Array>();
  std::vector<int> members(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); ++i) members[i] = arr.Get(i).As<Napi::Number>().Int32Value();
  Status st = comm_->addGroup(id, members);
  if (!st.isOk()) ThrowStatus(info.Env(), st);
  return info.Env().Undefined();
}

// takeTimeline(): {rows, strings} for the works completed since the last call (timeline on), collected
// in bulk so that recording costs no JS work per collective (timeline.h).
Napi::Value CommunicatorWrap::TakeTimeline(const Napi::CallbackInfo& info) {
  std::vector<hora::TimelineRecord> records;
  if (comm_ != nullptr) records = comm_->takeTimelineRecords();
  return timelineRows(info.Env(), records);
}

Napi::Value CommunicatorWrap::Abort(const Napi::CallbackInfo& info) {
  std::string code = info[0].As<Napi::String>().Utf8Value();
  std::string message = info[1].As<Napi::String>().Utf8Value();
  // The codes an abort keeps (by their names in common/enums.h); any other becomes ERR_INTERNAL.
  Code c = Code::kInternal;
  for (Code kept : {Code::kPeerLost, Code::kShutdown, Code::kTimeout}) {
    if (code == hora::codeName(kept)) c = kept;
  }
  // The rank whose loss ended the job, when the launcher named one: the `peer` of every error it causes.
  const int peer = info.Length() > 2 && info[2].IsNumber() ? info[2].As<Napi::Number>().Int32Value() : -1;
  comm_->abort(Status(c, message, peer));
  return info.Env().Undefined();
}

// estimate(bytes, algorithm): the cost model's predicted seconds per algorithm for a float32 allreduce
// of `bytes`, and the algorithm it would run. Call after connect.
Napi::Value CommunicatorWrap::Estimate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (comm_ == nullptr) throw Napi::Error::New(env, "native: communicator is closed");
  const size_t bytes = static_cast<size_t>(info[0].As<Napi::Number>().Int64Value());
  const hora::Topology& t = comm_->topology();
  hora::CostEstimate e = hora::estimateAllreduce(t, bytes);
  hora::AllreduceOptions o;
  o.count = bytes / 4;
  o.dtype = hora::DType::kFloat32;
  o.algorithm = static_cast<hora::Algorithm>(info[1].As<Napi::Number>().Int32Value());
  Napi::Object out = Napi::Object::New(env);
  out.Set("measured", t.measured);
  out.Set("ring", e.ring);
  out.Set("recursive_doubling", e.recursiveDoubling);
  if (e.hierarchical >= 0) out.Set("hierarchical", e.hierarchical);
  if (e.multiDim >= 0) out.Set("multidim", e.multiDim);
  out.Set("chosen", hora::algorithmName(comm_->chooseAllreduce(o)));
  return out;
}

// close(options?: {keep: boolean}): with keep, returns the connections of this connected world for the
// next world's connect() (an opaque handle; they close when it is collected), else undefined.
Napi::Value CommunicatorWrap::Close(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const bool keep = info.Length() > 0 && info[0].IsObject() && info[0].As<Napi::Object>().Get("keep").ToBoolean().Value();
  std::unique_ptr<hora::KeptConnections> kept;
  if (comm_ != nullptr) comm_->close(keep ? &kept : nullptr);
  comm_.reset();
  if (!released_) {
    released_ = true;
    tsfn_.Release();
  }
  if (kept == nullptr) return env.Undefined();
  return Napi::External<hora::KeptConnections>::New(env, kept.release(),
                                                    [](Napi::Env, hora::KeptConnections* k) { delete k; });
}

}  // namespace hora::binding
