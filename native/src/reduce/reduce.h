// Element-wise reduction kernels for the CPU.
//
// Every kernel is a plain loop over contiguous elements that the compiler vectorizes (see reduce.cc for
// how that is checked). Float16 and bfloat16 are widened to float32, combined, and rounded back to nearest
// even, one element at a time, so the result of combining two buffers does not depend on how the buffers
// were cut into chunks. Every operator is commutative bit for bit (NaN in either operand gives the same
// canonical quiet NaN), which is what lets recursive doubling give identical results on both sides of
// an exchange.
#pragma once

#include <cstddef>

#include "common/types.h"

namespace hora {

// dst[i] = dst[i] op src[i] for i < count. kAvg combines like kSum (finish with scaleForAvg).
void reduceInto(ReduceOp op, DType dtype, void* dst, const void* src, size_t count);

// dst[i] = a[i] op b[i] for i < count. dst may alias a or b.
void reduceTwo(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, size_t count);

// prescaleFactor and postscaleFactor, as Horovod defines them: every rank's input is multiplied by `pre`
// before the reduction, and the result by `post` after it (for kAvg after the division by the world size).
// Float dtypes only. Both 1: no scaling, and the collectives run exactly the kernels above.
struct Scaling {
  double pre = 1;
  double post = 1;
  bool active() const { return pre != 1 || post != 1; }
  bool operator==(const Scaling& o) const { return pre == o.pre && post == o.post; }
  bool operator!=(const Scaling& o) const { return !(*this == o); }
};

// Whether a dtype takes a Scaling (the float dtypes).
inline bool scalable(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

// One reduction step of a scaled collective. The factors get no pass of their own over the buffer: the
// step that first reads a rank's own input multiplies it by pre (an operand that is already a partial
// result, scaled where it was first read, is not scaled again), and the step that completes an element
// divides it by the world size (kAvg) and multiplies it by post:
//   dst[i] = finish(op(a[i] * aScale, b[i] * bScale)),  finish(v) = v / divisor * post on the last step, else v.
// Arithmetic is in float32 for float32, float16 and bfloat16 (the factors rounded to float32) and in
// float64 for float64, rounded to the dtype once per step; a NaN result is the canonical quiet NaN. So the
// step is commutative bit for bit when its operands trade places together with their scales, and any two
// ranks that compute a step from the same operands get the same bits.
struct ScaledStep {
  double aScale = 1;
  double bScale = 1;
  bool finish = false;
  int divisor = 1;
  double post = 1;
};

// The step of scaling s whose operands a and b are (raw) or are not yet scaled own inputs, and which
// completes the reduction or not; worldSize divides on the last step of kAvg.
ScaledStep scaledStep(const Scaling& s, bool aRaw, bool bRaw, bool last, ReduceOp op, int worldSize);

// reduceTwo with a scaled step (float dtypes; dst may alias a or b).
void reduceTwoScaled(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, size_t count, const ScaledStep& step);

// A world (or group) of one rank, where nothing is combined: dst[i] = dst[i] * pre * post, each product
// rounded as in reduceTwoScaled.
void scaleAlone(DType dtype, void* dst, size_t count, const Scaling& s);

// dst[i] = dst[i] / divisor: the last step of kAvg. Integers divide and truncate toward zero; float16 and
// bfloat16 divide in float32 and round once.
void scaleForAvg(DType dtype, void* dst, size_t count, int divisor);

// dst[i] = the identity of op for count elements: what a rank that has joined (hora.join()) contributes, so
// that the others' result is as if it were absent. -0.0 for a float sum or avg (x + -0 is x for every x,
// -0 included, where +0 would turn -0 into +0), 0 for an integer one; 1 for prod; +inf (floats) or the
// largest value for min; -inf or the smallest value for max.
void fillIdentity(ReduceOp op, DType dtype, void* dst, size_t count);

// Conversions used by tests and by compression in the adapters.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t h);
uint16_t floatToBfloat16(float f);

}  // namespace hora
