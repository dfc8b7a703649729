/**
 * hora.cuda: CUDA devices and device memory. Every collective accepts a DeviceBuffer where it accepts a
 * typed array and leaves the result in device memory; see docs/gpu.md. The default install is CPU-only:
 * available() is false there and unavailableReason() says how to get a CUDA build.
 */
export { available, built, deviceCount, unavailableReason, DeviceBuffer } from './device-buffer';
