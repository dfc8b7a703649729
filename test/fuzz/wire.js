'use strict';
// A seeded random source and a hand-rolled protobuf writer for the fuzzer.
//
// The writer exists because the real encoder (protobufjs, via encodeEnvelope)
// only writes well-formed messages: wrong wire types, overlong varints,
// duplicated or reordered fields and unknown groups have to be written by hand.

/** Mixes (seed, index) into a 32-bit state, so that every case can be replayed alone. */
function caseSeed(seed, index) {
  let h = (seed ^ Math.imul(index + 1, 0x9e3779b9)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}

/** mulberry32: small, fast, good enough to pick test inputs. */
class Rng {
  constructor(seed) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 2^32). */
  u32() {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** Integer in [0, n). */
  int(n) {
    if (n <= 0x100000000) return Math.floor((this.u32() / 0x100000000) * n);
    return Math.floor(((this.u32() * 0x100000000 + this.u32()) / 2 ** 64) * n);
  }

  /** Integer in [lo, hi]. */
  range(lo, hi) {
    return lo + this.int(hi - lo + 1);
  }

  chance(p) {
    return this.u32() / 0x100000000 < p;
  }

  pick(list) {
    return list[this.int(list.length)];
  }

  /** Index into weights, chosen in proportion to them. */
  weighted(weights) {
    let total = 0;
    for (const w of weights) total += w;
    let x = this.u32() / 0x100000000 * total;
    for (let i = 0; i < weights.length; i++) {
      x -= weights[i];
      if (x < 0) return i;
    }
    return weights.length - 1;
  }

  bytes(n) {
    const out = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) out[i] = this.u32() & 0xff;
    return out;
  }

  /** A length that is mostly small, sometimes large: 0..max. */
  length(max) {
    const r = this.u32() / 0x100000000;
    if (r < 0.6) return Math.min(max, this.int(16));
    if (r < 0.9) return Math.min(max, this.int(256));
    if (r < 0.98) return Math.min(max, this.int(4096));
    return this.int(max + 1);
  }
}

const WIRE = { VARINT: 0, I64: 1, LEN: 2, SGROUP: 3, EGROUP: 4, I32: 5 };

/** Collects protobuf fields; every method returns this. */
class Writer {
  constructor() {
    this.parts = [];
  }

  raw(buf) {
    this.parts.push(buf);
    return this;
  }

  /** Varint of a non-negative BigInt or number; `pad` extra continuation bytes make it overlong. */
  varint(value, pad = 0) {
    let v = BigInt.asUintN(64, BigInt(value));
    const out = [];
    while (v > 0x7fn) {
      out.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    out.push(Number(v));
    // Overlong: the last group becomes a continuation, followed by zero groups.
    for (let i = 0; i < pad; i++) {
      out[out.length - 1] |= 0x80;
      out.push(0);
    }
    return this.raw(Buffer.from(out));
  }

  tag(field, wireType) {
    return this.varint(BigInt(field) * 8n + BigInt(wireType));
  }

  /** A length-delimited field; `lengthDelta` lies about the length. */
  len(field, bytes, lengthDelta = 0) {
    this.tag(field, WIRE.LEN);
    this.varint(Math.max(0, bytes.length + lengthDelta));
    return this.raw(bytes);
  }

  fixed32(field, value) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(value >>> 0, 0);
    return this.tag(field, WIRE.I32).raw(b);
  }

  fixed64(field, value) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt.asUintN(64, BigInt(value)), 0);
    return this.tag(field, WIRE.I64).raw(b);
  }

  finish() {
    return Buffer.concat(this.parts);
  }
}

module.exports = { caseSeed, Rng, Writer, WIRE };
