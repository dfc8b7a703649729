// The `cuda` object of the addon: device memory for hora.cuda.DeviceBuffer, the same flat style over
// cuda/device.h as the rest of the binding. Device pointers and streams travel as BigInt, each call is
// synchronous, and a failed Status is thrown as an Error whose code is its code name.
#pragma once

#include <napi.h>

namespace hora::binding {

// {built, available, deviceCount, unavailableReason, alloc, free, copyFromHost, copyToHost, checkRange, cast}.
Napi::Object cudaExports(Napi::Env env);

}  // namespace hora::binding
