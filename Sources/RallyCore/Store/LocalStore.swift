import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// A client's local database (`<home>/rally.sqlite`): its identity, the
/// key bundles it has verified, per-topic cursors and received messages.
/// Several users on one machine use several homes.
public final class LocalStore: Sendable {
    public static let fileName = "rally.sqlite"

    // GRDB's DatabaseQueue serializes all access itself and is Sendable.
    private let queue: DatabaseQueue
    public let home: URL

    public init(home: URL) throws(LocalStoreError) {
        self.home = home
        do {
            try FileManager.default.createDirectory(
                at: home, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            var configuration = Configuration()
            configuration.prepareDatabase { db in
                try db.execute(sql: "PRAGMA journal_mode = WAL")
            }
            let path = home.appendingPathComponent(Self.fileName).path
            queue = try DatabaseQueue(path: path, configuration: configuration)
            // The file holds private keys: owner-only.
            try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
            try Self.migrator.migrate(queue)
        } catch {
            throw .unavailable(path: home.path, reason: "\(error)")
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "identity") { table in
                table.column("id", .integer).primaryKey().check { $0 == 1 }
                table.column("display_name", .text).notNull()
                table.column("signing_key", .blob).notNull()
                table.column("agreement_key", .blob).notNull()
                table.column("created_at_ms", .integer).notNull()
            }
            try db.create(table: "contact") { table in
                table.column("inbox_id", .text).primaryKey()
                table.column("display_name", .text).notNull()
                table.column("signing_key", .blob).notNull()
                table.column("agreement_key", .blob).notNull()
                table.column("created_at_ms", .integer).notNull()
            }
            try db.create(table: "cursor") { table in
                table.column("topic", .text).primaryKey()
                table.column("seq", .integer).notNull()
            }
            try db.create(table: "message") { table in
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
            try db.create(index: "message_by_conversation", on: "message", columns: ["conversation", "local_order"])
        }
        registerGroupMigrations(&migrator)
        registerInviteMigrations(&migrator)
        return migrator
    }

    // MARK: Identity

    public func loadIdentity() throws(LocalStoreError) -> Identity? {
        let row = try read { db in try Row.fetchOne(db, sql: "SELECT * FROM identity WHERE id = 1") }
        guard let row else { return nil }
        do {
            return try Identity(
                signingKeyBytes: row["signing_key"], agreementKeyBytes: row["agreement_key"],
                displayName: row["display_name"],
                createdAt: Date(timeIntervalSince1970: Double(row["created_at_ms"] as Int64) / 1000))
        } catch {
            throw .corrupt("stored identity: \(error)")
        }
    }

    public func saveIdentity(_ identity: Identity) throws(LocalStoreError) {
        try write { db in
            if try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM identity") ?? 0 > 0 {
                throw LocalStoreError.identityExists(home.path)
            }
            try db.execute(
                sql: """
                    INSERT INTO identity (id, display_name, signing_key, agreement_key, created_at_ms)
                    VALUES (1, ?, ?, ?, ?)
                    """,
                arguments: [
                    identity.displayName, identity.signingKey.rawRepresentation,
                    identity.agreementKey.rawRepresentation, Self.millis(identity.createdAt),
                ])
        }
    }

    // MARK: Contacts (verified key bundles)

    public func contact(_ inbox: InboxID) throws(LocalStoreError) -> PublicIdentity? {
        let row = try read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM contact WHERE inbox_id = ?", arguments: [inbox.rawValue])
        }
        guard let row else { return nil }
        var bundle = WireKeyBundle()
        bundle.signingPublicKey = row["signing_key"]
        bundle.agreementPublicKey = row["agreement_key"]
        bundle.displayName = row["display_name"]
        bundle.createdAtMs = row["created_at_ms"]
        do {
            return try PublicIdentity(wire: bundle)
        } catch {
            throw .corrupt("stored contact \(inbox): \(error)")
        }
    }

    public func saveContact(_ identity: PublicIdentity) throws(LocalStoreError) {
        try write { db in
            try db.execute(
                sql: """
                    INSERT INTO contact (inbox_id, display_name, signing_key, agreement_key, created_at_ms)
                    VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(inbox_id) DO UPDATE SET display_name = excluded.display_name,
                        agreement_key = excluded.agreement_key, created_at_ms = excluded.created_at_ms
                    WHERE excluded.created_at_ms >= contact.created_at_ms
                    """,
                arguments: [
                    identity.inboxID.rawValue, identity.displayName, identity.signingKey.rawRepresentation,
                    identity.agreementKey.rawRepresentation, Self.millis(identity.createdAt),
                ])
        }
    }

    // MARK: Cursors and messages

    public func cursor(for topic: TopicName) throws(LocalStoreError) -> UInt64 {
        let seq = try read { db in
            try Int64.fetchOne(db, sql: "SELECT seq FROM cursor WHERE topic = ?", arguments: [topic.rawValue])
        }
        return UInt64(max(0, seq ?? 0))
    }

    /// Records that everything on `topic` up to `seq` has been processed,
    /// storing `message` (if any) in the same transaction, so a crash can
    /// neither skip a message nor apply it twice. Returns false when the
    /// message id was already stored (a duplicate).
    @discardableResult
    public func ingest(
        topic: TopicName, seq: UInt64, message: StoredMessage?, joinEvent: JoinEventForStore? = nil
    ) throws(LocalStoreError) -> Bool {
        try Self.checkSeq(seq)
        if let messageSeq = message?.seq { try Self.checkSeq(messageSeq) }
        return try write { db in
            var inserted = false
            if let message {
                inserted = try Self.insert(message, db: db)
            }
            // A join answer moves the join attempt in the same transaction
            // as the cursor, so a crash cannot lose it.
            if let joinEvent { try Self.applyJoinEvent(joinEvent, db: db) }
            try db.execute(
                sql: """
                    INSERT INTO cursor (topic, seq) VALUES (?, ?)
                    ON CONFLICT(topic) DO UPDATE SET seq = MAX(seq, excluded.seq)
                    """,
                arguments: [topic.rawValue, Int64(seq)])
            return inserted
        }
    }

    /// Stores a message this client sent.
    @discardableResult
    public func saveOutgoing(_ message: StoredMessage) throws(LocalStoreError) -> Bool {
        if let seq = message.seq { try Self.checkSeq(seq) }
        return try write { db in try Self.insert(message, db: db) }
    }

    /// SQLite integers are signed 64-bit; a relay seq beyond that is not
    /// one a real relay produces and is refused rather than trapping.
    static func checkSeq(_ seq: UInt64) throws(LocalStoreError) {
        guard Int64(exactly: seq) != nil else { throw .corrupt("relay sequence number \(seq) is out of range") }
    }

    static func insert(_ message: StoredMessage, db: Database) throws -> Bool {
        let nextOrder = (try Int64.fetchOne(db, sql: "SELECT MAX(local_order) FROM message") ?? 0) + 1
        try db.execute(
            sql: """
                INSERT OR IGNORE INTO message (id, conversation, outgoing, sender, sender_name, sent_at_ms,
                    received_at_ms, topic, seq, content_type, content, display_text, known_type, local_order)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                message.id, message.conversation, message.outgoing, message.sender.rawValue, message.senderName,
                millis(message.sentAt), millis(message.receivedAt), message.topic, message.seq.map { Int64($0) },
                message.contentType, message.encodedContent, message.displayText, message.isKnownType, nextOrder,
            ])
        return db.changesCount > 0
    }

    /// Messages in the order this client stored them, optionally of one
    /// conversation, optionally only those after a local position.
    public func messages(
        conversation: String? = nil, afterOrder: Int64 = 0
    ) throws(LocalStoreError)
        -> [StoredMessage]
    {
        try read { db in
            var sql = "SELECT * FROM message WHERE local_order > ?"
            var arguments: StatementArguments = [afterOrder]
            if let conversation {
                sql += " AND conversation = ?"
                arguments += [conversation]
            }
            sql += " ORDER BY local_order"
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map(StoredMessage.init(row:))
        }
    }

    public func messageCount() throws(LocalStoreError) -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM message") ?? 0 }
    }

    // MARK: Plumbing

    func read<T>(_ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        do {
            return try queue.read(body)
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    func write<T>(_ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        do {
            return try queue.write(body)
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    static func millis(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
}

public enum LocalStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    case unavailable(path: String, reason: String)
    case identityExists(String)
    case corrupt(String)
    case failed(String)

    public var description: String {
        switch self {
        case .unavailable(let path, let reason): "cannot open the local store in \(path): \(reason)"
        case .identityExists(let path): "\(path) already holds an identity; use another --home"
        case .corrupt(let what): "local store is corrupt: \(what)"
        case .failed(let reason): "local store error: \(reason)"
        }
    }
}
