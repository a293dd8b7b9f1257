public import Foundation
import GRDB
public import RallyCrypto
public import RallyWire

/// The embedded store: one SQLite file in WAL mode with `synchronous=FULL`,
/// so a returned `append` has reached the disk.
public final class SQLiteRelayStore: RelayStore, SynchronousAppending {
    /// Internal for the durability test, which reads its writer's pragma.
    let pool: DatabasePool

    public init(url: URL) throws {
        pool = try OwnerOnlyFile.openPool(url, label: "rally.relay.store")
        try Self.ownerOnlyDirectory(of: url)
        try Self.migrator.migrate(pool)
    }

    /// An existing data directory that holds nothing but this store's
    /// files is made owner-only too; a directory with other files keeps its
    /// mode (the operator may share it on purpose).
    private static func ownerOnlyDirectory(of url: URL) throws {
        let directory = url.deletingLastPathComponent()
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
        migrator.registerMigration("v2-capabilities") { db in
            // Control entries, key rotations and per-topic byte accounting
            // (docs/adr/0008).
            try db.alter(table: "topics") { table in
                table.add(column: "last_control_seq", .integer).notNull().defaults(to: 0)
                table.add(column: "bytes", .integer).notNull().defaults(to: 0)
            }
            try db.alter(table: "envelopes") { table in
                table.add(column: "control", .boolean).notNull().defaults(to: false)
                // The access key this entry retired (a rotation).
                table.add(column: "retires_key", .blob)
            }
            try db.execute(
                sql:
                    "UPDATE topics SET bytes = (SELECT COALESCE(SUM(length(payload)), 0) FROM envelopes WHERE topic = name)"
            )
            try db.create(table: "topic_keys") { table in
                table.column("topic", .text).notNull()
                table.column("access_key", .blob).notNull()
                // NULL for the current key; for a retired one the last seq
                // it may read.
                table.column("valid_through", .integer)
                table.primaryKey(["topic", "access_key"])
            }
            try db.create(
                index: "envelopes_inbox_age", on: "envelopes", columns: ["server_time_ms"],
                condition: Column("topic").like("inbox/%"))
        }
        migrator.registerMigration("v3-topic-tombstones") { db in
            // A deleted topic leaves only its name and when (docs/adr/0017),
            // so it can never be founded or written again.
            try db.create(table: "deleted_topics") { table in
                table.primaryKey("topic", .text)
                table.column("deleted_at_ms", .integer).notNull()
            }
        }
        return migrator
    }

    public func append(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) async throws -> [Result<AppendResult, AppendRefusal>] {
        guard !batch.isEmpty else { return [] }
        return try await pool.write { db in try Self.append(batch, serverTime: serverTimeMilliseconds, db: db) }
    }

    /// The same append on the caller's thread: a socket's event loop
    /// commits with it and waits for the fsync there, as Redis's one thread
    /// does (ADR 0028).
    func appendNow(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) throws -> [Result<AppendResult, AppendRefusal>] {
        guard !batch.isEmpty else { return [] }
        return try pool.write { db in try Self.append(batch, serverTime: serverTimeMilliseconds, db: db) }
    }

    private static func append(
        _ batch: [PublishRequest], serverTime: Int64, db: Database
    ) throws -> [Result<AppendResult, AppendRefusal>] {
        try batch.map { try append($0, serverTime: serverTime, db: db) }
    }

    private static let envelopeColumns =
        "topic, seq, server_time_ms, payload, should_push, expires_at_ms, control, retires_key"

    private static func append(
        _ request: PublishRequest, serverTime: Int64, db: Database
    ) throws -> Result<AppendResult, AppendRefusal> {
        let key: Data? = request.idempotencyKey.isEmpty ? nil : request.idempotencyKey
        // The hot path is three cached statements: one read of the topic's
        // head with the key's status, the envelope's insert (which finds a
        // retry through the idempotency index) and the head's upsert. A
        // retry is answered as if it had been looked up before any other
        // check: a refused publish looks for its original, and an insert
        // the index turns away is the retry of a stored one.
        let (head, keyStatus) = try headAndStatus(request, db: db)
        let registers: Bool
        switch AppendRules.check(request, head: head, keyStatus: keyStatus) {
        case .failure(let refusal):
            return try retry(request, key: key, db: db) ?? .failure(refusal)
        case .success(let founds): registers = founds
        }
        let seq = head.lastSeq + 1
        let retired = AppendRules.retiredKey(by: request)
        try db.cachedStatement(
            sql: """
                INSERT INTO envelopes
                (topic, seq, server_time_ms, payload, should_push, expires_at_ms, idempotency_key, control,
                 retires_key)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (topic, idempotency_key) DO NOTHING
                """
        ).execute(arguments: [
            request.topic, seq, serverTime, request.payload, request.shouldPush,
            request.expiresAtMilliseconds, key, request.control, retired,
        ])
        if db.changesCount == 0 {
            // Only the idempotency index turns an insert away.
            guard let found = try retry(request, key: key, db: db) else {
                throw DatabaseError(resultCode: .SQLITE_INTERNAL, message: "an insert was ignored without a retry")
            }
            return found
        }
        if registers, let accessKey = request.accessKey {
            try db.execute(
                sql: "INSERT INTO topic_keys (topic, access_key, valid_through) VALUES (?, ?, NULL)",
                arguments: [request.topic, accessKey])
        }
        try db.cachedStatement(
            sql: """
                INSERT INTO topics (name, last_seq, bytes, last_control_seq) VALUES (?, ?, ?, ?)
                ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq, bytes = excluded.bytes,
                last_control_seq = excluded.last_control_seq
                """
        ).execute(arguments: [
            request.topic, seq, head.bytes + Int64(request.payload.count),
            request.control ? seq : head.lastControlSeq,
        ])
        if retired != nil, let newKey = request.rotateAccessKey {
            // The old key reads up to and including this entry.
            try db.execute(
                sql: "UPDATE topic_keys SET valid_through = ? WHERE topic = ? AND valid_through IS NULL",
                arguments: [seq, request.topic])
            try db.execute(
                sql: """
                    INSERT INTO topic_keys (topic, access_key, valid_through) VALUES (?, ?, NULL)
                    ON CONFLICT (topic, access_key) DO UPDATE SET valid_through = NULL
                    """,
                arguments: [request.topic, newKey])
        }
        let stored = AppendRules.envelope(request, seq: seq, serverTime: serverTime)
        return .success(AppendResult(envelope: stored, duplicate: false, retiredKey: retired))
    }

    /// The topic's head and, for a capability topic, the status of the
    /// publish's key, in one statement while the key is one the topic holds.
    private static func headAndStatus(
        _ request: PublishRequest, db: Database
    ) throws -> (AppendRules.Head, AccessKeyStatus?) {
        guard let accessKey = request.accessKey else {
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT last_seq, last_control_seq, bytes FROM topics WHERE name = ?"),
                arguments: [request.topic])
            return (head(row), nil)
        }
        let row = try Row.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT t.last_seq, t.last_control_seq, t.bytes, k.access_key IS NOT NULL AS held, k.valid_through
                    FROM (SELECT 1) LEFT JOIN topics t ON t.name = ?1
                    LEFT JOIN topic_keys k ON k.topic = ?1 AND k.access_key = ?2
                    """),
            arguments: [request.topic, accessKey])
        guard let row, row["held"] == true else {
            return (head(row), try statusOfKeyNotHeld(topic: request.topic, db: db))
        }
        return (head(row), .held(validThrough: row["valid_through"]))
    }

    private static func head(_ row: Row?) -> AppendRules.Head {
        AppendRules.Head(
            lastSeq: row?["last_seq"] ?? 0, lastControlSeq: row?["last_control_seq"] ?? 0, bytes: row?["bytes"] ?? 0)
    }

    /// The answer to `request` if it repeats a stored publish.
    private static func retry(
        _ request: PublishRequest, key: Data?, db: Database
    ) throws -> Result<AppendResult, AppendRefusal>? {
        guard let key,
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT \(envelopeColumns) FROM envelopes WHERE topic = ? AND idempotency_key = ?"),
                arguments: [request.topic, key])
        else { return nil }
        let keyStatus = try request.accessKey.map { try status(topic: request.topic, key: $0, db: db) }
        return AppendRules.retry(of: envelope(row), keyStatus: keyStatus)
    }

    private static func status(topic: String, key: Data, db: Database) throws -> AccessKeyStatus {
        if let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT valid_through FROM topic_keys WHERE topic = ? AND access_key = ?"),
            arguments: [topic, key])
        {
            return .held(validThrough: row["valid_through"])
        }
        return try statusOfKeyNotHeld(topic: topic, db: db)
    }

    /// The status of a key the topic does not hold. A deleted topic has no
    /// keys left, so the tombstone is read only off the hot path.
    private static func statusOfKeyNotHeld(topic: String, db: Database) throws -> AccessKeyStatus {
        if try Bool.fetchOne(
            db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM deleted_topics WHERE topic = ?)"),
            arguments: [topic]) == true
        {
            return .deleted
        }
        let known = try Bool.fetchOne(
            db, sql: "SELECT EXISTS (SELECT 1 FROM topic_keys WHERE topic = ?)", arguments: [topic])
        return known == true ? .unknown : .unregistered
    }

    public func accessKeyStatus(topic: String, key: Data) async throws -> AccessKeyStatus {
        try await pool.read { db in try Self.status(topic: topic, key: key, db: db) }
    }

    public func deleteTopic(_ topic: String, accessKey: Data, nowMilliseconds: Int64) async throws -> TopicDeletion {
        try await pool.write { db in
            switch try Self.status(topic: topic, key: accessKey, db: db) {
            case .deleted: return .alreadyDeleted
            case .current: break
            case let other: return .refused(other)
            }
            try db.execute(sql: "DELETE FROM envelopes WHERE topic = ?", arguments: [topic])
            let envelopes = db.changesCount
            try db.execute(sql: "DELETE FROM topic_keys WHERE topic = ?", arguments: [topic])
            try db.execute(sql: "DELETE FROM topics WHERE name = ?", arguments: [topic])
            try db.execute(
                sql: "INSERT INTO deleted_topics (topic, deleted_at_ms) VALUES (?, ?)",
                arguments: [topic, nowMilliseconds])
            return .deleted(envelopes: envelopes)
        }
    }

    public func fetch(
        topic: String, after: UInt64, limit: Int, maxBytes: Int, nowMilliseconds: Int64
    ) async throws -> FetchResult {
        let after = Int64(clamping: after)
        let limit = max(0, limit)
        return try await pool.read { db in
            // One read transaction: head and page come from the same snapshot.
            let head = try Int64.fetchOne(db, sql: "SELECT last_seq FROM topics WHERE name = ?", arguments: [topic])
            let rows = try Row.fetchCursor(
                db,
                sql: """
                    SELECT \(Self.envelopeColumns)
                    FROM envelopes
                    WHERE topic = ? AND seq > ? AND (expires_at_ms = 0 OR expires_at_ms >= ?)
                    ORDER BY seq LIMIT ?
                    """,
                arguments: [topic, after, nowMilliseconds, limit])
            var envelopes: [WireEnvelope] = []
            var retiredKeys: [UInt64: Data] = [:]
            var bytes = 0
            while let row = try rows.next() {
                let envelope = Self.envelope(row)
                // Byte-bounded pages: always at least one envelope.
                if maxBytes > 0, !envelopes.isEmpty, bytes + envelope.payload.count > maxBytes { break }
                bytes += envelope.payload.count
                if let retired = row["retires_key"] as Data? { retiredKeys[envelope.seq] = retired }
                envelopes.append(envelope)
            }
            return FetchResult(envelopes: envelopes, headSeq: UInt64(max(0, head ?? 0)), retiredKeys: retiredKeys)
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

    public func deleteExpired(nowMilliseconds: Int64, inboxCutoffMilliseconds: Int64) async throws -> Int {
        try await pool.write { db in
            let condition = """
                ((expires_at_ms > 0 AND expires_at_ms < :now)
                 OR (:cutoff > 0 AND topic LIKE 'inbox/%' AND server_time_ms < :cutoff))
                """
            let arguments: StatementArguments = ["now": nowMilliseconds, "cutoff": inboxCutoffMilliseconds]
            // Quotas count stored bytes, so deleted payloads give them back.
            try db.execute(
                sql: """
                    UPDATE topics SET bytes = bytes - (
                        SELECT COALESCE(SUM(length(payload)), 0) FROM envelopes
                        WHERE envelopes.topic = topics.name AND \(condition))
                    WHERE name IN (SELECT DISTINCT topic FROM envelopes WHERE \(condition))
                    """,
                arguments: arguments)
            try db.execute(sql: "DELETE FROM envelopes WHERE \(condition)", arguments: arguments)
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
        envelope.control = row["control"]
        return envelope
    }
}
