#include "backing_store.h"

#include <dlfcn.h>
#include <v8.h>

#include <cstring>

namespace hora::binding {
namespace {

// v8::ArrayBuffer::GetBackingStore(), as the Itanium C++ ABI (every Linux and macOS Node) names it.
constexpr const char* kGetBackingStore = "_ZN2v811ArrayBuffer15GetBackingStoreEv";

}  // namespace

bool canHoldBackingStores() {
  // The addon's call to it is bound lazily (Node loads addons with RTLD_LAZY): it is made only when found.
  static const bool found = dlsym(RTLD_DEFAULT, kGetBackingStore) != nullptr;
  return found;
}

std::shared_ptr<void> holdBackingStore(napi_env env, napi_value view) {
  if (!canHoldBackingStores()) return nullptr;
  napi_value buffer = nullptr;
  bool isArrayBuffer = false;
  if (napi_get_typedarray_info(env, view, nullptr, nullptr, nullptr, &buffer, nullptr) != napi_ok ||
      napi_is_arraybuffer(env, buffer, &isArrayBuffer) != napi_ok || !isArrayBuffer) {
    return nullptr;
  }
  // A napi_value is the address of a V8 handle, what a v8::Local holds: Node's Node-API converts one to
  // the other by copying it (src/js_native_api_v8.h, V8LocalValueFromJsValue).
  v8::Local<v8::ArrayBuffer> arrayBuffer;
  static_assert(sizeof(arrayBuffer) == sizeof(buffer), "a v8::Local is one handle address, as a napi_value");
  memcpy(static_cast<void*>(&arrayBuffer), &buffer, sizeof(buffer));
  return arrayBuffer->GetBackingStore();
}

}  // namespace hora::binding
