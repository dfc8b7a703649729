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

// dst[i] = dst[i] / divisor: the last step of kAvg. Integers divide and truncate toward zero; float16 and
// bfloat16 divide in float32 and round once.
void scaleForAvg(DType dtype, void* dst, size_t count, int divisor);

// Conversions used by tests and by compression in the adapters.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t h);
uint16_t floatToBfloat16(float f);

}  // namespace hora
