#ifndef CRALLY_SQLITE_H
#define CRALLY_SQLITE_H

/// Turns SQLite's memory statistics off for this process, once, before any
/// connection opens (docs/adr/0042). With them on, every allocation SQLite
/// makes takes one process-wide mutex: homes and relay stores that compile
/// and run statements on several threads wait on it.
///
/// SQLite reads this setting only before it starts; when something in the
/// process started it first, it keeps its statistics and the call changes
/// nothing. Returns 0 (SQLITE_OK) when the statistics are off, or SQLite's
/// error code (SQLITE_MISUSE when it had started). Every call after the
/// first returns the first call's result.
int rally_sqlite_disable_memory_statistics(void);

/// The bytes SQLite counts as in use (`sqlite3_memory_used`): always 0
/// while its memory statistics are off, so tests can tell.
long long rally_sqlite_memory_used(void);

#endif
