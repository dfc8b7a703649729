/**
 * useFasterCpuKernels(tf): opt-in replacements for three kernels of tfjs's cpu backend (plain JavaScript) that
 * the gradient of a small CNN spends most of its time in. They change how fast tfjs computes, not what
 * hora does; nothing in hora/tfjs needs them.
 *
 * Why: tfjs 4.22's cpu backend (@tensorflow/tfjs-backend-cpu) computes
 * - Conv2DBackpropFilter (a convolution's filter gradient) and MaxPoolGrad by reading every element through
 *   TensorBuffer.get(...indices): for conv 5x5x8 - pool - conv 5x5x16 - pool - dense at batch 32 the filter
 *   gradient took about 1.2 s of a 1.35 s step, over 100x the convolution itself;
 * - Sum over every axis but the last (the bias gradient of conv2d and dense) by first transposing its input
 *   with two fresh JS arrays per element: 58 MB of garbage per step at batch 64.
 *
 * What they compute, against tfjs 4.22's own kernels (test/tfjs-cpu-kernels.test.js):
 * - Conv2DBackpropFilter (channels-last, float32): the same products added in the same order in float64,
 *   rounded to float32 once: bit-identical.
 * - Sum over all leading axes (float32): the same order, in float64: bit-identical.
 * - MaxPoolGrad (float32): each output's gradient goes to the first maximum of its window, as in tfjs.
 *   Bit-identical when windows do not overlap (stride >= window, as in 2x2 pooling with stride 2). Where
 *   windows overlap, an input that is the maximum of several windows gets their gradients summed in float32
 *   in window order, where tfjs sums in float64: it may differ in the last bits (tested: within 1e-6 for
 *   gradients of size 1).
 * Anything else (channels-first data, other dtypes, other axes, other backends) runs tfjs's own kernel.
 *
 * The kernels are registered on the tfjs instance passed in (the one the user's model comes from), for the
 * 'cpu' backend; the returned function puts tfjs's own kernels back.
 */
import { HoraError, describeValue } from '../../ts/internal';

/* eslint-disable @typescript-eslint/no-explicit-any */
type KernelFunc = (args: { inputs: any; backend: any; attrs: any }) => any;

/** What useFasterCpuKernels uses of the tfjs module (`@tensorflow/tfjs` or `@tensorflow/tfjs-core`). */
export interface TfjsKernelRegistry {
  getKernel(kernelName: string, backendName: string): { kernelFunc: KernelFunc } | undefined;
  registerKernel(config: { kernelName: string; backendName: string; kernelFunc: KernelFunc }): void;
  unregisterKernel(kernelName: string, backendName: string): void;
  backend_util: any;
  util: any;
}

const WHERE = 'hora/tfjs useFasterCpuKernels';
const BACKEND = 'cpu';

/** dW[wr, wc, i, o] = sum over (batch, output row, output column) of x[.., i] * dy[.., o] (NHWC). */
const conv2dFilterGradient = (tf: TfjsKernelRegistry, stock: KernelFunc): KernelFunc => (args) => {
  const { inputs: { x, dy }, backend, attrs } = args;
  const { strides, pad, dataFormat, dimRoundingMode, filterShape } = attrs;
  const c = tf.backend_util.computeConv2DInfo(x.shape, filterShape, strides, 1, pad, dimRoundingMode, false,
    tf.backend_util.convertConv2DDataFormat(dataFormat));
  if (c.dataFormat !== 'channelsLast' || x.dtype !== 'float32' || dy.dtype !== 'float32') return stock(args);
  const xs = backend.data.get(x.dataId).values as Float32Array, dys = backend.data.get(dy.dataId).values as Float32Array;
  const inC = c.inChannels, outC = c.outChannels;
  const dw = new Float64Array(c.filterHeight * c.filterWidth * inC * outC);
  for (let b = 0; b < c.batchSize; b++) {
    for (let yr = 0; yr < c.outHeight; yr++) {
      for (let yc = 0; yc < c.outWidth; yc++) {
        const dyAt = ((b * c.outHeight + yr) * c.outWidth + yc) * outC;
        for (let wr = 0; wr < c.filterHeight; wr++) {
          const xr = yr * c.strideHeight + wr - c.padInfo.top;
          if (xr < 0 || xr >= c.inHeight) continue;
          for (let wc = 0; wc < c.filterWidth; wc++) {
            const xc = yc * c.strideWidth + wc - c.padInfo.left;
            if (xc < 0 || xc >= c.inWidth) continue;
            const xAt = ((b * c.inHeight + xr) * c.inWidth + xc) * inC;
            const dwAt = (wr * c.filterWidth + wc) * inC * outC;
            for (let i = 0; i < inC; i++) {
              const xv = xs[xAt + i];
              for (let o = 0; o < outC; o++) dw[dwAt + i * outC + o] += xv * dys[dyAt + o];
            }
          }
        }
      }
    }
  }
  return backend.makeTensorInfo(filterShape, 'float32', Float32Array.from(dw));
};

/** Each output's gradient goes to the first maximum of its window, as in tfjs (NHWC). */
const maxPoolGradient = (tf: TfjsKernelRegistry, stock: KernelFunc): KernelFunc => (args) => {
  const { inputs: { dy, input: x }, backend, attrs } = args;
  const { filterSize, strides, pad, dimRoundingMode } = attrs;
  if (x.dtype !== 'float32') return stock(args);
  const c = tf.backend_util.computePool2DInfo(x.shape, filterSize, strides, 1, pad, dimRoundingMode);
  const xs = backend.data.get(x.dataId).values as Float32Array, dys = backend.data.get(dy.dataId).values as Float32Array;
  const ch = c.inChannels;
  const dx = new Float32Array(xs.length);
  for (let b = 0; b < c.batchSize; b++) {
    for (let yr = 0; yr < c.outHeight; yr++) {
      for (let yc = 0; yc < c.outWidth; yc++) {
        const dyAt = ((b * c.outHeight + yr) * c.outWidth + yc) * ch;
        for (let d = 0; d < ch; d++) {
          let max = -Infinity, at = -1;
          for (let wr = 0; wr < c.filterHeight; wr++) {
            const xr = yr * c.strideHeight + wr - c.padInfo.top;
            if (xr < 0 || xr >= c.inHeight) continue;
            for (let wc = 0; wc < c.filterWidth; wc++) {
              const xc = yc * c.strideWidth + wc - c.padInfo.left;
              if (xc < 0 || xc >= c.inWidth) continue;
              const i = ((b * c.inHeight + xr) * c.inWidth + xc) * ch + d;
              if (xs[i] > max) { max = xs[i]; at = i; }
            }
          }
          if (at >= 0) dx[at] += dys[dyAt + d];
        }
      }
    }
  }
  return backend.makeTensorInfo(x.shape, 'float32', dx);
};

/** The sum over every axis but the last, without transposing; other reductions go to tfjs's kernel. */
const sumOverLeadingAxes = (tf: TfjsKernelRegistry, stock: KernelFunc): KernelFunc => (args) => {
  const { inputs: { x }, backend, attrs: { axis, keepDims } } = args;
  const rank = x.shape.length;
  const axes = (tf.util.parseAxisParam(axis, x.shape) as number[]).sort((a, b) => a - b);
  if (x.dtype !== 'float32' || rank < 2 || axes.length !== rank - 1 || axes.some((a, i) => a !== i)) return stock(args);
  const n = x.shape[rank - 1], xs = backend.data.get(x.dataId).values as Float32Array;
  const sums = new Float64Array(n);
  for (let at = 0; at < xs.length; at += n) for (let j = 0; j < n; j++) sums[j] += xs[at + j];
  return backend.makeTensorInfo(keepDims ? [...Array(rank - 1).fill(1), n] : [n], 'float32', Float32Array.from(sums));
};

const REPLACEMENTS: Record<string, (tf: TfjsKernelRegistry, stock: KernelFunc) => KernelFunc> = {
  Conv2DBackpropFilter: conv2dFilterGradient,
  MaxPoolGrad: maxPoolGradient,
  Sum: sumOverLeadingAxes,
};

/** The function that restores tfjs's kernels, per tfjs instance that has the replacements. */
const installed = new WeakMap<object, () => void>();

/**
 * Registers the three faster kernels on `tf`'s cpu backend (see the file comment for what they compute) and
 * returns a function that puts tfjs's own back. Calling it again on the same `tf` changes nothing and returns
 * the same function.
 */
export function useFasterCpuKernels(tf: TfjsKernelRegistry): () => void {
  const registry = tf as unknown as Record<string, unknown> | null;
  if (registry === null || typeof registry !== 'object' || ['getKernel', 'registerKernel', 'unregisterKernel'].some((f) => typeof registry[f] !== 'function')
    || typeof (tf.backend_util?.computeConv2DInfo) !== 'function' || typeof (tf.util?.parseAxisParam) !== 'function') {
    throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE}: argument 'tf' must be the @tensorflow/tfjs module your model uses (import * as tf from '@tensorflow/tfjs'); received ${describeValue(tf)}`);
  }
  const done = installed.get(tf);
  if (done) return done;
  const stock: Record<string, KernelFunc> = {};
  for (const name of Object.keys(REPLACEMENTS)) {
    const kernel = tf.getKernel(name, BACKEND);
    if (!kernel) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE}: this tfjs has no '${BACKEND}' kernel ${name}; the cpu backend is not registered on it (it comes with @tensorflow/tfjs, or @tensorflow/tfjs-backend-cpu)`);
    }
    stock[name] = kernel.kernelFunc;
  }
  const register = (name: string, kernelFunc: KernelFunc) => {
    tf.unregisterKernel(name, BACKEND);
    tf.registerKernel({ kernelName: name, backendName: BACKEND, kernelFunc });
  };
  for (const [name, make] of Object.entries(REPLACEMENTS)) register(name, make(tf, stock[name]));
  const restore = () => {
    if (installed.get(tf) !== restore) return;
    for (const name of Object.keys(REPLACEMENTS)) register(name, stock[name]);
    installed.delete(tf);
  };
  installed.set(tf, restore);
  return restore;
}
