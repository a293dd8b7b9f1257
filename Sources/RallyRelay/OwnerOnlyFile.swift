import CRallySQLite
import Foundation
import GRDB

/// The relay's SQLite files are owner-only from the start.
enum OwnerOnlyFile {
    /// Creates the directory (0700) when missing and the database file
    /// (0600) before SQLite opens it, so its -wal and -shm files (which
    /// SQLite gives the database file's mode) are owner-only too, under any
    /// umask; files left by an earlier run are made owner-only.
    static func prepare(_ url: URL) throws {
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        if !FileManager.default.fileExists(atPath: url.path) {
            _ = FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600])
        }
        for suffix in ["", "-wal", "-shm", "-journal"] where FileManager.default.fileExists(atPath: url.path + suffix) {
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path + suffix)
        }
    }

    /// Opens an owner-only SQLite database for the relay (WAL, with
    /// `synchronous=FULL`: WAL's default, NORMAL, may lose the last commits
    /// on power loss, and what the relay acknowledged must survive that).
    ///
    /// The pragma is set on the writer after the pool is open: GRDB sets
    /// `synchronous = NORMAL` on a pool's writer when it turns WAL on, after
    /// `prepareDatabase` has run, so a pragma there is overwritten. Until
    /// stop 27 it was set there, and no relay commit waited for an fsync.
    /// The writer is the only connection that commits, and the pool keeps
    /// it for its lifetime.
    static func openPool(_ url: URL, label: String) throws -> DatabasePool {
        try prepare(url)
        // Before the process's first connection, or not at all (ADR 0042).
        _ = rally_sqlite_disable_memory_statistics()
        var configuration = Configuration()
        configuration.label = label
        let pool = try DatabasePool(path: url.path, configuration: configuration)
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        return pool
    }
}
