// The Communicator class of the addon: one engine communicator (engine/communicator.h) wrapped for
// JavaScript. Its lifecycle (construct, listen, connect, groups, abort, estimate, timeline, close) is in
// communicator.cc; the calls made once per collective or message (submit for a batch, collective and
// message for one alone, result to get a result) and their bookkeeping are in work_calls.cc.
//
// Completions travel from the communication thread to the JS thread through one thread-safe function per
// communicator, which is referenced only while work is outstanding so an idle communicator never keeps
// the process alive. wait() blocks the JS thread on the engine's condition variable for callers that must
// be synchronous (framework hooks); the later asynchronous completion of the same work is then ignored.
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "engine/communicator.h"

namespace hora::binding {

// The properties of a submitted item (ts/native.ts ITEM_KEYS, checked entry by entry by test/enums.test.js).
// Looking a property up by a C string makes and internalizes a V8 string each time; with a dozen per item
// that was a good part of a small collective's cost, so the names are made once per communicator.
enum ItemKey { kId, kCode, kRoot, kName, kInvalidReason, kDevice, kDevicePtr, kCount, kStream, kOutPtr, kData, kOut,
               kPeer, kTag, kGroup, kScale, kSplits, kNumItemKeys };
const char* const kItemKeyNames[kNumItemKeys] = {"id", "code", "root", "name", "invalidReason", "device", "devicePtr",
                                                  "count", "stream", "outPtr", "data", "out", "peer", "tag", "group",
                                                  "scale", "splits"};

// The flags in the code argument of collective() and message() (ts/native.ts packCode), above the item's
// code (ts/native.ts itemCode; decodeCode in work_calls.cc): the manner of waiting (kWillWait, kWaitNow:
// ts/native.ts Manner; neither: awaited), then which arguments are given.
constexpr int32_t kWillWait = 1 << 16, kHasData = 1 << 17, kHasOut = 1 << 18, kHasName = 1 << 19, kWaitNow = 1 << 20;
static_assert(hora::kNumKinds <= 16 && hora::kNumReduceOps <= 16 && hora::kNumDTypes <= 16 && hora::kNumAlgorithms <= 16,
              "itemCode gives kind, op, dtype and algorithm four bits each");

class CommunicatorWrap : public Napi::ObjectWrap<CommunicatorWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  CommunicatorWrap(const Napi::CallbackInfo& info);
  ~CommunicatorWrap() override;

 private:
  using Method = Napi::Value (CommunicatorWrap::*)(const Napi::CallbackInfo&);

  // Lifecycle (communicator.cc).
  void bindOwn(Napi::Env env, Napi::Object self, const char* name, Method method);
  void Shutdown();
  Napi::Value Listen(const Napi::CallbackInfo& info);
  Napi::Value Connect(const Napi::CallbackInfo& info);
  Napi::Value AddGroup(const Napi::CallbackInfo& info);
  Napi::Value TakeTimeline(const Napi::CallbackInfo& info);
  Napi::Value Abort(const Napi::CallbackInfo& info);
  Napi::Value Estimate(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);

  // Works in, results out (work_calls.cc). The helpers marked inline are called from that file only and
  // stay inline there, as when the whole class was one file: they are on a small collective's path.
  std::shared_ptr<hora::Work> Track(Napi::Env env, const Napi::Value& idValue);
  Napi::Value Submit(const Napi::CallbackInfo& info);
  Napi::Value Collective(const Napi::CallbackInfo& info);
  inline Napi::Value RunHere(Napi::Env env, std::shared_ptr<hora::Work>&& w);
  inline std::shared_ptr<hora::Work> Untracked(Napi::Env env, const Napi::Value& idValue);
  inline Napi::Value WaitHere(Napi::Env env, const std::shared_ptr<hora::Work>& w);
  // dataBuffer (optional): the ArrayBuffer behind the data array, as elementsOf() gives it.
  inline int32_t FillOne(const Napi::CallbackInfo& info, hora::Work* w, napi_value* dataBuffer = nullptr);
  Napi::Value Message(const Napi::CallbackInfo& info);
  inline int32_t FillMessage(const Napi::CallbackInfo& info, hora::Work* w);
  inline void ReadGroup(Napi::Env env, const Napi::Value& id, hora::Work* w);
  Napi::Value Result(const Napi::CallbackInfo& info);
  inline Napi::Value Take(Napi::Env env, std::unordered_map<uint64_t, std::shared_ptr<hora::Work>>::iterator it);
  static inline bool PlainSuccess(const hora::Work& w);
  static inline bool GathersInto(const hora::Work& w);
  inline Napi::Value ResultOf(Napi::Env env, hora::Work& w);
  static inline Napi::Array CountsArray(Napi::Env env, const std::vector<uint64_t>& counts);
  inline void Recycle(std::shared_ptr<hora::Work>&& w);
  inline void Adopt(Napi::Env env, const std::shared_ptr<hora::Work>& w);

  std::unique_ptr<hora::Communicator> comm_;
  Napi::ThreadSafeFunction tsfn_;
  bool released_ = false;
  std::unordered_map<uint64_t, std::shared_ptr<hora::Work>> pending_;
  std::shared_ptr<hora::Work> spare_;  // see Recycle()
  Napi::Reference<Napi::Array> keys_;  // the ItemKey names
  std::shared_ptr<CommunicatorWrap*> self_ = std::make_shared<CommunicatorWrap*>(this);  // see bindOwn()
};

}  // namespace hora::binding
