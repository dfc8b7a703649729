'use strict';
// Faster tfjs cpu-backend kernels for the three gradient operations of a small CNN, used by
// examples/tfjs-mnist.js. They change how fast tfjs computes, not what it computes, and nothing of hora.
//
// Why: tfjs 4.22's cpu backend (@tensorflow/tfjs-backend-cpu) computes
//   - Conv2DBackpropFilter (the gradient of a convolution's filter) and MaxPoolGrad by reading every element
//     through TensorBuffer.get(...indices): for conv 5x5x8 - pool - conv 5x5x16 - pool - dense at batch 32
//     the filter gradient took about 1.2 s of a 1.35 s step, over 100x the convolution itself;
//   - Sum over all axes but the last (the bias gradient of conv2d and dense) by first transposing its input
//     with two fresh JS arrays per element: 58 MB of garbage per step at batch 64, which made V8 collect
//     every few milliseconds (about 5% of the step, and pauses at different times on every rank).
// Each replacement adds the same products in the same order as tfjs's own kernel, in float64 like it, so the
// results are bit-identical (for max-pool windows that overlap, a sum over the overlap may round
// differently); any case it does not handle (channels-first data, other dtypes, other axes) goes to tfjs's
// kernel.
const tf = require('@tensorflow/tfjs');

function replace(kernelName, makeKernelFunc) {
  const stock = tf.getKernel(kernelName, 'cpu').kernelFunc;
  tf.unregisterKernel(kernelName, 'cpu');
  tf.registerKernel({ kernelName, backendName: 'cpu', kernelFunc: makeKernelFunc(stock) });
}

/** dW[wr, wc, i, o] = sum over (batch, output row, output column) of x[.., i] * dy[.., o] (NHWC). */
const conv2dFilterGradient = (stock) => (args) => {
  const { inputs: { x, dy }, backend, attrs } = args;
  const { strides, pad, dataFormat, dimRoundingMode, filterShape } = attrs;
  const c = tf.backend_util.computeConv2DInfo(x.shape, filterShape, strides, 1, pad, dimRoundingMode, false,
    tf.backend_util.convertConv2DDataFormat(dataFormat));
  if (c.dataFormat !== 'channelsLast' || x.dtype !== 'float32' || dy.dtype !== 'float32') return stock(args);
  const xs = backend.data.get(x.dataId).values, dys = backend.data.get(dy.dataId).values;
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
const maxPoolGradient = (stock) => (args) => {
  const { inputs: { dy, input: x }, backend, attrs } = args;
  const { filterSize, strides, pad, dimRoundingMode } = attrs;
  if (x.dtype !== 'float32') return stock(args);
  const c = tf.backend_util.computePool2DInfo(x.shape, filterSize, strides, 1, pad, dimRoundingMode);
  const xs = backend.data.get(x.dataId).values, dys = backend.data.get(dy.dataId).values;
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
const sumOverLeadingAxes = (stock) => (args) => {
  const { inputs: { x }, backend, attrs: { axis, keepDims } } = args;
  const rank = x.shape.length;
  const axes = tf.util.parseAxisParam(axis, x.shape).sort((a, b) => a - b);
  if (x.dtype !== 'float32' || rank < 2 || axes.length !== rank - 1 || axes.some((a, i) => a !== i)) return stock(args);
  const n = x.shape[rank - 1], xs = backend.data.get(x.dataId).values;
  const sums = new Float64Array(n);
  for (let at = 0; at < xs.length; at += n) for (let j = 0; j < n; j++) sums[j] += xs[at + j];
  return backend.makeTensorInfo(keepDims ? [...Array(rank - 1).fill(1), n] : [n], 'float32', Float32Array.from(sums));
};

/** Registers the three kernels for the cpu backend, in place of tfjs's own. */
function useFasterCpuKernels() {
  replace('Conv2DBackpropFilter', conv2dFilterGradient);
  replace('MaxPoolGrad', maxPoolGradient);
  replace('Sum', sumOverLeadingAxes);
}

module.exports = { useFasterCpuKernels };
