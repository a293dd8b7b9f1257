import Foundation
import GRDB
import RallyWire

/// A publish waiting for the relay: written in the same transaction as the
/// message it carries, so a message typed while offline survives a crash
/// or a restart, and removed once the relay acknowledged it. The row order
/// is the send order; the idempotency key makes a resend after a lost ack
/// harmless.
struct OutboxRecord: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    static let databaseTableName = "outbox"

    var position: Int64?
    var messageID: String
    var topic: String
    var payload: Data
    var idempotencyKey: Data
    var shouldPush: Bool
    var queuedAtMs: Int64
    var attempts: Int64
    var lastError: String?
    /// Set when the relay refused the publish for good (not a transient
    /// failure): the message stays here, marked, and is not sent again.
    var failedReason: String?
    /// A group message waits as its encoded content, sealed when it is
    /// sent (under the group's epoch and transcript at that time); nil for
    /// a direct message, whose payload is sealed already.
    var groupID: String?

    enum CodingKeys: String, CodingKey {
        case position, messageID = "message_id", topic, payload, idempotencyKey = "idempotency_key"
        case shouldPush = "should_push", queuedAtMs = "queued_at_ms", attempts, lastError = "last_error"
        case failedReason = "failed_reason", groupID = "group_id"
    }

    enum Columns {
        static let position = Column(CodingKeys.position)
        static let failedReason = Column(CodingKeys.failedReason)
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.autoIncrementedPrimaryKey("position")
            table.column("message_id", .text).notNull().unique()
            table.column("topic", .text).notNull()
            table.column("payload", .blob).notNull()
            table.column("idempotency_key", .blob).notNull()
            table.column("should_push", .boolean).notNull()
            table.column("queued_at_ms", .integer).notNull()
            table.column("attempts", .integer).notNull()
            table.column("last_error", .text)
            table.column("failed_reason", .text)
            table.column("group_id", .text)
        }
    }

    /// Queues this publish; nothing if its message is queued already.
    func insertUnlessQueued(_ db: Database) throws {
        try db.run(
            cached: """
                INSERT OR IGNORE INTO outbox (position, message_id, topic, payload, idempotency_key, should_push,
                    queued_at_ms, attempts, last_error, failed_reason, group_id)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            [
                position, messageID, topic, payload, idempotencyKey, shouldPush, queuedAtMs, attempts, lastError,
                failedReason, groupID,
            ])
    }
}

/// An outgoing message the relay refused for good.
public struct OutgoingFailure: Sendable, Equatable, Codable {
    public var messageID: String
    public var reason: String
}

/// How many outgoing messages wait, and how many the relay refused.
public struct OutboxCounts: Sendable, Equatable, Codable {
    public var queued: Int
    public var failed: Int
}

extension LocalStore {
    /// Stores an outgoing message (when `message` is given) and queues its
    /// publish, in one transaction.
    func queueOutgoing(_ message: StoredMessage?, _ item: OutboxRecord) throws(LocalStoreError) {
        try queueOutgoing([(message, item)])
    }

    /// Several outgoing messages queued in one transaction (a round of
    /// welcomes).
    func queueOutgoing(_ queued: [(message: StoredMessage?, item: OutboxRecord)]) throws(LocalStoreError) {
        try write { db in
            for (message, item) in queued {
                if let message { _ = try MessageRecord.insert(message, db) }
                try item.insertUnlessQueued(db)
            }
        }
    }

    /// The publishes still to send, oldest first.
    func queuedOutgoing() throws(LocalStoreError) -> [OutboxRecord] {
        try readStatement { db in
            try db.fetchAll(
                OutboxRecord.self, cached: "SELECT * FROM outbox WHERE failed_reason IS NULL ORDER BY position")
        }
    }

    /// The relay acknowledged `item` at `seq`: it leaves the queue and its
    /// message gets its place in the topic.
    func outgoingSent(_ item: OutboxRecord, seq: UInt64) throws(LocalStoreError) {
        try outgoingSent([(item, seq)])
    }

    /// Several acknowledged items in one transaction: a flush that sent
    /// many side by side records them with one commit.
    func outgoingSent(_ sent: [(item: OutboxRecord, seq: UInt64)]) throws(LocalStoreError) {
        guard !sent.isEmpty else { return }
        try write { db in
            for (item, seq) in sent {
                try db.run(cached: "DELETE FROM outbox WHERE message_id = ?", [item.messageID])
                try MessageRecord.place(item.messageID, at: seq, db)
            }
        }
    }

    /// A transient failure: the item stays queued, with the reason.
    func outgoingDeferred(_ item: OutboxRecord, reason: String) throws(LocalStoreError) {
        try write { db in
            try db.execute(
                sql: "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE message_id = ?",
                arguments: [reason, item.messageID])
        }
    }

    /// The relay refused `item` for good.
    func outgoingFailed(_ item: OutboxRecord, reason: String) throws(LocalStoreError) {
        try write { db in
            try db.execute(
                sql: "UPDATE outbox SET attempts = attempts + 1, failed_reason = ? WHERE message_id = ?",
                arguments: [reason, item.messageID])
        }
    }

    func outboxCounts() throws(LocalStoreError) -> OutboxCounts {
        try read { db in
            OutboxCounts(
                queued: try OutboxRecord.filter(OutboxRecord.Columns.failedReason == nil).fetchCount(db),
                failed: try OutboxRecord.filter(OutboxRecord.Columns.failedReason != nil).fetchCount(db))
        }
    }

    func failedOutgoing() throws(LocalStoreError) -> [OutgoingFailure] {
        try read { db in
            try OutboxRecord.filter(OutboxRecord.Columns.failedReason != nil)
                .order(OutboxRecord.Columns.position).fetchAll(db)
                .map { OutgoingFailure(messageID: $0.messageID, reason: $0.failedReason ?? "") }
        }
    }

    /// The failure recorded for a message's publish, if it failed for good.
    func outgoingFailure(messageID: String) throws(LocalStoreError) -> String? {
        try read { db in
            try String.fetchOne(
                db, sql: "SELECT failed_reason FROM outbox WHERE message_id = ?", arguments: [messageID])
        }
    }
}
