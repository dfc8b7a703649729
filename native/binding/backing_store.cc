#include "backing_store.h"

#include <dlfcn.h>

namespace hora::binding {
namespace {

// v8::ArrayBuffer::GetBackingStore(), as the Itanium C++ ABI (every Linux and macOS Node) names it.
constexpr const char* kGetBackingStore = "_ZN2v811ArrayBuffer15GetBackingStoreEv";

// That member function returns std::shared_ptr<v8::BackingStore>. Under the Itanium C++ ABI a member
// function and a free function taking `this` as its first argument are called alike, the shared_ptr (two
// pointers, not trivially copyable) coming back through a hidden pointer in both; and a shared_ptr's
// layout and its control block's release do not depend on its element type. So it is called as this type,
// and no V8 header is needed (the cmake-js build has Node-API's headers only).
using GetBackingStoreFn = std::shared_ptr<void> (*)(void* self);

GetBackingStoreFn lookUp() { return reinterpret_cast<GetBackingStoreFn>(dlsym(RTLD_DEFAULT, kGetBackingStore)); }

GetBackingStoreFn getBackingStore() {
  static const GetBackingStoreFn fn = lookUp();
  return fn;
}

}  // namespace

bool canHoldBackingStores() { return getBackingStore() != nullptr; }

std::shared_ptr<void> holdBackingStore(napi_env env, napi_value view) {
  const GetBackingStoreFn fn = getBackingStore();
  if (fn == nullptr) return nullptr;
  napi_value buffer = nullptr;
  bool isArrayBuffer = false;
  if (napi_get_typedarray_info(env, view, nullptr, nullptr, nullptr, &buffer, nullptr) != napi_ok ||
      napi_is_arraybuffer(env, buffer, &isArrayBuffer) != napi_ok || !isArrayBuffer) {
    return nullptr;
  }
  return holdArrayBuffer(buffer);
}

std::shared_ptr<void> holdArrayBuffer(napi_value buffer) {
  const GetBackingStoreFn fn = getBackingStore();
  if (fn == nullptr) return nullptr;
  // A napi_value is the address of a V8 handle, which is what a v8::Local holds and what its operator->
  // gives as the object's `this`: Node's Node-API converts one to the other by copying the bits
  // (src/js_native_api_v8.h, V8LocalValueFromJsValue).
  return fn(static_cast<void*>(buffer));
}

}  // namespace hora::binding
