import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// A stored message, direct or group: the table every conversation reads.
/// `local_order` is the order this home stored them in.
struct MessageRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "message"

    var id: String
    var conversation: String
    var outgoing: Bool
    var sender: String
    var senderName: String
    var sentAtMs: Int64
    var receivedAtMs: Int64
    var topic: String
    var seq: Int64?
    var contentType: String
    var content: Data
    var displayText: String
    var knownType: Bool
    var localOrder: Int64

    enum CodingKeys: String, CodingKey {
        case id, conversation, outgoing, sender, senderName = "sender_name", sentAtMs = "sent_at_ms"
        case receivedAtMs = "received_at_ms", topic, seq, contentType = "content_type", content
        case displayText = "display_text", knownType = "known_type", localOrder = "local_order"
    }

    enum Columns {
        static let conversation = Column(CodingKeys.conversation)
        static let topic = Column(CodingKeys.topic)
        static let localOrder = Column(CodingKeys.localOrder)
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("id", .text).primaryKey()
            table.column("conversation", .text).notNull()
            table.column("outgoing", .boolean).notNull()
            table.column("sender", .text).notNull()
            table.column("sender_name", .text).notNull()
            table.column("sent_at_ms", .integer).notNull()
            table.column("received_at_ms", .integer).notNull()
            table.column("topic", .text).notNull()
            table.column("seq", .integer)
            table.column("content_type", .text).notNull()
            table.column("content", .blob).notNull()
            table.column("display_text", .text).notNull()
            table.column("known_type", .boolean).notNull()
            table.column("local_order", .integer).notNull()
        }
        try db.create(
            index: "message_by_conversation", on: databaseTableName, columns: ["conversation", "local_order"])
    }

    static func indexByPlace(_ db: Database) throws {
        try db.create(index: "message_by_place", on: databaseTableName, columns: ["topic", "seq"])
    }

    init(_ message: StoredMessage, localOrder: Int64) {
        id = message.id
        conversation = message.conversation
        outgoing = message.outgoing
        sender = message.sender.rawValue
        senderName = message.senderName
        sentAtMs = ClientClock.millis(message.sentAt)
        receivedAtMs = ClientClock.millis(message.receivedAt)
        topic = message.topic
        seq = message.seq.map { Int64($0) }
        contentType = message.contentType
        content = message.encodedContent
        displayText = message.displayText
        knownType = message.isKnownType
        self.localOrder = localOrder
    }

    func message() throws -> StoredMessage {
        StoredMessage(
            id: id, conversation: conversation, outgoing: outgoing, sender: try InboxID(validating: sender),
            senderName: senderName, sentAt: Date(milliseconds: sentAtMs),
            receivedAt: Date(milliseconds: receivedAtMs), topic: topic,
            seq: seq.map { UInt64(max(0, $0)) }, contentType: contentType, encodedContent: content,
            displayText: displayText, isKnownType: knownType)
    }

    /// Stores a message after every other; false when its id was stored
    /// already (a duplicate). A duplicate that is this device's own queued
    /// message (no place in its topic yet) takes the place the relay gave
    /// it.
    static func insert(_ message: StoredMessage, _ db: Database) throws -> Bool {
        if let seq = message.seq, Int64(exactly: seq) == nil {
            throw LocalStoreError.corrupt("relay sequence number \(seq) is out of range")
        }
        let last = try db.fetchValue(Int64.self, cached: "SELECT MAX(local_order) FROM message") ?? 0
        let record = MessageRecord(message, localOrder: last + 1)
        try db.run(
            cached: """
                INSERT OR IGNORE INTO message (id, conversation, outgoing, sender, sender_name, sent_at_ms,
                    received_at_ms, topic, seq, content_type, content, display_text, known_type, local_order)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            [
                record.id, record.conversation, record.outgoing, record.sender, record.senderName, record.sentAtMs,
                record.receivedAtMs, record.topic, record.seq, record.contentType, record.content,
                record.displayText, record.knownType, record.localOrder,
            ])
        if db.changesCount > 0 { return true }
        if let seq = message.seq { try place(message.id, at: seq, db) }
        return false
    }

    /// Rewrites every stored welcome as the copy a home now keeps of one.
    /// One that does not decode is left as it is.
    static func keepLessOfWelcomes(_ db: Database) throws {
        let codecs = CodecRegistry.standard
        let rows = try Row.fetchAll(
            db, sql: "SELECT id, content FROM message WHERE content_type = ?",
            arguments: [GroupWelcomeCodec.contentType.description])
        for row in rows {
            let bytes: Data = row["content"]
            guard let content = try? WireEncodedContent(serializedBytes: bytes) else { continue }
            let kept = codecs.keptContent(content, decodedAs: codecs.decode(content).value)
            guard kept != content else { continue }
            try db.execute(
                sql: "UPDATE message SET content = ? WHERE id = ?", arguments: [FrameCodec.encode(kept), row["id"]])
        }
    }

    /// This device's own message gets the place the relay gave it (once).
    static func place(_ messageID: String, at seq: UInt64, _ db: Database) throws {
        try db.run(cached: "UPDATE message SET seq = ? WHERE id = ? AND seq IS NULL", [Int64(seq), messageID])
    }
}

extension LocalStore {
    /// Records that everything on `topic` up to `seq` has been processed,
    /// storing `message` (if any) and applying `joinEvent` (the join answer
    /// it carries) in the same transaction, so a crash can neither skip a
    /// message nor apply it twice. Returns false when the message id was
    /// already stored (a duplicate), or another process on this home
    /// ingested this seq first.
    @discardableResult
    func ingest(
        topic: TopicName, seq: UInt64, message: StoredMessage?, joinEvent: JoinEventForStore? = nil, now: Date
    ) throws(LocalStoreError) -> Bool {
        try Self.checkSeq(seq)
        return try write { db in
            guard try CursorRecord.seq(of: topic, db) < seq else { return false }
            let inserted = try message.map { try MessageRecord.insert($0, db) } ?? false
            if let joinEvent { try JoinAttemptRecord.apply(joinEvent, at: now, db) }
            try CursorRecord.advance(topic, to: seq, db)
            return inserted
        }
    }

    /// Stores a message this client sent.
    @discardableResult
    func saveOutgoing(_ message: StoredMessage) throws(LocalStoreError) -> Bool {
        try write { db in try MessageRecord.insert(message, db) }
    }

    /// Messages in the order this client stored them, optionally of one
    /// conversation, optionally only those after a local position.
    func messages(conversation: String? = nil, afterOrder: Int64 = 0) throws(LocalStoreError) -> [StoredMessage] {
        try read { db in
            var request = MessageRecord.filter(MessageRecord.Columns.localOrder > afterOrder)
            if let conversation { request = request.filter(MessageRecord.Columns.conversation == conversation) }
            return try request.order(MessageRecord.Columns.localOrder).fetchAll(db).map { try $0.message() }
        }
    }

    /// Messages of one content type, oldest first.
    func messages(contentType: String) throws(LocalStoreError) -> [StoredMessage] {
        try read { db in
            try MessageRecord.filter(Column(MessageRecord.CodingKeys.contentType) == contentType)
                .order(MessageRecord.Columns.localOrder).fetchAll(db).map { try $0.message() }
        }
    }

    /// Direct messages only: those that travelled through an inbox. Group
    /// messages live in the same table but belong to their group's view.
    func directMessages(afterOrder: Int64 = 0) throws(LocalStoreError) -> [StoredMessage] {
        try read { db in
            try MessageRecord
                .filter(MessageRecord.Columns.localOrder > afterOrder && MessageRecord.Columns.topic.like("inbox/%"))
                .order(MessageRecord.Columns.localOrder).fetchAll(db).map { try $0.message() }
        }
    }

    /// The stored message with this id, if any.
    func message(id: String) throws(LocalStoreError) -> StoredMessage? {
        try read { db in try MessageRecord.fetchOne(db, key: id).map { try $0.message() } }
    }

    /// The message stored at `seq` of `topic`, if the entry there was one
    /// this home kept.
    func message(topic: String, seq: UInt64) throws(LocalStoreError) -> StoredMessage? {
        guard let place = Int64(exactly: seq) else { return nil }
        return try read { db in
            try MessageRecord.fetchOne(
                db, sql: "SELECT * FROM message WHERE topic = ? AND seq = ?", arguments: [topic, place]
            ).map { try $0.message() }
        }
    }

    func messageCount() throws(LocalStoreError) -> Int {
        try read { db in try MessageRecord.fetchCount(db) }
    }
}
