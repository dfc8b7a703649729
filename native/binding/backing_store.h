// Keeping a pending work's memory valid whatever JavaScript does meanwhile.
//
// The engine reads and writes a work's arrays on its own thread while JavaScript runs on, and JavaScript
// can take an ArrayBuffer's memory away at any moment: a transfer (structuredClone or postMessage with
// `transfer`) detaches it, and the memory is freed once the new owner is collected; an addon's
// napi_detach_arraybuffer frees it at once. Node-API can neither hold that memory nor refuse a detach.
// V8 can: every ArrayBuffer's memory is a BackingStore behind a std::shared_ptr, and a share of it held
// here keeps the memory valid, detached or not, until the share is dropped. That is V8's API, not
// Node-API, and the one Node-API build hora ships runs on every Node from 18 on; so the one V8 function
// needed (v8::ArrayBuffer::GetBackingStore, in V8 since 8.0) is not linked but looked up in the running
// process when the addon loads. Where it is missing, canHoldBackingStores() says so, nothing is held, and
// the JS side copies pending arrays to its own instead (ts/lend.ts); the addon loads either way.
//
// What a share cannot stop: resize() of a resizable ArrayBuffer below the array decommits its pages; the
// JS side never lends the engine an array of a resizable buffer while JavaScript runs (ts/lend.ts).
#pragma once

#include <node_api.h>

#include <memory>

namespace hora::binding {

// Whether this process's V8 lets shares of ArrayBuffer memory be held (looked up once).
bool canHoldBackingStores();

// A share of the memory of the ArrayBuffer behind typed array `view`, which keeps it valid until dropped;
// nullptr when the view's buffer is a SharedArrayBuffer (its memory lives as long as the JS side's
// reference), or when canHoldBackingStores() is false. Call on the JS thread.
std::shared_ptr<void> holdBackingStore(napi_env env, napi_value view);
// The same for an ArrayBuffer already known to be one (not a SharedArrayBuffer): its napi_value.
std::shared_ptr<void> holdArrayBuffer(napi_value arrayBuffer);

}  // namespace hora::binding
