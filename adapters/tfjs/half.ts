/**
 * float32 <-> float16 / bfloat16 conversion for gradient compression, rounding to nearest, ties to even
 * (IEEE 754's default), so a value that is exactly representable survives the round trip unchanged.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 bits -> float16 bits. */
function halfBits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) return sign | (mant ? 0x7e00 : 0x7c00); // NaN stays NaN (quiet), infinities stay infinite
  const e = exp - 127;
  if (e > 15) return sign | 0x7c00; // beyond the largest finite half
  if (e >= -14) {
    // Normal half: keep the top 10 mantissa bits and round on the 13 dropped ones. A carry out of the
    // mantissa correctly bumps the exponent (and 65520 and up become infinity).
    let h = sign | ((e + 15) << 10) | (mant >>> 13);
    const rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest === 0x1000 && (h & 1))) h += 1;
    return h;
  }
  // Subnormal half, in units of 2^-24: the 24-bit significand shifted right by -e-1 places.
  const shift = -e - 1;
  if (shift > 24) return sign;
  const m = mant | 0x800000;
  let q = m >>> shift;
  const rest = m & ((1 << shift) - 1);
  const halfway = 1 << (shift - 1);
  if (rest > halfway || (rest === halfway && (q & 1))) q += 1;
  return sign | q;
}

let halfTable: Float32Array | null = null;

/** All 65536 half values as float32, built on first use (256 KiB). */
function halfToFloatTable(): Float32Array {
  if (halfTable) return halfTable;
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >>> 10) & 0x1f;
    const mant = h & 0x3ff;
    if (exp === 0) table[h] = sign * mant * 2 ** -24;
    else if (exp === 31) table[h] = mant ? NaN : sign * Infinity;
    else table[h] = sign * (1 + mant / 1024) * 2 ** (exp - 15);
  }
  halfTable = table;
  return table;
}

/** float32 values -> float16 bit patterns (round to nearest even). */
export function floatToHalf(src: Float32Array, dst: Uint16Array = new Uint16Array(src.length)): Uint16Array {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < src.length; i++) dst[i] = halfBits(bits[i]);
  return dst;
}

/** float16 bit patterns -> float32 values (exact). */
export function halfToFloat(src: Uint16Array, dst: Float32Array = new Float32Array(src.length)): Float32Array {
  const table = halfToFloatTable();
  for (let i = 0; i < src.length; i++) dst[i] = table[src[i]];
  return dst;
}

/** float32 values -> bfloat16 bit patterns (the top 16 bits, rounded to nearest even). */
export function floatToBFloat16(src: Float32Array, dst: Uint16Array = new Uint16Array(src.length)): Uint16Array {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < src.length; i++) {
    const x = bits[i];
    if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff)) dst[i] = (x >>> 16) | 0x40; // NaN stays NaN
    else dst[i] = (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
  }
  return dst;
}

/** bfloat16 bit patterns -> float32 values (exact). */
export function bfloat16ToFloat(src: Uint16Array, dst: Float32Array = new Float32Array(src.length)): Float32Array {
  const bits = new Uint32Array(dst.buffer, dst.byteOffset, dst.length);
  for (let i = 0; i < src.length; i++) bits[i] = src[i] << 16;
  return dst;
}

/** One float32 rounded through float16 and back: what a value looks like after fp16 compression. */
export function roundToHalf(x: number): number {
  f32[0] = x;
  return halfToFloatTable()[halfBits(u32[0])];
}

/** A float32 array as it travels compressed: its float16 or bfloat16 bits, and the dtype that names them. */
export function compress(data: Float32Array, compression: 'fp16' | 'bf16'): { bits: Uint16Array; dtype: 'float16' | 'bfloat16' } {
  return compression === 'fp16' ? { bits: floatToHalf(data), dtype: 'float16' } : { bits: floatToBFloat16(data), dtype: 'bfloat16' };
}

/** Compressed bits back to float32 (into `into` when given). */
export function decompress(bits: Uint16Array, dtype: 'float16' | 'bfloat16', into?: Float32Array): Float32Array {
  return dtype === 'float16' ? halfToFloat(bits, into) : bfloat16ToFloat(bits, into);
}
