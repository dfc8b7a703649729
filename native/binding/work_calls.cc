// The calls made once per collective or message: a work read from JavaScript's arguments into a plain
// hora::Work, handed to the engine, and its result handed back (communicator.h). A small collective waited
// at once costs a microsecond or two in all, so everything these calls reach is in this file or inline.
#include <atomic>
#include <cmath>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backing_store.h"
#include "common/cycles.h"
#include "communicator.h"
#include "values.h"

namespace hora::binding {

using hora::Code;
using hora::Status;
using hora::Work;

namespace {

// The one reader of each field of an item. There are three ways in (submit()'s item objects, and the
// positional arguments of collective() and message()); a way in decides only where a field's value comes
// from (a key of the object, or an argument the code's flags say is there), and every field is decoded
// here, once. A new field: ts/native.ts nativeItem() (and packCode() for a positional one) and one reader
// here. All in this file, where the compiler inlines them: the positional ways in are a small collective's
// and a small message's path.

// A work's id (the JS side's number for it).
uint64_t idOf(const Napi::Value& v) { return static_cast<uint64_t>(v.As<Napi::Number>().Int64Value()); }

// An item's code (ts/native.ts itemCode(), and packCode() for the positional ways in): kind, op, dtype and
// algorithm, four bits each from bit 0, each range-checked. The bits above (the manner of waiting and the
// positional form's flags) are for the way in to read.
void decodeCode(Napi::Env env, int32_t code, Work* w) {
  if (code < 0) throw Napi::RangeError::New(env, "native: code out of range: " + std::to_string(code));
  w->kind = checkedEnum<hora::Kind>(env, code & 15, "kind", hora::kNumKinds);
  w->op = checkedEnum<hora::ReduceOp>(env, (code >> 4) & 15, "op", hora::kNumReduceOps);
  w->dtype = checkedEnum<hora::DType>(env, (code >> 8) & 15, "dtype", hora::kNumDTypes);
  w->algorithm = checkedEnum<hora::Algorithm>(env, (code >> 12) & 15, "algorithm", hora::kNumAlgorithms);
}

// A root of the kinds that have one (broadcast, reduce, gather, scatter): asked for of those only (no other
// kind has one; theirs stays 0), so root() gives the value only when it is wanted and the other kinds cost
// no call.
template <typename Root>
void readRoot(Root root, Work* w) {
  if (w->kind == hora::Kind::kBroadcast || w->kind == hora::Kind::kReduce || w->kind == hora::Kind::kGather ||
      w->kind == hora::Kind::kScatter) {
    w->root = int32Or(root(), 0);
  }
}

// An alltoall's or scatter's splits (ts/native.ts NativeItem.splits): a Float64Array, read in place (an
// array's elements were a call into V8 each, about a microsecond for four); counts of elements, each a
// non-negative integer of at most 2^53; the engine checks them against the group (engine/communicator.cc
// badSplits). At most 2^17 entries, so a malformed item cannot size a large allocation.
void readSplits(const Napi::Value& v, Work* w) {
  napi_env env = v.Env();
  napi_typedarray_type type;
  size_t length = 0;
  void* first = nullptr;
  if (napi_get_typedarray_info(env, v, &type, &length, &first, nullptr, nullptr) != napi_ok || type != napi_float64_array) {
    throw Napi::TypeError::New(env, "native: splits must be a Float64Array of counts");
  }
  if (length > (1u << 17)) throw Napi::RangeError::New(env, "native: splits has too many entries");
  const double* d = static_cast<const double*>(first);
  w->splits.resize(length);
  for (size_t i = 0; i < length; ++i) {
    if (!(d[i] >= 0 && d[i] <= 9007199254740992.0) || d[i] != std::floor(d[i])) throw Napi::RangeError::New(env, "native: a split must be a count of elements");
    w->splits[i] = static_cast<uint64_t>(d[i]);
  }
}

// A collective's name (the batch order and the timeline's).
void readName(const Napi::Value& v, Work* w) { w->name = v.As<Napi::String>().Utf8Value(); }

// A send's or recv's other rank (a world rank) and tag.
void readPeer(const Napi::Value& peer, const Napi::Value& tag, Work* w) {
  w->peer = peer.As<Napi::Number>().Int32Value();
  w->tag = tag.As<Napi::Number>().Int32Value();
}

// The element count and first element of an item's data array, whose element size the item's dtype
// gives: viewOf without asking for the array's type, which Node-API answers through a chain of type tests
// (a Float32Array matches the eighth; about 25 ns of a small collective). The ArrayBuffer bounds the
// count, so an array whose elements are not the dtype's size (the JS layer never passes one) gives a wrong
// count, never one that reaches past the buffer. Every way in sizes data by it (readData).
//
// A view of a SharedArrayBuffer (worker_threads' memory) has no ArrayBuffer to ask: Node-API before
// node_api_is_sharedarraybuffer (Node 18 to 22) answers napi_get_arraybuffer_info only for an ArrayBuffer,
// and napi_invalid_arg for a SharedArrayBuffer. Such a view is bounded by its own type instead, which
// costs the type tests only there.
//
// arrayBuffer (optional): the ArrayBuffer behind v, for holdArrayBuffer(); nullptr for a SharedArrayBuffer.
size_t elementsOf(const Napi::Value& v, size_t dtypeBytes, uint8_t** data, napi_value* arrayBuffer = nullptr) {
  napi_env env = v.Env();
  size_t length = 0, offset = 0, bufferBytes = 0;
  void* first = nullptr;
  napi_value buffer = nullptr;
  if (napi_get_typedarray_info(env, v, nullptr, &length, &first, &buffer, &offset) != napi_ok) {
    throw Napi::TypeError::New(env, "native: expected a TypedArray");
  }
  const bool isArrayBuffer = napi_get_arraybuffer_info(env, buffer, nullptr, &bufferBytes) == napi_ok;
  if (arrayBuffer != nullptr) *arrayBuffer = isArrayBuffer ? buffer : nullptr;
  if (!isArrayBuffer) {
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

// A host item's arrays: data (read or reduced in place; its count in elements of the work's dtype, so the
// code is decoded first) and out (a reducescatter's block). Holding their memory while the work is pending
// (holdBackingStore) is the way in's: when it is pending differs by way in.
void readData(const Napi::Value& v, Work* w, napi_value* arrayBuffer = nullptr) {
  w->count = elementsOf(v, hora::dtypeSize(w->dtype), &w->data, arrayBuffer);
}

void readOut(const Napi::Value& v, Work* w) {
  viewOf(v, &w->out, &w->outBytes);
  w->outGiven = true;
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

}  // namespace

// submit(items: [{id, code, root, name, data, out, invalidReason, splits}], willWait?): code is ts/native.ts
// itemCode()'s (kind, op, dtype, algorithm). A send or recv item (kinds 6, 7) carries peer and tag and is
// posted at once, beside the batch; a device item has device >= 0, devicePtr, count, stream (and outPtr
// for reducescatter) instead of data and out. willWait: the caller goes on to wait for one of the items at
// once (result(id, -1)). An absent key reads as 0 (code: an allreduce, sum, float32, auto) or as none.
Napi::Value CommunicatorWrap::Submit(const Napi::CallbackInfo& info) {
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
    w->id = idOf(get(kId));
    all.push_back(w);
    decodeCode(env, int32Or(get(kCode), 0), w.get());
    readRoot([&] { return get(kRoot); }, w.get());
    Napi::Value name = get(kName);
    if (!name.IsUndefined()) readName(name, w.get());
    Napi::Value invalidReason = get(kInvalidReason);
    if (!invalidReason.IsUndefined()) w->invalidReason = invalidReason.As<Napi::String>().Utf8Value();
    Napi::Value scale = get(kScale);
    if (!scale.IsUndefined()) w->scaling = scalingOf(scale);
    Napi::Value group = get(kGroup);
    if (!group.IsUndefined()) ReadGroup(env, group, w.get());
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
      readData(data, w.get());
      w->keepAlive[0] = hora::binding::holdBackingStore(env, data);
    }
    if (w->kind == hora::Kind::kSend || w->kind == hora::Kind::kRecv) {
      readPeer(get(kPeer), get(kTag), w.get());
      messages.push_back(std::move(w));
      continue;
    }
    Napi::Value out = get(kOut);
    if (!out.IsUndefined() && !out.IsNull()) {
      readOut(out, w.get());
      w->keepAlive[1] = hora::binding::holdBackingStore(env, out);
    }
    // Asked for of the kinds that have splits only: the other items cost no property lookup for it.
    if (w->kind == hora::Kind::kAlltoall || w->kind == hora::Kind::kScatter) {
      Napi::Value splits = get(kSplits);
      if (!splits.IsUndefined()) readSplits(splits, w.get());
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

// collective(id, code, root, data, out, name): a batch of one host collective (not a message, not a
// device item, not an invalid call), positional; an alltoall's splits take root's place. A small
// collective waited at once costs a microsecond or two in all, and reading a dozen properties of an item
// object through Node-API was a good part of that.
// The manner of waiting is in code (ts/native.ts Manner):
// - kWaitNow: handed in and waited for in one call, for a wait() on a collective alone in its batch;
//   returns what result() would, or for plain success the nanoseconds it took. The work is never tracked
//   (nothing else can take its result), which saves a crossing into the addon and its bookkeeping.
// - kWillWait: queued; the caller goes on to result(id, -1) at once. Returns undefined.
// - neither (awaited): returns the result when the collective ran at once (Communicator::runIfReady: it
//   could not wait on a peer), else undefined: it is queued, and completes through the callback.
Napi::Value CommunicatorWrap::Collective(const Napi::CallbackInfo& info) {
  auto w = Untracked(info.Env(), info[0]);
  napi_value dataBuffer = nullptr;
  const int32_t code = FillOne(info, w.get(), &dataBuffer);
  if (code & kWaitNow) return RunHere(info.Env(), std::move(w));
  const bool willWait = code & kWillWait;
  if (!willWait && comm_->runIfReady(w)) return ResultOf(info.Env(), *w);
  // Pending from here while JavaScript runs: its arrays' memory is held until JS takes the result.
  if (dataBuffer != nullptr) w->keepAlive[0] = hora::binding::holdArrayBuffer(dataBuffer);
  if (code & kHasOut) w->keepAlive[1] = hora::binding::holdBackingStore(info.Env(), info[4]);
  Adopt(info.Env(), w);
  comm_->submit({std::move(w)}, willWait);
  return info.Env().Undefined();
}

// collective() with kWaitNow: runs the work (the calling thread runs it when the engine is idle) and
// returns its result.
Napi::Value CommunicatorWrap::RunHere(Napi::Env env, std::shared_ptr<Work>&& w) {
  const hora::IntervalClock& clock = hora::IntervalClock::get();
  const uint64_t start = clock.now();
  comm_->runNow(w);
  // Plain success comes back as the nanoseconds it took (the Stats report's busy time), which spares
  // the JS side a clock read on each side of the call.
  Napi::Value result = PlainSuccess(*w) ? Napi::Number::New(env, clock.nanos(clock.now() - start)) : ResultOf(env, *w);
  Recycle(std::move(w));
  return result;
}

// A work for collective() and message() (adopted once it is read, unless waited for in the same call):
// like Track(), but kept out of pending_. The work of the last collective waited for in its call is made
// anew in place when nothing else holds it (see Recycle()), rather than allocated.
std::shared_ptr<Work> CommunicatorWrap::Untracked(Napi::Env env, const Napi::Value& idValue) {
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
  w->id = idOf(idValue);
  return w;
}

// message() with kWaitNow: waits for the untracked message (the calling thread moves messages meanwhile) and
// returns its result.
Napi::Value CommunicatorWrap::WaitHere(Napi::Env env, const std::shared_ptr<Work>& w) {
  comm_->waitFor(w);
  return ResultOf(env, *w);
}

// The collective of collective(), from arguments 1 to 5: code (ts/native.ts packCode: the item's code,
// then flags), root (an alltoall's splits), data, out and name. Five arguments and no more: Node-API
// copies up to six into the call's frame, more into a heap array of their own. The flags say which of data, out and name are there,
// so an absent one costs no call to ask. Returns the code.
int32_t CommunicatorWrap::FillOne(const Napi::CallbackInfo& info, Work* w, napi_value* dataBuffer) {
  Napi::Env env = info.Env();
  const int32_t code = int32Or(info[1], -1);
  decodeCode(env, code, w);
  if (w->kind == hora::Kind::kSend || w->kind == hora::Kind::kRecv || w->kind == hora::Kind::kInvalid) {
    throw Napi::TypeError::New(env, "native: collective() takes collectives only");
  }
  // The third argument is the root of the kinds that have one, and an alltoall's splits (it has no root).
  readRoot([&] { return info[2]; }, w);
  if (w->kind == hora::Kind::kAlltoall) readSplits(info[2], w);
  if (code & kHasData) readData(info[3], w, dataBuffer);
  if (code & kHasOut) readOut(info[4], w);
  if (code & kHasName) readName(info[5], w);
  return code;
}

// message(id, code, data, peer, tag, group): one host send or recv (kinds 6, 7), positional, posted at
// once; code is packed as for collective() (kind, dtype, the manner of waiting); group 0 is the world. As
// with collective(), reading an item object's properties cost more than moving a small message.
// kWaitNow: posted and waited for in one call, for a wait() on a message alone in its batch; returns what
// result() would. Otherwise undefined (kWillWait: the caller goes on to result(id, -1) at once).
Napi::Value CommunicatorWrap::Message(const Napi::CallbackInfo& info) {
  auto w = Untracked(info.Env(), info[0]);
  const int32_t code = FillMessage(info, w.get());
  if (code & kWaitNow) {
    comm_->post(w, true);
    return WaitHere(info.Env(), w);
  }
  w->keepAlive[0] = hora::binding::holdBackingStore(info.Env(), info[2]);
  Adopt(info.Env(), w);
  comm_->post(std::move(w), code & kWillWait);
  return info.Env().Undefined();
}

// The message of message(), from arguments 1 to 5; returns the code.
int32_t CommunicatorWrap::FillMessage(const Napi::CallbackInfo& info, Work* w) {
  Napi::Env env = info.Env();
  const int32_t code = int32Or(info[1], -1);
  decodeCode(env, code, w);
  if (w->kind != hora::Kind::kSend && w->kind != hora::Kind::kRecv) {
    throw Napi::TypeError::New(env, "native: message() takes sends and receives only");
  }
  readData(info[2], w);
  readPeer(info[3], info[4], w);
  ReadGroup(env, info[5], w);
  return code;
}

// The process group an item names by id (added by addGroup()); 0 is the world. A RangeError when this rank
// has no group of that id.
void CommunicatorWrap::ReadGroup(Napi::Env env, const Napi::Value& id, Work* w) {
  const uint32_t group = id.As<Napi::Number>().Uint32Value();
  if (group == 0) return;
  w->group = comm_->findGroup(group);
  if (w->group == nullptr) throw Napi::RangeError::New(env, "native: no group " + std::to_string(group) + " on this rank");
}

// result(id, micros): the one completion step of a tracked work: its result, once; null when it has been
// taken already (by an earlier result()) or, spinning, has not completed. micros says how to get it:
// - 0: the completion callback has come (the work is complete): take it;
// - > 0: spin up to micros for the work to complete; null when it has not (its completion callback comes
//   later as usual);
// - < 0: block until it completes (wait(); the calling thread runs queued tasks while the engine is idle).
Napi::Value CommunicatorWrap::Result(const Napi::CallbackInfo& info) {
  uint64_t id = static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value());
  auto it = pending_.find(id);
  if (it == pending_.end()) return info.Env().Null();
  const int64_t micros = info[1].As<Napi::Number>().Int64Value();
  if (micros < 0) {
    comm_->waitFor(it->second);
  } else if (micros > 0 && !comm_->spinFor(it->second, micros)) {
    return info.Env().Null();
  }
  return Take(info.Env(), it);
}

// Hands the result of the work at `it` in pending_ to JS, and forgets the work.
Napi::Value CommunicatorWrap::Take(Napi::Env env, std::unordered_map<uint64_t, std::shared_ptr<Work>>::iterator it) {
  std::shared_ptr<Work> w = std::move(it->second);
  pending_.erase(it);
  w->takenInJs = true;
  // The engine is done with the arrays: their memory is JavaScript's alone again.
  w->keepAlive[0].reset();
  w->keepAlive[1].reset();
  if (pending_.empty() && !released_) tsfn_.Unref(env);
  return ResultOf(env, *w);
}

// Success with nothing to hand back: the common case.
bool CommunicatorWrap::PlainSuccess(const Work& w) { return w.status.isOk() && !GathersInto(w) && w.kind != hora::Kind::kJoin && !w.fused; }

// The kinds whose result is memory the engine allocated (Work::gathered) and the counts from each rank (a
// gather's at its root only: the others' counts stay empty and they get no result). An alltoall into the
// caller's out array has neither: ts/alltoall.ts always passes its recvSplits with out, and the counts that
// came are those (the agreement checked them against every sender's splits), so its success is plain.
bool CommunicatorWrap::GathersInto(const Work& w) {
  return w.kind == hora::Kind::kAllgather || (w.kind == hora::Kind::kAlltoall && !w.outGiven) ||
         w.kind == hora::Kind::kScatter || (w.kind == hora::Kind::kGather && !w.gatheredCounts.empty());
}

// A completed work's result for JS: true, or {code, message, peer} / an allgather's arrays.
Napi::Value CommunicatorWrap::ResultOf(Napi::Env env, Work& w) {
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
  } else if (GathersInto(w) && w.status.isOk()) {
    auto* storage = new hora::ResultBytes(std::move(w.gathered));
    Napi::ArrayBuffer ab = storage->empty()
                               ? Napi::ArrayBuffer::New(env, 0)
                               : Napi::ArrayBuffer::New(env, storage->data(), storage->size(),
                                                        [](Napi::Env, void*, hora::ResultBytes* v) { delete v; },
                                                        storage);
    if (storage->empty()) delete storage;
    r.Set("gathered", ab);
    r.Set("counts", CountsArray(env, w.gatheredCounts));
  }
  if (w.kind == hora::Kind::kJoin && w.status.isOk()) r.Set("lastJoined", w.lastJoined);
  if (w.fused) r.Set("fused", true);
  return r;
}

Napi::Array CommunicatorWrap::CountsArray(Napi::Env env, const std::vector<uint64_t>& counts) {
  Napi::Array out = Napi::Array::New(env, counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    out.Set(static_cast<uint32_t>(i), Napi::Number::New(env, static_cast<double>(counts[i])));
  }
  return out;
}

std::shared_ptr<Work> CommunicatorWrap::Track(Napi::Env env, const Napi::Value& idValue) {
  if (comm_ == nullptr) throw Napi::Error::New(env, "native: communicator is closed");
  auto w = std::make_shared<Work>();
  w->id = idOf(idValue);
  Adopt(env, w);
  return w;
}

// Keeps a completed work whose result JS has taken, for Untracked() to reuse, when this is its last
// owner. The communication thread may drop its hold on a work (a task's batch) just after completing
// it: the acquire fence pairs with that release, so the thread's last writes are behind us.
void CommunicatorWrap::Recycle(std::shared_ptr<Work>&& w) {
  if (w.use_count() != 1) return;
  std::atomic_thread_fence(std::memory_order_acquire);
  spare_ = std::move(w);
}

// Tracks an untracked work from now on: its result is taken through result() (the callback, wait() or spin).
void CommunicatorWrap::Adopt(Napi::Env env, const std::shared_ptr<Work>& w) {
  if (pending_.empty() && !released_) tsfn_.Ref(env);
  pending_[w->id] = w;
}

}  // namespace hora::binding
