// The conversions between JS values and C++ values that every part of the binding shares. Defined here,
// inline, because the calls made once per collective or message use them: a call into another file would
// cost what inlining saves.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

#include "common/enums.h"
#include "common/status.h"

namespace hora::binding {

inline void ThrowStatus(Napi::Env env, const Status& st) {
  Napi::Error e = Napi::Error::New(env, st.message());
  e.Set("code", hora::codeName(st.code()));
  throw e;
}

// A device pointer or stream handed over as a BigInt; 0n is a null pointer.
inline void* pointerFrom(const Napi::Value& v, const char* what) {
  if (!v.IsBigInt()) throw Napi::TypeError::New(v.Env(), std::string("native: ") + what + " must be a BigInt");
  bool lossless = false;
  uint64_t raw = v.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) throw Napi::RangeError::New(v.Env(), std::string("native: ") + what + " does not fit in 64 bits");
  return reinterpret_cast<void*>(static_cast<uintptr_t>(raw));
}

// n as the enum T, or a RangeError naming `what` where n is outside [0, limit) (limit: the enum's count in
// common/enums.h). The one range check of every enum that crosses the boundary.
template <typename T>
T checkedEnum(Napi::Env env, int n, const char* what, int limit) {
  if (n < 0 || n >= limit) {
    throw Napi::RangeError::New(env, std::string("native: ") + what + " out of range: " + std::to_string(n));
  }
  return static_cast<T>(n);
}

inline Napi::BigInt pointerValue(Napi::Env env, const void* p) {
  return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
}

// An int32 argument or property; undefined counts as `absent`. One Node-API call for a number (a small
// collective's arguments cross about twenty of them, and each costs tens of nanoseconds).
inline int32_t int32Or(const Napi::Value& v, int32_t absent) {
  int32_t n = 0;
  if (napi_get_value_int32(v.Env(), v, &n) == napi_ok) return n;
  if (v.IsUndefined()) return absent;
  throw Napi::TypeError::New(v.Env(), "native: expected a number");
}

inline size_t elementBytes(napi_typedarray_type t) {
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
inline void viewOf(const Napi::Value& v, uint8_t** data, size_t* bytes) {
  napi_typedarray_type type;
  size_t length = 0;
  void* first = nullptr;
  if (napi_get_typedarray_info(v.Env(), v, &type, &length, &first, nullptr, nullptr) != napi_ok) {
    throw Napi::TypeError::New(v.Env(), "native: expected a TypedArray");
  }
  *data = static_cast<uint8_t*>(first);
  *bytes = length * elementBytes(type);
}

// A dtype argument (cuda functions, scaleAlone).
inline hora::DType dtypeArg(const Napi::Value& v) {
  const int d = v.As<Napi::Number>().Int32Value();
  if (d < 0 || d >= hora::kNumDTypes) throw Napi::RangeError::New(v.Env(), "native: dtype out of range: " + std::to_string(d));
  return static_cast<hora::DType>(d);
}

}  // namespace hora::binding
