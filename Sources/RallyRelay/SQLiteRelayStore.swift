public import Foundation
import GRDB
public import RallyCrypto
public import RallyWire
import Synchronization

/// The embedded store: one SQLite file in WAL mode with `synchronous=FULL`,
/// so a returned `append` has reached the disk.
///
/// Envelopes are rows appended to one table with no index of SQLite's on
/// the append path; their heads, seq order and idempotency keys are kept
/// in memory (`EnvelopeIndex`) and rebuilt from the rows at open
/// (ADR 0029). One process at a time opens a store (`StoreLock`).
public final class SQLiteRelayStore: RelayStore, SynchronousAppending {
    /// Internal for the durability test, which reads its writer's pragma.
    let pool: DatabasePool
    private let index: Mutex<EnvelopeIndex>
    private let lock: StoreLock

    /// Throws `StoreInUse` when another process has the store open.
    public init(url: URL) throws {
        pool = try OwnerOnlyFile.openPool(url, label: "rally.relay.store")
        // Before anything is read or migrated; opening the pool changes
        // nothing another process could see.
        lock = try StoreLock(beside: url)
        try Self.ownerOnlyDirectory(of: url)
        try Self.migrator.migrate(pool)
        index = Mutex(try pool.read { db in try Self.loadIndex(db) })
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
        migrator.registerMigration("v4-envelope-log") { db in
            // One table the appends only add rows to: no primary key but the
            // row id and no index that every append would update at a random
            // page (ADR 0029). Heads kept in `topics` stay there: they are
            // read at open and outlive the rows they counted.
            try db.create(table: "envelope_log") { table in
                table.primaryKey("id", .integer)
                table.column("topic", .text).notNull()
                table.column("seq", .integer).notNull()
                table.column("server_time_ms", .integer).notNull()
                table.column("payload", .blob).notNull()
                table.column("should_push", .boolean).notNull()
                table.column("expires_at_ms", .integer).notNull()
                table.column("idempotency_key", .blob)
                table.column("control", .boolean).notNull().defaults(to: false)
                table.column("retires_key", .blob)
            }
            // The columns as of this migration, spelled out: a later column
            // must not change what it copies.
            let columns =
                "topic, seq, server_time_ms, payload, should_push, expires_at_ms, idempotency_key, control, retires_key"
            try db.execute(
                sql: "INSERT INTO envelope_log (\(columns)) SELECT \(columns) FROM envelopes ORDER BY topic, seq")
            try db.drop(table: "envelopes")
            // Both keys grow with time, so an append adds to their last page.
            try db.create(
                index: "envelope_log_expiry", on: "envelope_log", columns: ["expires_at_ms"],
                condition: Column("expires_at_ms") > 0)
            try db.create(
                index: "envelope_log_inbox_age", on: "envelope_log", columns: ["server_time_ms"],
                condition: Column("topic").like("inbox/%"))
        }
        return migrator
    }

    /// What an append writes and a read takes back (the key is ignored).
    private static let columns =
        "topic, seq, server_time_ms, payload, should_push, expires_at_ms, idempotency_key, control, retires_key"

    private static func loadIndex(_ db: Database) throws -> EnvelopeIndex {
        var index = EnvelopeIndex()
        let heads = try Row.fetchCursor(db, sql: "SELECT name, last_seq, last_control_seq FROM topics")
        while let row = try heads.next() {
            index.seed(topic: row["name"], lastSeq: row["last_seq"], lastControlSeq: row["last_control_seq"])
        }
        let keys = try Row.fetchCursor(db, sql: "SELECT topic, access_key, valid_through FROM topic_keys")
        while let row = try keys.next() {
            index.loadKey(topic: row["topic"], key: row["access_key"], validThrough: row["valid_through"])
        }
        let rows = try Row.fetchCursor(
            db,
            sql: """
                SELECT id, topic, seq, expires_at_ms, length(payload) AS bytes, control, idempotency_key
                FROM envelope_log ORDER BY id
                """)
        while let row = try rows.next() {
            index.load(
                topic: row["topic"],
                entry: EnvelopeIndex.Entry(
                    seq: row["seq"], rowID: row["id"], expiresAtMilliseconds: row["expires_at_ms"]),
                payloadBytes: row["bytes"], control: row["control"], idempotencyKey: row["idempotency_key"])
        }
        index.finishLoading()
        return index
    }

    public func append(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) async throws -> [Result<AppendResult, AppendRefusal>] {
        guard !batch.isEmpty else { return [] }
        return try await pool.writeWithoutTransaction { db in
            try self.append(batch, serverTime: serverTimeMilliseconds, db: db)
        }
    }

    /// The same append on the caller's thread: a socket's event loop
    /// commits with it and waits for the fsync there, as Redis's one thread
    /// does (ADR 0028).
    func appendNow(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) throws -> [Result<AppendResult, AppendRefusal>] {
        guard !batch.isEmpty else { return [] }
        return try pool.writeWithoutTransaction { db in try append(batch, serverTime: serverTimeMilliseconds, db: db) }
    }

    /// One transaction for the batch. The index learns of its rows only
    /// after the commit, still inside the writer, so no other write and no
    /// reader sees them before they are on disk.
    private func append(
        _ batch: [PublishRequest], serverTime: Int64, db: Database
    ) throws -> [Result<AppendResult, AppendRefusal>] {
        var pending = EnvelopeIndex.Pending()
        var results: [Result<AppendResult, AppendRefusal>] = []
        try db.inTransaction {
            results = try batch.map { try append($0, serverTime: serverTime, pending: &pending, db: db) }
            return .commit
        }
        index.withLock { $0.apply(pending) }
        return results
    }

    private func append(
        _ request: PublishRequest, serverTime: Int64, pending: inout EnvelopeIndex.Pending, db: Database
    ) throws -> Result<AppendResult, AppendRefusal> {
        let key: Data? = request.idempotencyKey.isEmpty ? nil : request.idempotencyKey
        let (head, original) = index.withLock { index in
            (
                pending.head(of: request.topic, in: index),
                key.flatMap { pending.original(topic: request.topic, key: $0, in: index) }
            )
        }
        let keyStatus = try request.accessKey.map {
            try status(topic: request.topic, key: $0, pending: pending, db: db)
        }
        // A retry is answered before any other check, with what its
        // original stored.
        if let original {
            guard let row = try Row.fetchOne(Self.rowStatement(db), arguments: [original]) else {
                throw DatabaseError(resultCode: .SQLITE_INTERNAL, message: "an indexed envelope has no row")
            }
            return AppendRules.retry(of: Self.envelope(row), keyStatus: keyStatus)
        }
        let registers: Bool
        switch AppendRules.check(request, head: head, keyStatus: keyStatus) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let founds): registers = founds
        }
        let seq = head.lastSeq + 1
        let retired = AppendRules.retiredKey(by: request)
        try db.cachedStatement(
            sql: "INSERT INTO envelope_log (\(Self.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ).execute(arguments: [
            request.topic, seq, serverTime, request.payload, request.shouldPush,
            request.expiresAtMilliseconds, key, request.control, retired,
        ])
        pending.append(
            EnvelopeIndex.Entry(
                seq: seq, rowID: db.lastInsertedRowID, expiresAtMilliseconds: request.expiresAtMilliseconds),
            topic: request.topic, after: head, payloadBytes: Int64(request.payload.count), control: request.control,
            idempotencyKey: key)
        if registers, let accessKey = request.accessKey {
            try db.execute(
                sql: "INSERT INTO topic_keys (topic, access_key, valid_through) VALUES (?, ?, NULL)",
                arguments: [request.topic, accessKey])
            index.withLock { pending.registered(accessKey, topic: request.topic, in: $0) }
        }
        if retired != nil, let newKey = request.rotateAccessKey {
            index.withLock { pending.rotated(topic: request.topic, at: seq, to: newKey, in: $0) }
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

    private static func rowStatement(_ db: Database) throws -> Statement {
        try db.cachedStatement(sql: "SELECT \(columns) FROM envelope_log WHERE id = ?")
    }

    /// A key's status from the index (with what the batch has changed so
    /// far); only a key the topic does not hold reads SQLite, for the
    /// topic's tombstone.
    private func status(
        topic: String, key: Data, pending: EnvelopeIndex.Pending = EnvelopeIndex.Pending(), db: Database
    ) throws -> AccessKeyStatus {
        let (held, holdsKeys) = index.withLock { index in
            (pending.heldKey(topic: topic, key: key, in: index), pending.holdsKeys(topic: topic, in: index))
        }
        if let held { return held }
        if try Bool.fetchOne(
            db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM deleted_topics WHERE topic = ?)"),
            arguments: [topic]) == true
        {
            return .deleted
        }
        return holdsKeys ? .unknown : .unregistered
    }

    public func accessKeyStatus(topic: String, key: Data) async throws -> AccessKeyStatus {
        try await pool.read { db in try self.status(topic: topic, key: key, db: db) }
    }

    public func deleteTopic(_ topic: String, accessKey: Data, nowMilliseconds: Int64) async throws -> TopicDeletion {
        try await pool.writeWithoutTransaction { db in
            var deletion = TopicDeletion.alreadyDeleted
            try db.inTransaction {
                switch try self.status(topic: topic, key: accessKey, db: db) {
                case .deleted: return .commit
                case .current: break
                case let other:
                    deletion = .refused(other)
                    return .commit
                }
                let rows = self.index.withLock { $0.rowIDs(of: topic) }
                let delete = try db.cachedStatement(sql: "DELETE FROM envelope_log WHERE id = ?")
                for row in rows { try delete.execute(arguments: [row]) }
                try db.execute(sql: "DELETE FROM topic_keys WHERE topic = ?", arguments: [topic])
                try db.execute(sql: "DELETE FROM topics WHERE name = ?", arguments: [topic])
                try db.execute(
                    sql: "INSERT INTO deleted_topics (topic, deleted_at_ms) VALUES (?, ?)",
                    arguments: [topic, nowMilliseconds])
                deletion = .deleted(envelopes: rows.count)
                return .commit
            }
            if case .deleted = deletion { self.index.withLock { $0.removeTopic(topic) } }
            return deletion
        }
    }

    public func fetch(
        topic: String, after: UInt64, limit: Int, maxBytes: Int, nowMilliseconds: Int64
    ) async throws -> FetchResult {
        // The index is read before the read transaction starts: every row
        // it names committed before, so the snapshot holds it unless a
        // deletion (expiry, the topic's) has taken it since.
        let (entries, head) = index.withLock { index in
            (
                index.entries(
                    of: topic, after: Int64(clamping: after), limit: max(0, limit), nowMilliseconds: nowMilliseconds),
                index.head(of: topic).lastSeq
            )
        }
        return try await pool.read { db in
            let statement = try Self.rowStatement(db)
            var envelopes: [WireEnvelope] = []
            var retiredKeys: [UInt64: Data] = [:]
            var bytes = 0
            for entry in entries {
                guard let row = try Row.fetchOne(statement, arguments: [entry.rowID]) else { continue }
                let envelope = Self.envelope(row)
                // Byte-bounded pages: always at least one envelope.
                if maxBytes > 0, !envelopes.isEmpty, bytes + envelope.payload.count > maxBytes { break }
                bytes += envelope.payload.count
                if let retired = row["retires_key"] as Data? { retiredKeys[envelope.seq] = retired }
                envelopes.append(envelope)
            }
            return FetchResult(envelopes: envelopes, headSeq: UInt64(max(0, head)), retiredKeys: retiredKeys)
        }
    }

    public func headSeq(topic: String) async throws -> UInt64 {
        UInt64(max(0, index.withLock { $0.head(of: topic).lastSeq }))
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
        try await pool.writeWithoutTransaction { db in
            var removals: [EnvelopeIndex.Removal] = []
            try db.inTransaction {
                let rows = try Row.fetchAll(
                    db,
                    sql: """
                        DELETE FROM envelope_log
                        WHERE (expires_at_ms > 0 AND expires_at_ms < :now)
                           OR (:cutoff > 0 AND topic LIKE 'inbox/%' AND server_time_ms < :cutoff)
                        RETURNING topic, seq, length(payload) AS bytes, idempotency_key
                        """,
                    arguments: ["now": nowMilliseconds, "cutoff": inboxCutoffMilliseconds])
                removals = rows.map {
                    EnvelopeIndex.Removal(
                        topic: $0["topic"], seq: $0["seq"], payloadBytes: $0["bytes"],
                        idempotencyKey: $0["idempotency_key"])
                }
                // A topic's head outlives its rows: kept in `topics`, it is
                // where the next open starts counting when no row is left.
                let heads = self.index.withLock { index in
                    Set(removals.map(\.topic)).map { ($0, index.head(of: $0)) }
                }
                let keep = try db.cachedStatement(
                    sql: """
                        INSERT INTO topics (name, last_seq, last_control_seq) VALUES (?, ?, ?)
                        ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq,
                        last_control_seq = excluded.last_control_seq
                        """)
                for (topic, head) in heads {
                    try keep.execute(arguments: [topic, head.lastSeq, head.lastControlSeq])
                }
                return .commit
            }
            self.index.withLock { $0.remove(removals) }
            return removals.count
        }
    }

    public func close() async throws {
        try pool.close()
        lock.release()
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
