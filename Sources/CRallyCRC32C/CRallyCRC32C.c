#include "CRallyCRC32C.h"

#include <string.h>

// One loop for both instructions: each architecture names its eight-byte
// and one-byte steps, and what the loop's function must be compiled for.
#if defined(__x86_64__)

#define CRC32C_TARGET __attribute__((target("sse4.2")))
#define CRC32C_STEP8(crc, word) ((uint32_t)__builtin_ia32_crc32di((crc), (word)))
#define CRC32C_STEP1(crc, byte) __builtin_ia32_crc32qi((crc), (byte))

int rally_crc32c_hardware_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)

#include <arm_acle.h>

#define CRC32C_TARGET
#define CRC32C_STEP8(crc, word) __crc32cd((crc), (word))
#define CRC32C_STEP1(crc, byte) __crc32cb((crc), (byte))

int rally_crc32c_hardware_available(void) { return 1; }

#endif

#if defined(CRC32C_STEP8)

CRC32C_TARGET
uint32_t rally_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *next = bytes;
    // Eight bytes per instruction; memcpy keeps unaligned loads defined.
    for (; count >= 8; next += 8, count -= 8) {
        uint64_t word;
        memcpy(&word, next, sizeof word);
        crc = CRC32C_STEP8(crc, word);
    }
    for (; count > 0; next += 1, count -= 1) crc = CRC32C_STEP1(crc, *next);
    return crc;
}

#else

int rally_crc32c_hardware_available(void) { return 0; }

// Never called: the Swift side uses its tables when the function above says 0.
uint32_t rally_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    (void)bytes;
    (void)count;
    return crc;
}

#endif
