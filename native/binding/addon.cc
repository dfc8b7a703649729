// The Node-API boundary: JS values become plain engine structs here, and nowhere else.
//
// The contract with the JS side is ts/native.ts. A Communicator object wraps one engine communicator.
// Completions travel from the communication thread to the JS thread through one thread-safe function per
// communicator, which is referenced only while work is outstanding so an idle communicator never keeps
// the process alive. wait() blocks the JS thread on the engine's condition variable for callers that must
// be synchronous (framework hooks); the later asynchronous completion of the same work is then ignored.
//
// The `cuda` object is the same flat style over cuda/device.h: device pointers and streams travel as
// BigInt, each call is synchronous, and a failed Status is thrown as an Error whose code is its code name.
#include <napi.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/cost.h"
#include "backing_store.h"
#include "common/cycles.h"
#include "common/log.h"
#include "cuda/device.h"
#include "engine/communicator.h"

namespace {

using hora::Code;
using hora::Status;
using hora::Work;

void ThrowStatus(Napi::Env env, const Status& st) {
  Napi::Error e = Napi::Error::New(env, st.message());
  e.Set("code", hora::codeName(st.code()));
  throw e;
}

// A device pointer or stream handed over as a BigInt; 0n is a null pointer.
void* pointerFrom(const Napi::Value& v, const char* what) {
  if (!v.IsBigInt()) throw Napi::TypeError::New(v.Env(), std::string("native: ") + what + " must be a BigInt");
  bool lossless = false;
  uint64_t raw = v.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) throw Napi::RangeError::New(v.Env(), std::string("native: ") + what + " does not fit in 64 bits");
  return reinterpret_cast<void*>(static_cast<uintptr_t>(raw));
}

Napi::BigInt pointerValue(Napi::Env env, const void* p) {
  return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
}

template <typename T>
T enumFrom(const Napi::Object& o, const char* key, int limit) {
  int v = o.Has(key) ? o.Get(key).As<Napi::Number>().Int32Value() : 0;
  if (v < 0 || v >= limit) {
    throw Napi::RangeError::New(o.Env(), std::string("native: ") + key + " out of range: " + std::to_string(v));
  }
  return static_cast<T>(v);
}

// The properties of a submitted item. Looking a property up by a C string makes and internalizes a V8
// string each time; with a dozen per item that was a good part of a small collective's cost, so the
// names are made once per communicator.
enum ItemKey { kId, kKind, kOp, kDtype, kRoot, kAlgorithm, kName, kInvalidReason, kDevice, kDevicePtr, kCount,
               kStream, kOutPtr, kData, kOut, kPeer, kTag, kGroup, kScale, kNumItemKeys };
const char* const kItemKeyNames[kNumItemKeys] = {"id", "kind", "op", "dtype", "root", "algorithm", "name",
                                                  "invalidReason", "device", "devicePtr", "count", "stream",
                                                  "outPtr", "data", "out", "peer", "tag", "group", "scale"};

// The flags in the code argument of submitOne(), runOne(), submitMessage() and runMessage() (ts/native.ts
// packCode).
constexpr int32_t kWillWait = 1 << 16, kHasData = 1 << 17, kHasOut = 1 << 18, kHasName = 1 << 19;
static_assert(hora::kNumKinds <= 16 && hora::kNumReduceOps <= 16 && hora::kNumDTypes <= 16 && hora::kNumAlgorithms <= 16,
              "packCode gives kind, op, dtype and algorithm four bits each");

// The numbers of one work in a takeTimeline() row, in order (ts/native.ts TimelineColumn): the id, the
// WorkTimes (nanoseconds, then counts), and indexes into the strings for the algorithm, the error code
// and the message (-1: none).
enum TimelineColumn {
  kColId, kColEnqueued, kColStarted, kColCopyInStart, kColCopyInEnd, kColNegotiateStart, kColNegotiateEnd,
  kColTransferEnd, kColCopyOutStart, kColCopyOutEnd, kColDone, kColReduceNanos, kColReduceCalls, kColFusedTensors,
  kColSeq, kColAlgorithm, kColCode, kColMessage,
};
constexpr int kNumTimelineColumns = kColMessage + 1;

constexpr const char* timelineColumnName(TimelineColumn c) {
  switch (c) {
    case kColId: return "id";
    case kColEnqueued: return "enqueued";
    case kColStarted: return "started";
    case kColCopyInStart: return "copyInStart";
    case kColCopyInEnd: return "copyInEnd";
    case kColNegotiateStart: return "negotiateStart";
    case kColNegotiateEnd: return "negotiateEnd";
    case kColTransferEnd: return "transferEnd";
    case kColCopyOutStart: return "copyOutStart";
    case kColCopyOutEnd: return "copyOutEnd";
    case kColDone: return "done";
    case kColReduceNanos: return "reduceNanos";
    case kColReduceCalls: return "reduceCalls";
    case kColFusedTensors: return "fusedTensors";
    case kColSeq: return "seq";
    case kColAlgorithm: return "algorithm";
    case kColCode: return "code";
    case kColMessage: return "message";
  }
  return "?";
}

// An int32 argument or property; undefined counts as `absent`. One Node-API call for a number (a small
// collective's arguments cross about twenty of them, and each costs tens of nanoseconds).
int32_t int32Or(const Napi::Value& v, int32_t absent) {
  int32_t n = 0;
  if (napi_get_value_int32(v.Env(), v, &n) == napi_ok) return n;
  if (v.IsUndefined()) return absent;
  throw Napi::TypeError::New(v.Env(), "native: expected a number");
}

// An enum-valued property; absent counts as 0.
template <typename T>
T enumFrom(Napi::Env env, int n, ItemKey key, int limit) {
  if (n < 0 || n >= limit) {
    throw Napi::RangeError::New(env, std::string("native: ") + kItemKeyNames[key] + " out of range: " + std::to_string(n));
  }
  return static_cast<T>(n);
}

template <typename T>
T enumFrom(const Napi::Value& v, ItemKey key, int limit) {
  return enumFrom<T>(v.Env(), int32Or(v, 0), key, limit);
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

size_t elementBytes(napi_typedarray_type t) {
  switch (t) {
    case napi_int8_array:
    case napi_uint8_array:
    case napi_uint8_clamped_array: return 1;
    case napi_int16_array:
    case napi_uint16_array: return 2;
    case napi_int32_array:
    case napi_uint32_array:
    case napi_float32_array: return 4;
    default: return 8;  // float64, bigint64, biguint64
  }
}

// Pointer to the first element and byte length of a TypedArray (any byteOffset), in one Node-API call.
void viewOf(const Napi::Value& v, uint8_t** data, size_t* bytes) {
  napi_typedarray_type type;
  size_t length = 0;
  void* first = nullptr;
  if (napi_get_typedarray_info(v.Env(), v, &type, &length, &first, nullptr, nullptr) != napi_ok) {
    throw Napi::TypeError::New(v.Env(), "native: expected a TypedArray");
  }
  *data = static_cast<uint8_t*>(first);
  *bytes = length * elementBytes(type);
}

// The element count and first element of a collective's array, whose element size the call's dtype
// gives: viewOf without asking for the array's type, which Node-API answers through a chain of type tests
// (a Float32Array matches the eighth; about 25 ns of a small collective). The ArrayBuffer bounds the
// count, so an array whose elements are not the dtype's size (the JS layer never passes one) gives a wrong
// count, never one that reaches past the buffer.
//
// A view of a SharedArrayBuffer (worker_threads' memory) has no ArrayBuffer to ask: Node-API before
// node_api_is_sharedarraybuffer (Node 18 to 22) answers napi_get_arraybuffer_info only for an ArrayBuffer,
// and napi_invalid_arg for a SharedArrayBuffer. Such a view is bounded by its own type instead, which
// costs the type tests only there.
size_t elementsOf(const Napi::Value& v, size_t dtypeBytes, uint8_t** data) {
  napi_env env = v.Env();
  size_t length = 0, offset = 0, bufferBytes = 0;
  void* first = nullptr;
  napi_value buffer = nullptr;
  if (napi_get_typedarray_info(env, v, nullptr, &length, &first, &buffer, &offset) != napi_ok) {
    throw Napi::TypeError::New(env, "native: expected a TypedArray");
  }
  if (napi_get_arraybuffer_info(env, buffer, nullptr, &bufferBytes) != napi_ok) {
    napi_typedarray_type type;
    if (napi_get_typedarray_info(env, v, &type, nullptr, nullptr, nullptr, nullptr) != napi_ok) {
      throw Napi::TypeError::New(env, "native: expected a TypedArray");
    }
    if (dtypeBytes != elementBytes(type)) {
      throw Napi::RangeError::New(env, "native: the array's elements are not its dtype's size");
    }
    *data = static_cast<uint8_t*>(first);
    return length;
  }
  if (offset > bufferBytes || length > (bufferBytes - offset) / dtypeBytes) {
    throw Napi::RangeError::New(env, "native: the array holds fewer bytes than its dtype needs");
  }
  *data = static_cast<uint8_t*>(first);
  return length;
}

// An item's scale, [prescaleFactor, postscaleFactor] (finite numbers; the JS layer checked them).
hora::Scaling scalingOf(const Napi::Value& v) {
  if (!v.IsArray()) throw Napi::TypeError::New(v.Env(), "native: scale must be [prescale, postscale]");
  Napi::Array a = v.As<Napi::Array>();
  hora::Scaling s;
  s.pre = a.Get(0u).As<Napi::Number>().DoubleValue();
  s.post = a.Get(1u).As<Napi::Number>().DoubleValue();
  if (!std::isfinite(s.pre) || !std::isfinite(s.post)) throw Napi::RangeError::New(v.Env(), "native: scale factors must be finite");
  return s;
}

class CommunicatorWrap : public Napi::ObjectWrap<CommunicatorWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Communicator",
                       {InstanceMethod("listen", &CommunicatorWrap::Listen),
                        InstanceMethod("connect", &CommunicatorWrap::Connect),
                        InstanceMethod("submit", &CommunicatorWrap::Submit),
                        InstanceMethod("addGroup", &CommunicatorWrap::AddGroup),
                        InstanceMethod("submitOne", &CommunicatorWrap::SubmitOne),
                        InstanceMethod("runOne", &CommunicatorWrap::RunOne),
                        InstanceMethod("submitMessage", &CommunicatorWrap::SubmitMessage),
                        InstanceMethod("runMessage", &CommunicatorWrap::RunMessage),
                        InstanceMethod("wait", &CommunicatorWrap::Wait),
                        InstanceMethod("spin", &CommunicatorWrap::Spin),
                        InstanceMethod("abort", &CommunicatorWrap::Abort),
                        InstanceMethod("estimate", &CommunicatorWrap::Estimate),
                        InstanceMethod("takeTimeline", &CommunicatorWrap::TakeTimeline),
                        InstanceMethod("close", &CommunicatorWrap::Close)});
  }

  CommunicatorWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CommunicatorWrap>(info) {
    Napi::Env env = info.Env();
    hora::IntervalClock::get();  // measured here, not in the middle of the first runOne()
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
    bindOwn(env, self, "submitOne", &CommunicatorWrap::SubmitOne);
    bindOwn(env, self, "runOne", &CommunicatorWrap::RunOne);
    bindOwn(env, self, "submitMessage", &CommunicatorWrap::SubmitMessage);
    bindOwn(env, self, "runMessage", &CommunicatorWrap::RunMessage);
    bindOwn(env, self, "wait", &CommunicatorWrap::Wait);
    bindOwn(env, self, "spin", &CommunicatorWrap::Spin);
  }

  ~CommunicatorWrap() override {
    *self_ = nullptr;
    Shutdown();
  }

 private:
  using Method = Napi::Value (CommunicatorWrap::*)(const Napi::CallbackInfo&);

  // Defines self[name] as a function that calls method on this wrap. The function holds self_, not the
  // wrap: one taken off the object and called after the wrap is gone throws instead of reaching freed memory.
  void bindOwn(Napi::Env env, Napi::Object self, const char* name, Method method) {
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

  void Shutdown() {
    if (comm_ != nullptr) {
      comm_->abort(Status(Code::kShutdown, "the process is exiting"));
      comm_.reset();
    }
    if (!released_) {
      released_ = true;
      tsfn_.Release();
    }
  }

  Napi::Value Listen(const Napi::CallbackInfo& info) {
    int port = 0;
    Status st = comm_->listen(&port);
    if (!st.isOk()) ThrowStatus(info.Env(), st);
    return Napi::Number::New(info.Env(), port);
  }

  // connect(id, peers: [{rank, hostId, addr, port, localRank, keptRank?}], jobId, kept?): kept is what
  // close({keep: true}) returned in the last world; a peer with keptRank >= 0 gets that world's pair.
  Napi::Value Connect(const Napi::CallbackInfo& info) {
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

  // submit(items: [{id, kind, op, dtype, root, algorithm, name, data, out, invalidReason}], willWait?); a send or
  // recv item (kinds 6, 7) carries peer and tag and is posted at once, beside the batch; a device item
  // has device >= 0, devicePtr, count, stream (and outPtr for reducescatter) instead of data and out.
  // willWait: the caller goes on to wait() for one of the items at once.
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Array arr = info[0].As<Napi::Array>();
    std::vector<std::shared_ptr<Work>> batch;
    std::vector<std::shared_ptr<Work>> messages;
    batch.reserve(arr.Length());
    Napi::Array keys = keys_.Value();
    // Tracked only once every item is read: an item the binding refuses leaves nothing of the call behind
    // (the JS side then fails the whole call's works, and no entry here would wait for a completion).
    if (comm_ == nullptr) throw Napi::Error::New(env, "native: communicator is closed");
    std::vector<std::shared_ptr<Work>> all;
    all.reserve(arr.Length());
    for (uint32_t i = 0; i < arr.Length(); ++i) {
      Napi::Object it = arr.Get(i).As<Napi::Object>();
      auto get = [&](ItemKey k) { return it.Get(keys.Get(static_cast<uint32_t>(k))); };
      auto w = std::make_shared<Work>();
      w->id = static_cast<uint64_t>(get(kId).As<Napi::Number>().Int64Value());
      all.push_back(w);
      w->kind = enumFrom<hora::Kind>(get(kKind), kKind, hora::kNumKinds);
      w->op = enumFrom<hora::ReduceOp>(get(kOp), kOp, hora::kNumReduceOps);
      w->dtype = enumFrom<hora::DType>(get(kDtype), kDtype, hora::kNumDTypes);
      Napi::Value root = get(kRoot);
      w->root = root.IsUndefined() ? 0 : root.As<Napi::Number>().Int32Value();
      w->algorithm = enumFrom<hora::Algorithm>(get(kAlgorithm), kAlgorithm, hora::kNumAlgorithms);
      Napi::Value name = get(kName);
      if (!name.IsUndefined()) w->name = name.As<Napi::String>().Utf8Value();
      Napi::Value invalidReason = get(kInvalidReason);
      if (!invalidReason.IsUndefined()) w->invalidReason = invalidReason.As<Napi::String>().Utf8Value();
      Napi::Value scale = get(kScale);
      if (!scale.IsUndefined()) w->scaling = scalingOf(scale);
      Napi::Value group = get(kGroup);
      if (!group.IsUndefined()) {
        const uint32_t id = group.As<Napi::Number>().Uint32Value();
        if (id != 0) {
          w->group = comm_->findGroup(id);
          if (w->group == nullptr) throw Napi::RangeError::New(env, "native: no group " + std::to_string(id) + " on this rank");
        }
      }
      Napi::Value device = get(kDevice);
      if (device.IsNumber() && device.As<Napi::Number>().Int32Value() >= 0) {
        w->device = device.As<Napi::Number>().Int32Value();
        w->data = static_cast<uint8_t*>(pointerFrom(get(kDevicePtr), "devicePtr"));
        w->count = static_cast<size_t>(get(kCount).As<Napi::Number>().Int64Value());
        Napi::Value stream = get(kStream), outPtr = get(kOutPtr);
        if (!stream.IsUndefined()) w->stream = pointerFrom(stream, "stream");
        if (!outPtr.IsUndefined()) w->out = static_cast<uint8_t*>(pointerFrom(outPtr, "outPtr"));
        batch.push_back(std::move(w));
        continue;
      }
      Napi::Value data = get(kData);
      if (!data.IsUndefined() && !data.IsNull()) {
        size_t bytes = 0;
        viewOf(data, &w->data, &bytes);
        w->count = bytes / hora::dtypeSize(w->dtype);
        w->keepAlive[0] = hora::binding::holdBackingStore(env, data);
      }
      if (w->kind == hora::Kind::kSend || w->kind == hora::Kind::kRecv) {
        w->peer = get(kPeer).As<Napi::Number>().Int32Value();
        w->tag = get(kTag).As<Napi::Number>().Int32Value();
        messages.push_back(std::move(w));
        continue;
      }
      Napi::Value out = get(kOut);
      if (!out.IsUndefined() && !out.IsNull()) {
        size_t bytes = 0;
        viewOf(out, &w->out, &bytes);
        w->keepAlive[1] = hora::binding::holdBackingStore(env, out);
      }
      batch.push_back(std::move(w));
    }
    for (const auto& w : all) Adopt(env, w);
    const bool willWait = info.Length() > 1 && info[1].ToBoolean().Value();
    // With no collective in the batch, the item waited for is a message: the waiting caller moves them.
    for (auto& m : messages) comm_->post(std::move(m), willWait && batch.empty());
    // An empty task would only get in the way: a wait() for a message stops moving messages itself as
    // soon as a task is queued.
    if (!batch.empty()) comm_->submit(std::move(batch), willWait);
    return env.Undefined();
  }

  // addGroup(id, members): makes process group id of members (world ranks, this rank among them).
  Napi::Value AddGroup(const Napi::CallbackInfo& info) {
    const uint32_t id = info[0].As<Napi::Number>().Uint32Value();
    Napi::Array arr = info[1].As<Napi::Array>();
    std::vector<int> members(arr.Length());
    for (uint32_t i = 0; i < arr.Length(); ++i) members[i] = arr.Get(i).As<Napi::Number>().Int32Value();
    Status st = comm_->addGroup(id, members);
    if (!st.isOk()) ThrowStatus(info.Env(), st);
    return info.Env().Undefined();
  }

  // submitOne(id, code, root, data, out, name): a batch of one host collective (not a message, not a
  // device item, not an invalid call), positional; bit 16 of code is willWait. A small collective waited
  // at once costs a microsecond or two in all, and reading a dozen properties of an item object through
  // Node-API was a good part of that.
  // Returns the result when the collective ran at once (Communicator::runIfReady: it could not wait on a
  // peer), else undefined: it is queued, and completes through the callback or wait().
  Napi::Value SubmitOne(const Napi::CallbackInfo& info) {
    auto w = Untracked(info.Env(), info[0]);
    const int32_t code = FillOne(info, w.get());
    const bool willWait = code & kWillWait;
    if (!willWait && comm_->runIfReady(w)) return ResultOf(info.Env(), *w);
    // Pending from here while JavaScript runs: its arrays' memory is held until JS takes the result.
    if (code & kHasData) w->keepAlive[0] = hora::binding::holdBackingStore(info.Env(), info[3]);
    if (code & kHasOut) w->keepAlive[1] = hora::binding::holdBackingStore(info.Env(), info[4]);
    Adopt(info.Env(), w);
    comm_->submit({std::move(w)}, willWait);
    return info.Env().Undefined();
  }

  // runOne(id, code, root, data, out, name): submitOne and wait in one call, for a wait() on a collective
  // that is alone in its batch; returns what wait() would. The work is never tracked (nothing else can
  // take its result), which saves a crossing into the addon and its bookkeeping.
  Napi::Value RunOne(const Napi::CallbackInfo& info) {
    auto w = Untracked(info.Env(), info[0]);
    FillOne(info, w.get());
    const hora::IntervalClock& clock = hora::IntervalClock::get();
    const uint64_t start = clock.now();
    comm_->run(w);
    // Plain success comes back as the nanoseconds it took (the Stats report's busy time), which spares
    // the JS side a clock read on each side of the call.
    Napi::Value result = PlainSuccess(*w) ? Napi::Number::New(info.Env(), clock.nanos(clock.now() - start))
                                          : ResultOf(info.Env(), *w);
    Recycle(std::move(w));
    return result;
  }

  // A work for runOne(), runMessage() and submitMessage() (which adopts it once it is read): like Track(),
  // but kept out of pending_. The work of the last runOne() is made anew in place when nothing else holds
  // it (see Recycle()), rather than allocated.
  std::shared_ptr<Work> Untracked(Napi::Env env, const Napi::Value& idValue) {
    if (comm_ == nullptr) throw Napi::Error::New(env, "native: communicator is closed");
    std::shared_ptr<Work> w;
    if (spare_ != nullptr) {
      w = std::move(spare_);
      // Made anew in place: cheaper than assigning a fresh Work member by member.
      w->~Work();
      new (w.get()) Work();
    } else {
      w = std::make_shared<Work>();
    }
    w->id = static_cast<uint64_t>(idValue.As<Napi::Number>().Int64Value());
    return w;
  }

  // Waits for an untracked work (the calling thread runs it when the engine is idle) and returns its result.
  Napi::Value WaitHere(Napi::Env env, const std::shared_ptr<Work>& w) {
    comm_->waitFor(w);
    return ResultOf(env, *w);
  }

  // The collective of submitOne() and runOne(), from arguments 1 to 5: code (ts/native.ts packCode: kind,
  // op, dtype and algorithm, four bits each, then flags), root, data, out and name. Five arguments and no
  // more: Node-API copies up to six into the call's frame, more into a heap array of their own. The flags
  // say which of data, out and name are there, so an absent one costs no call to ask. Returns the code.
  int32_t FillOne(const Napi::CallbackInfo& info, Work* w) {
    Napi::Env env = info.Env();
    const int32_t code = int32Or(info[1], -1);
    if (code < 0) throw Napi::RangeError::New(env, "native: code out of range: " + std::to_string(code));
    w->kind = enumFrom<hora::Kind>(env, code & 15, kKind, hora::kNumKinds);
    if (w->kind == hora::Kind::kSend || w->kind == hora::Kind::kRecv || w->kind == hora::Kind::kInvalid) {
      throw Napi::TypeError::New(env, "native: submitOne and runOne take collectives only");
    }
    w->op = enumFrom<hora::ReduceOp>(env, (code >> 4) & 15, kOp, hora::kNumReduceOps);
    w->dtype = enumFrom<hora::DType>(env, (code >> 8) & 15, kDtype, hora::kNumDTypes);
    w->algorithm = enumFrom<hora::Algorithm>(env, (code >> 12) & 15, kAlgorithm, hora::kNumAlgorithms);
    if (w->kind == hora::Kind::kBroadcast) w->root = int32Or(info[2], 0);
    if (code & kHasData) w->count = elementsOf(info[3], hora::dtypeSize(w->dtype), &w->data);
    if (code & kHasOut) {
      size_t bytes = 0;
      viewOf(info[4], &w->out, &bytes);
    }
    if (code & kHasName) w->name = info[5].As<Napi::String>().Utf8Value();
    return code;
  }

  // submitMessage(id, code, data, peer, tag, group): one host send or recv (kinds 6, 7), positional,
  // posted at once; code is packed as for submitOne (kind, dtype, willWait); group 0 is the world. As with
  // submitOne, reading an item object's properties cost more than moving a small message.
  Napi::Value SubmitMessage(const Napi::CallbackInfo& info) {
    auto w = Untracked(info.Env(), info[0]);
    const bool willWait = FillMessage(info, w.get());
    w->keepAlive[0] = hora::binding::holdBackingStore(info.Env(), info[2]);
    Adopt(info.Env(), w);
    comm_->post(std::move(w), willWait);
    return info.Env().Undefined();
  }

  // runMessage(id, code, data, peer, tag, group): submitMessage and wait in one call, for a wait() on a
  // message alone in its batch, as runOne for a collective; returns what wait() would.
  Napi::Value RunMessage(const Napi::CallbackInfo& info) {
    auto w = Untracked(info.Env(), info[0]);
    FillMessage(info, w.get());
    comm_->post(w, true);
    return WaitHere(info.Env(), w);
  }

  // The message of submitMessage() and runMessage(), from arguments 1 to 5; returns code's willWait.
  bool FillMessage(const Napi::CallbackInfo& info, Work* w) {
    Napi::Env env = info.Env();
    const int32_t code = int32Or(info[1], -1);
    if (code < 0) throw Napi::RangeError::New(env, "native: code out of range: " + std::to_string(code));
    w->kind = enumFrom<hora::Kind>(env, code & 15, kKind, hora::kNumKinds);
    if (w->kind != hora::Kind::kSend && w->kind != hora::Kind::kRecv) {
      throw Napi::TypeError::New(env, "native: submitMessage and runMessage take sends and receives only");
    }
    w->dtype = enumFrom<hora::DType>(env, (code >> 8) & 15, kDtype, hora::kNumDTypes);
    size_t bytes = 0;
    viewOf(info[2], &w->data, &bytes);
    w->count = bytes / hora::dtypeSize(w->dtype);
    w->peer = info[3].As<Napi::Number>().Int32Value();
    w->tag = info[4].As<Napi::Number>().Int32Value();
    const uint32_t group = info[5].As<Napi::Number>().Uint32Value();
    if (group != 0) {
      w->group = comm_->findGroup(group);
      if (w->group == nullptr) throw Napi::RangeError::New(env, "native: no group " + std::to_string(group) + " on this rank");
    }
    return code & kWillWait;
  }

  // wait(id): blocks until that work completes; then returns its result like take() would.
  Napi::Value Wait(const Napi::CallbackInfo& info) {
    uint64_t id = static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value());
    auto it = pending_.find(id);
    if (it == pending_.end()) return info.Env().Null();
    comm_->waitFor(it->second);
    return Take(info.Env(), id);
  }

  // spin(id, micros): spins up to micros for that work to complete; its result like take() would, or
  // null when it has not completed (its completion callback comes later as usual).
  Napi::Value Spin(const Napi::CallbackInfo& info) {
    uint64_t id = static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value());
    auto it = pending_.find(id);
    if (it == pending_.end()) return info.Env().Null();
    if (!comm_->spinFor(it->second, info[1].As<Napi::Number>().Int64Value())) return info.Env().Null();
    return Take(info.Env(), id);
  }

  // Called by the JS completion callback (through the internal take) and by wait().
  Napi::Value Take(Napi::Env env, uint64_t id) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return env.Null();
    std::shared_ptr<Work> w = it->second;
    pending_.erase(it);
    w->takenInJs = true;
    // The engine is done with the arrays: their memory is JavaScript's alone again.
    w->keepAlive[0].reset();
    w->keepAlive[1].reset();
    if (pending_.empty() && !released_) tsfn_.Unref(env);
    return ResultOf(env, *w);
  }

  // Success with nothing to hand back: the common case.
  static bool PlainSuccess(const Work& w) { return w.status.isOk() && w.kind != hora::Kind::kAllgather && !w.fused; }

  // A completed work's result for JS: true, or {code, message, peer} / an allgather's arrays.
  Napi::Value ResultOf(Napi::Env env, Work& w) {
    // The common case allocates nothing.
    if (PlainSuccess(w)) return Napi::Boolean::New(env, true);
    Napi::Object r = Napi::Object::New(env);
    if (!w.status.isOk()) {
      r.Set("code", hora::codeName(w.status.code()));
      r.Set("message", w.status.message());
      r.Set("peer", w.status.peer());
    }
    if (w.kind == hora::Kind::kAllgather && w.status.isOk() && w.gatheredDevice != nullptr) {
      // Device memory from cuda::allocate(); the JS side adopts it as an owned DeviceBuffer.
      r.Set("devicePtr", pointerValue(env, w.gatheredDevice));
      w.gatheredDevice = nullptr;
      r.Set("counts", CountsArray(env, w.gatheredCounts));
    } else if (w.kind == hora::Kind::kAllgather && w.status.isOk()) {
      auto* storage = new std::vector<uint8_t>(std::move(w.gathered));
      Napi::ArrayBuffer ab = storage->empty()
                                 ? Napi::ArrayBuffer::New(env, 0)
                                 : Napi::ArrayBuffer::New(env, storage->data(), storage->size(),
                                                          [](Napi::Env, void*, std::vector<uint8_t>* v) { delete v; },
                                                          storage);
      if (storage->empty()) delete storage;
      r.Set("gathered", ab);
      r.Set("counts", CountsArray(env, w.gatheredCounts));
    }
    if (w.fused) r.Set("fused", true);
    return r;
  }

  static Napi::Array CountsArray(Napi::Env env, const std::vector<uint64_t>& counts) {
    Napi::Array out = Napi::Array::New(env, counts.size());
    for (size_t i = 0; i < counts.size(); ++i) {
      out.Set(static_cast<uint32_t>(i), Napi::Number::New(env, static_cast<double>(counts[i])));
    }
    return out;
  }

  // takeTimeline(): {rows, strings} for the works completed since the last call (timeline on), collected
  // in bulk so that recording costs no JS work per collective. rows holds kNumTimelineColumns numbers per
  // work (enum TimelineColumn).
  Napi::Value TakeTimeline(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    std::vector<hora::TimelineRecord> records;
    if (comm_ != nullptr) records = comm_->takeTimelineRecords();
    Napi::Float64Array rows = Napi::Float64Array::New(env, records.size() * kNumTimelineColumns);
    std::vector<std::string> strings;
    std::unordered_map<std::string, int> index;
    auto indexOf = [&](const std::string& s) {
      auto found = index.emplace(s, static_cast<int>(strings.size()));
      if (found.second) strings.push_back(s);
      return double(found.first->second);
    };
    double* row = rows.Data();
    for (const hora::TimelineRecord& r : records) {
      const hora::WorkTimes& t = r.times;
      row[kColId] = double(r.id);
      row[kColEnqueued] = double(t.enqueued);
      row[kColStarted] = double(t.started);
      row[kColCopyInStart] = double(t.copyInStart);
      row[kColCopyInEnd] = double(t.copyInEnd);
      row[kColNegotiateStart] = double(t.negotiateStart);
      row[kColNegotiateEnd] = double(t.negotiateEnd);
      row[kColTransferEnd] = double(t.transferEnd);
      row[kColCopyOutStart] = double(t.copyOutStart);
      row[kColCopyOutEnd] = double(t.copyOutEnd);
      row[kColDone] = double(t.done);
      row[kColReduceNanos] = double(t.reduceNanos);
      row[kColReduceCalls] = double(t.reduceCalls);
      row[kColFusedTensors] = double(t.fusedTensors);
      row[kColSeq] = double(t.seq);
      row[kColAlgorithm] = t.algorithm != nullptr ? indexOf(t.algorithm) : -1.0;
      row[kColCode] = r.code != Code::kOk ? indexOf(hora::codeName(r.code)) : -1.0;
      row[kColMessage] = r.code != Code::kOk ? indexOf(r.message) : -1.0;
      row += kNumTimelineColumns;
    }
    Napi::Array names = Napi::Array::New(env, strings.size());
    for (size_t i = 0; i < strings.size(); ++i) names.Set(static_cast<uint32_t>(i), strings[i]);
    Napi::Object result = Napi::Object::New(env);
    result.Set("rows", rows);
    result.Set("strings", names);
    return result;
  }

  Napi::Value Abort(const Napi::CallbackInfo& info) {
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
  Napi::Value Estimate(const Napi::CallbackInfo& info) {
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
  Napi::Value Close(const Napi::CallbackInfo& info) {
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

  std::shared_ptr<Work> Track(Napi::Env env, const Napi::Value& idValue) {
    if (comm_ == nullptr) throw Napi::Error::New(env, "native: communicator is closed");
    auto w = std::make_shared<Work>();
    w->id = static_cast<uint64_t>(idValue.As<Napi::Number>().Int64Value());
    Adopt(env, w);
    return w;
  }

  // Keeps a completed work whose result JS has taken, for Untracked() to reuse, when this is its last
  // owner. The communication thread may drop its hold on a work (a task's batch) just after completing
  // it: the acquire fence pairs with that release, so the thread's last writes are behind us.
  void Recycle(std::shared_ptr<Work>&& w) {
    if (w.use_count() != 1) return;
    std::atomic_thread_fence(std::memory_order_acquire);
    spare_ = std::move(w);
  }

  // Tracks an untracked work from now on: its result is taken through the callback, wait() or spin().
  void Adopt(Napi::Env env, const std::shared_ptr<Work>& w) {
    if (pending_.empty() && !released_) tsfn_.Ref(env);
    pending_[w->id] = w;
  }

  friend Napi::Value TakeResult(const Napi::CallbackInfo& info);

  std::unique_ptr<hora::Communicator> comm_;
  Napi::ThreadSafeFunction tsfn_;
  bool released_ = false;
  std::unordered_map<uint64_t, std::shared_ptr<Work>> pending_;
  std::shared_ptr<Work> spare_;  // see Recycle()
  Napi::Reference<Napi::Array> keys_;  // the ItemKey names
  std::shared_ptr<CommunicatorWrap*> self_ = std::make_shared<CommunicatorWrap*>(this);  // see bindOwn()
};

// take(communicator, id): the result of a completed work, once; null if already taken (e.g. by wait()).
Napi::Value TakeResult(const Napi::CallbackInfo& info) {
  CommunicatorWrap* c = CommunicatorWrap::Unwrap(info[0].As<Napi::Object>());
  return c->Take(info.Env(), static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value()));
}

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

// ---------------------------------------------------------------------------------------------------
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

hora::DType dtypeArg(const Napi::Value& v) {
  const int d = v.As<Napi::Number>().Int32Value();
  if (d < 0 || d >= hora::kNumDTypes) throw Napi::RangeError::New(v.Env(), "native: dtype out of range: " + std::to_string(d));
  return static_cast<hora::DType>(d);
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

Napi::Object CudaExports(Napi::Env env) {
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

// enums(): the names of every enum that crosses this boundary, in the order of their values
// (common/enums.h, and the timeline's columns), for test/enums.test.js to compare with ts/native.ts.
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
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("Communicator", CommunicatorWrap::Define(env));
  exports.Set("take", Napi::Function::New(env, TakeResult));
  exports.Set("clocks", Napi::Function::New(env, Clocks));
  exports.Set("scaleAlone", Napi::Function::New(env, ScaleAlone));
  exports.Set("enums", Napi::Function::New(env, Enums));
  exports.Set("cuda", CudaExports(env));
  exports.Set("abiVersion", Napi::Number::New(env, 1));
  exports.Set("holdsArrayBuffers", Napi::Boolean::New(env, hora::binding::canHoldBackingStores()));
  return exports;
}

}  // namespace

NODE_API_MODULE(hora, Init)
