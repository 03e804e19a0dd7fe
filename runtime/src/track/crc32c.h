// CRC-32C (Castagnoli), the checksum of TFRecord framing (record_writer.h), from Boost.CRC.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xlaunch::track {

// CRC-32C of n bytes: polynomial 0x1EDC6F41, initial value and final xor 0xFFFFFFFF, reflected
// input and output ("123456789" gives 0xE3069283).
uint32_t crc32c(const void* data, size_t n);

// The masked form TFRecord stores: a CRC of data that itself holds CRCs is weak, so the stored
// value is rotated right by 15 bits and offset by a constant: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc(uint32_t crc);

}  // namespace xlaunch::track
