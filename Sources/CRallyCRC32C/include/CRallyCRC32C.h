// CRC-32C (Castagnoli) with the processor's own instruction where it has
// one: SSE 4.2's `crc32` on x86-64, the CRC extension's `crc32c` on ARMv8.
// RallyRelay's segment log checksums every record it writes (on the
// acknowledgement path) and reads back every record when a store opens;
// its table-driven Swift checksum stays the fallback and the reference the
// tests hold this one to.
#ifndef C_RALLY_CRC32C_H
#define C_RALLY_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/// 1 if `rally_crc32c_update` can run on this processor, else 0.
int rally_crc32c_hardware_available(void);

/// The raw CRC register after `count` bytes from `crc` (no pre- or
/// post-inversion: the caller inverts, as the table-driven code does).
/// Call only when `rally_crc32c_hardware_available()` returned 1.
uint32_t rally_crc32c_update(uint32_t crc, const void *bytes, size_t count);

#endif
