import Foundation
import GRDB
import RallyCrypto

/// A join attempt as persisted between CLI invocations: the attempt itself
/// as JSON, indexed by its invite tag so an answer finds it.
struct JoinAttemptRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "join_attempt"

    var requestID: String
    var tag: String
    var record: Data
    var startedAtMs: Int64

    enum CodingKeys: String, CodingKey {
        case requestID = "request_id", tag, record, startedAtMs = "started_at_ms"
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("request_id", .text).primaryKey()
            table.column("tag", .text).notNull().indexed()
            table.column("record", .blob).notNull()
            table.column("started_at_ms", .integer).notNull()
        }
    }

    init(_ attempt: JoinAttempt) throws {
        requestID = attempt.requestID
        tag = attempt.invite.tag
        record = try JSONEncoder().encode(attempt)
        startedAtMs = ClientClock.millis(attempt.startedAt)
    }

    func attempt() throws -> JoinAttempt { try JSONDecoder().decode(JoinAttempt.self, from: record) }

    /// Applies an answer to every unfinished attempt with its tag; the state
    /// machine drops what does not fit (wrong sender, already final).
    static func apply(_ joinEvent: JoinEventForStore, at now: Date, _ db: Database) throws {
        for stored in try db.fetchAll(Self.self, cached: "SELECT * FROM join_attempt WHERE tag = ?", [joinEvent.tag]) {
            try apply(joinEvent.event, to: stored.attempt(), at: now, db)
        }
    }

    /// Runs one attempt's state machine on `event`, saving the attempt if
    /// the event moved it.
    @discardableResult
    static func apply(
        _ event: JoinStateMachine.Event, to attempt: JoinAttempt, at now: Date, _ db: Database
    ) throws
        -> JoinAttempt
    {
        var attempt = attempt
        var machine = attempt.machine
        guard machine.apply(event) == nil else { return attempt }
        attempt.adopt(machine.state, at: now)
        try JoinAttemptRecord(attempt).upsert(db)
        return attempt
    }

    /// Inserts the attempt's row, or replaces it.
    func upsert(_ db: Database) throws {
        try db.run(
            cached: """
                INSERT INTO join_attempt (request_id, tag, record, started_at_ms) VALUES (?, ?, ?, ?)
                ON CONFLICT(request_id) DO UPDATE SET tag = excluded.tag, record = excluded.record,
                    started_at_ms = excluded.started_at_ms
                """,
            [requestID, tag, record, startedAtMs])
    }
}

extension LocalStore {
    func saveJoinAttempt(_ attempt: JoinAttempt) throws(LocalStoreError) {
        try write { db in try JoinAttemptRecord(attempt).upsert(db) }
    }

    /// Join attempts, newest first.
    func joinAttempts() throws(LocalStoreError) -> [JoinAttempt] {
        try readStatement { db in
            try db.fetchAll(
                JoinAttemptRecord.self, cached: "SELECT * FROM join_attempt ORDER BY started_at_ms DESC, request_id"
            ).map { try $0.attempt() }
        }
    }

    /// The attempts whose request id starts with `prefix` (a whole id
    /// names one), at most `limit` of them. A lowercase hex prefix is a
    /// range of the primary key, so a wait that looks its attempt up on
    /// every message reads one row, however many joins the home has made.
    func joinAttempts(requestIDPrefix prefix: String, limit: Int) throws(LocalStoreError) -> [JoinAttempt] {
        guard let upper = Self.hexPrefixUpperBound(prefix) else {
            // Anything else (empty, or not hex) matches as it always did.
            return Array(try joinAttempts().filter { $0.requestID.hasPrefix(prefix) }.prefix(limit))
        }
        return try readStatement { db in
            try db.fetchAll(
                JoinAttemptRecord.self,
                cached:
                    "SELECT * FROM join_attempt WHERE request_id >= ? AND request_id < ? ORDER BY request_id LIMIT ?",
                [prefix, upper, limit]
            ).map { try $0.attempt() }
        }
    }

    /// The attempts made with the invite `tag` (through its index).
    func joinAttempts(tag: String) throws(LocalStoreError) -> [JoinAttempt] {
        try readStatement { db in
            try db.fetchAll(
                JoinAttemptRecord.self,
                cached: "SELECT * FROM join_attempt WHERE tag = ? ORDER BY started_at_ms DESC, request_id", [tag]
            ).map { try $0.attempt() }
        }
    }

    /// The least string above every string that starts with `prefix`, for
    /// a nonempty prefix of lowercase hex digits (what request ids are
    /// written in); nil otherwise. The next character after a digit is
    /// still below every longer id with that prefix in byte order.
    static func hexPrefixUpperBound(_ prefix: String) -> String? {
        var bytes = Array(prefix.utf8)
        guard let last = bytes.last,
            bytes.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
        else { return nil }
        bytes[bytes.count - 1] = last + 1
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Applies a local event (sent, cancel) to one attempt and returns it
    /// as it now stands; nil if there is no such attempt.
    func updateJoinAttempt(
        requestID: String, _ event: JoinStateMachine.Event, now: Date
    ) throws(LocalStoreError) -> JoinAttempt? {
        try write { db in
            try db.fetchOne(
                JoinAttemptRecord.self, cached: "SELECT * FROM join_attempt WHERE request_id = ?", [requestID]
            ).map {
                try JoinAttemptRecord.apply(event, to: $0.attempt(), at: now, db)
            }
        }
    }
}
