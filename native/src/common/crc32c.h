// CRC-32C (Castagnoli: polynomial 0x1EDC6F41, bit-reflected 0x82F63B78, initial value and final xor
// 0xFFFFFFFF; the CRC of iSCSI and of SSE4.2's crc32 instruction): the checksum of each chunk of a
// checkpoint's shard files (ts/checkpoint-manifest.ts), computed by save and checked by load.
//
// crc32c() runs on SSE4.2's crc32 instruction where the CPU has it (x86-64, GCC or Clang; checked at run
// time), over three parts of the buffer at once so that the instruction's latency is hidden, the parts'
// CRCs then joined with crc32cCombine(); elsewhere on a table, 8 bytes a step. Both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hora {

// The CRC of `len` bytes at `data` following bytes whose CRC is `crc` (0: nothing before them), so that
// crc32c(b, crc32c(a)) is the CRC of a then b.
uint32_t crc32c(const void* data, size_t len, uint32_t crc = 0);

// The CRC of a then b from the CRC of a, the CRC of b and b's length in bytes.
uint32_t crc32cCombine(uint32_t crcA, uint32_t crcB, uint64_t lenB);

// Whether crc32c() uses the CPU's instruction here.
bool crc32cHardware();

// The table's way alone (for the test that compares the two).
uint32_t crc32cPortable(const void* data, size_t len, uint32_t crc = 0);

}  // namespace hora
