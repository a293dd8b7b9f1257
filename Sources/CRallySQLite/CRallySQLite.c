#include "CRallySQLite.h"

#include <pthread.h>
#include <sqlite3.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int result = SQLITE_OK;

static void disable(void) {
    // Only valid before sqlite3_initialize; SQLite answers SQLITE_MISUSE
    // after it, and leaves its settings as they were.
    result = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

int rally_sqlite_disable_memory_statistics(void) {
    pthread_once(&once, disable);
    return result;
}

long long rally_sqlite_memory_used(void) {
    return (long long)sqlite3_memory_used();
}
