import Foundation
import GRDB
import RallyWire

/// How far this home has processed a topic: the seq of the last envelope
/// stored. Cursors only move forward, so two processes on one home never
/// move one back.
struct CursorRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "cursor"

    var topic: String
    var seq: Int64

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("topic", .text).primaryKey()
            table.column("seq", .integer).notNull()
        }
    }

    static func seq(of topic: TopicName, _ db: Database) throws -> UInt64 {
        UInt64(
            max(
                0,
                try db.fetchValue(Int64.self, cached: "SELECT seq FROM cursor WHERE topic = ?", [topic.rawValue]) ?? 0)
        )
    }

    /// Moves the cursor to `seq` unless it is already past it: one
    /// statement, on the hot path of every envelope.
    static func advance(_ topic: TopicName, to seq: UInt64, _ db: Database) throws {
        try db.run(
            cached: """
                INSERT INTO cursor (topic, seq) VALUES (?, ?)
                ON CONFLICT(topic) DO UPDATE SET seq = MAX(seq, excluded.seq)
                """,
            [topic.rawValue, Int64(seq)])
    }
}

extension LocalStore {
    /// The seq up to which this home has processed `topic` (0: nothing).
    func cursor(for topic: TopicName) throws(LocalStoreError) -> UInt64 {
        try readStatement { db in try CursorRecord.seq(of: topic, db) }
    }
}
