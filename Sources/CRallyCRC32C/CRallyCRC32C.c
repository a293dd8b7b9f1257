#include "CRallyCRC32C.h"

#include <string.h>

#if defined(__x86_64__)

int rally_crc32c_hardware_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

__attribute__((target("sse4.2")))
uint32_t rally_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *next = bytes;
    uint64_t wide = crc;
    // Eight bytes per instruction; memcpy keeps unaligned loads defined.
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, next, sizeof word);
        wide = __builtin_ia32_crc32di(wide, word);
        next += 8;
        count -= 8;
    }
    uint32_t narrow = (uint32_t)wide;
    while (count > 0) {
        narrow = __builtin_ia32_crc32qi(narrow, *next);
        next += 1;
        count -= 1;
    }
    return narrow;
}

#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)

#include <arm_acle.h>

int rally_crc32c_hardware_available(void) { return 1; }

uint32_t rally_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *next = bytes;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, next, sizeof word);
        crc = __crc32cd(crc, word);
        next += 8;
        count -= 8;
    }
    while (count > 0) {
        crc = __crc32cb(crc, *next);
        next += 1;
        count -= 1;
    }
    return crc;
}

#else

int rally_crc32c_hardware_available(void) { return 0; }

uint32_t rally_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    (void)bytes;
    (void)count;
    return crc;
}

#endif
