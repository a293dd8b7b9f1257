import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// The embedded store: one SQLite file in WAL mode with `synchronous=FULL`,
/// so a returned `append` has reached the disk.
public final class SQLiteRelayStore: RelayStore {
    private let pool: DatabasePool

    public init(url: URL) throws {
        try Self.prepareOwnerOnly(url)
        var configuration = Configuration()
        configuration.label = "rally.relay.store"
        configuration.prepareDatabase { db in
            // WAL's default (NORMAL) may lose the last commits on power loss;
            // an acknowledged publish must survive that.
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        pool = try DatabasePool(path: url.path, configuration: configuration)
        try Self.migrator.migrate(pool)
    }

    /// The data directory is created owner-only (0700) and the database
    /// file is created 0600 before SQLite opens it, so its -wal and -shm
    /// files (which SQLite gives the database file's mode) are too, under
    /// any umask. Files of an earlier run are made owner-only, and so is an
    /// existing directory that holds nothing but them; a directory with
    /// other files keeps its mode (the operator may share it on purpose).
    private static func prepareOwnerOnly(_ url: URL) throws {
        let directory = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if !FileManager.default.fileExists(atPath: url.path) {
            _ = FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600])
        }
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let path = url.path + suffix
            if FileManager.default.fileExists(atPath: path) {
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
            }
        }
        let contents = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        if contents.allSatisfy({ $0.hasPrefix(url.lastPathComponent) }) {
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory.path)
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "topics") { table in
                table.primaryKey("name", .text)
                table.column("last_seq", .integer).notNull()
            }
            try db.create(table: "envelopes") { table in
                table.column("topic", .text).notNull()
                table.column("seq", .integer).notNull()
                table.column("server_time_ms", .integer).notNull()
                table.column("payload", .blob).notNull()
                table.column("should_push", .boolean).notNull()
                table.column("expires_at_ms", .integer).notNull()
                // NULL when the client sent no key: NULLs never collide in a
                // unique index.
                table.column("idempotency_key", .blob)
                table.primaryKey(["topic", "seq"])
            }
            try db.create(
                index: "envelopes_idempotency", on: "envelopes", columns: ["topic", "idempotency_key"],
                unique: true)
            try db.create(
                index: "envelopes_expiry", on: "envelopes", columns: ["expires_at_ms"],
                condition: Column("expires_at_ms") > 0)
            try db.create(table: "key_bundles") { table in
                table.primaryKey("inbox_id", .text)
                table.column("signing_key", .blob).notNull()
                table.column("created_at_ms", .integer).notNull()
                table.column("bundle", .blob).notNull()
                table.column("signature", .blob).notNull()
            }
        }
        return migrator
    }

    public func append(_ batch: [PublishRequest], serverTimeMilliseconds: Int64) async throws -> [AppendResult] {
        guard !batch.isEmpty else { return [] }
        return try await pool.write { db in
            try batch.map { try Self.append($0, serverTime: serverTimeMilliseconds, db: db) }
        }
    }

    private static func append(_ request: PublishRequest, serverTime: Int64, db: Database) throws -> AppendResult {
        let key: Data? = request.idempotencyKey.isEmpty ? nil : request.idempotencyKey
        if let key,
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT topic, seq, server_time_ms, payload, should_push, expires_at_ms
                    FROM envelopes WHERE topic = ? AND idempotency_key = ?
                    """,
                arguments: [request.topic, key])
        {
            return AppendResult(envelope: envelope(row), duplicate: true)
        }
        try db.execute(
            sql: """
                INSERT INTO topics (name, last_seq) VALUES (?, 1)
                ON CONFLICT (name) DO UPDATE SET last_seq = last_seq + 1
                """,
            arguments: [request.topic])
        let seq = try Int64.fetchOne(db, sql: "SELECT last_seq FROM topics WHERE name = ?", arguments: [request.topic])
        guard let seq else { throw DatabaseError(message: "topic head was not returned") }
        try db.execute(
            sql: """
                INSERT INTO envelopes
                (topic, seq, server_time_ms, payload, should_push, expires_at_ms, idempotency_key)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                request.topic, seq, serverTime, request.payload, request.shouldPush,
                request.expiresAtMilliseconds, key,
            ])
        var stored = WireEnvelope()
        stored.topic = request.topic
        stored.seq = UInt64(seq)
        stored.serverTimeMs = serverTime
        stored.payload = request.payload
        stored.shouldPush = request.shouldPush
        stored.expiresAtMs = request.expiresAtMilliseconds
        return AppendResult(envelope: stored, duplicate: false)
    }

    public func fetch(topic: String, after: UInt64, limit: Int, nowMilliseconds: Int64) async throws -> FetchResult {
        let after = Int64(clamping: after)
        let limit = max(0, limit)
        return try await pool.read { db in
            // One read transaction: head and page come from the same snapshot.
            let head = try Int64.fetchOne(db, sql: "SELECT last_seq FROM topics WHERE name = ?", arguments: [topic])
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT topic, seq, server_time_ms, payload, should_push, expires_at_ms
                    FROM envelopes
                    WHERE topic = ? AND seq > ? AND (expires_at_ms = 0 OR expires_at_ms >= ?)
                    ORDER BY seq LIMIT ?
                    """,
                arguments: [topic, after, nowMilliseconds, limit])
            return FetchResult(envelopes: rows.map(Self.envelope), headSeq: UInt64(max(0, head ?? 0)))
        }
    }

    public func headSeq(topic: String) async throws -> UInt64 {
        try await pool.read { db in
            let head = try Int64.fetchOne(db, sql: "SELECT last_seq FROM topics WHERE name = ?", arguments: [topic])
            return UInt64(max(0, head ?? 0))
        }
    }

    public func putKeyBundle(
        _ bundle: WireSignedKeyBundle, inboxID: InboxID, signingPublicKey: Data, createdAtMilliseconds: Int64
    ) async throws -> KeyBundlePutResult {
        try await pool.write { db in
            if let row = try Row.fetchOne(
                db, sql: "SELECT signing_key, created_at_ms, bundle, signature FROM key_bundles WHERE inbox_id = ?",
                arguments: [inboxID.rawValue])
            {
                let storedKey: Data = row["signing_key"]
                guard storedKey == signingPublicKey else { throw RelayStoreError.signingKeyMismatch }
                let storedCreatedAt: Int64 = row["created_at_ms"]
                if createdAtMilliseconds < storedCreatedAt {
                    var current = WireSignedKeyBundle()
                    current.bundle = row["bundle"]
                    current.signature = row["signature"]
                    return .stale(current: current)
                }
            }
            try db.execute(
                sql: """
                    INSERT INTO key_bundles (inbox_id, signing_key, created_at_ms, bundle, signature)
                    VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (inbox_id) DO UPDATE SET
                    created_at_ms = excluded.created_at_ms, bundle = excluded.bundle, signature = excluded.signature
                    """,
                arguments: [inboxID.rawValue, signingPublicKey, createdAtMilliseconds, bundle.bundle, bundle.signature])
            return .stored
        }
    }

    public func keyBundle(inboxID: InboxID) async throws -> WireSignedKeyBundle? {
        try await pool.read { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT bundle, signature FROM key_bundles WHERE inbox_id = ?",
                    arguments: [inboxID.rawValue])
            else { return nil }
            var bundle = WireSignedKeyBundle()
            bundle.bundle = row["bundle"]
            bundle.signature = row["signature"]
            return bundle
        }
    }

    public func deleteExpired(nowMilliseconds: Int64) async throws -> Int {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM envelopes WHERE expires_at_ms > 0 AND expires_at_ms < ?",
                arguments: [nowMilliseconds])
            return db.changesCount
        }
    }

    public func close() async throws {
        try pool.close()
    }

    private static func envelope(_ row: Row) -> WireEnvelope {
        var envelope = WireEnvelope()
        envelope.topic = row["topic"]
        envelope.seq = UInt64(max(0, row["seq"] as Int64))
        envelope.serverTimeMs = row["server_time_ms"]
        envelope.payload = row["payload"]
        envelope.shouldPush = row["should_push"]
        envelope.expiresAtMs = row["expires_at_ms"]
        return envelope
    }
}
