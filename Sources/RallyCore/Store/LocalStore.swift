import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// A client's local database (`<home>/rally.sqlite`): its identity, the
/// key bundles it has verified, per-topic cursors and received messages.
/// Several users on one machine use several homes.
///
/// Keys at rest: the home is a directory only its owner can open (0700; a
/// laxer one is tightened, one owned by someone else is refused) and every
/// file in it is owner-only (0600) whatever the umask: the database file is
/// created 0600 before SQLite opens it, and SQLite gives its `-wal` and
/// `-shm` files the database file's mode. Secret keys go through
/// ``secrets`` (see ``SecretStore``).
///
/// Several processes may use one home at once (`rally watch` and other
/// commands): the database runs in WAL mode with a busy timeout, every
/// write is one `BEGIN IMMEDIATE` transaction that is retried while another
/// process holds the lock, cursors only move forward, and ingesting an
/// envelope some other process already ingested changes nothing.
public final class LocalStore: Sendable {
    public static let fileName = "rally.sqlite"

    /// How long a statement waits for another process's lock before
    /// SQLite reports `SQLITE_BUSY`.
    static let busyTimeout: TimeInterval = 10
    /// How often a transaction that still met `SQLITE_BUSY` is run again.
    static let busyRetries = 20

    // GRDB's DatabaseQueue serializes all access itself and is Sendable.
    private let queue: DatabaseQueue
    public let home: URL
    /// Where the identity's private keys, epoch keys and invite seeds are
    /// kept: by default a table of this owner-only database.
    public let secrets: any SecretStore

    /// Opens (creating if needed) the store in `home`. Secret keys go to
    /// `secrets`, or, without one, to the home's owner-only database.
    public init(home: URL, secrets: (any SecretStore)? = nil) throws(LocalStoreError) {
        self.home = home
        do {
            try OwnerOnly.prepareDirectory(home)
            let path = home.appendingPathComponent(Self.fileName).path
            // Created owner-only before SQLite opens it: SQLite creates the
            // -wal and -shm files with the database file's mode.
            try OwnerOnly.createFile(path)
            var configuration = Configuration()
            configuration.journalMode = .wal
            configuration.busyMode = .timeout(Self.busyTimeout)
            let opened = try Self.retryingBusy { try DatabaseQueue(path: path, configuration: configuration) }
            try Self.retryingBusy { try Self.migrator.migrate(opened) }
            queue = opened
            // Files left by older versions or written laxly: owner-only.
            try OwnerOnly.tightenFiles(in: home, database: Self.fileName)
        } catch LocalStoreError.unavailable(let path, let reason) where path != home.path {
            throw .unavailable(path: home.path, reason: "\(path): \(reason)")
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .unavailable(path: home.path, reason: "\(error)")
        }
        let own = DatabaseSecretStore(queue: queue)
        self.secrets = secrets ?? own
        if secrets != nil { try Self.handOverSecrets(from: own, queue: queue, to: self.secrets) }
    }

    /// Moves the secrets a home kept in its database to the store the
    /// caller chose, then deletes them from the database.
    private static func handOverSecrets(
        from own: DatabaseSecretStore, queue: DatabaseQueue, to target: any SecretStore
    ) throws(LocalStoreError) {
        let names = try read(queue) { db in try String.fetchAll(db, sql: "SELECT name FROM secret") }
        for raw in names {
            let name = SecretName(rawValue: raw)
            do {
                guard let value = try own.secret(named: name) else { continue }
                try target.setSecret(value, named: name)
                try own.removeSecret(named: name)
            } catch {
                throw .failed("cannot move secret \(name) to the secret store: \(error)")
            }
        }
    }

    static var migrator: DatabaseMigrator {
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
        migrator.registerMigration("v4-secrets") { db in
            // Secret keys move to the secret store (by default this table);
            // the tables that held them keep only which ones exist.
            try db.create(table: "secret") { table in
                table.column("name", .text).primaryKey()
                table.column("value", .blob).notNull()
            }
            try db.alter(table: "identity") { table in table.add(column: "inbox_id", .text) }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM identity") {
                let identity = try Identity(
                    signingKeyBytes: row["signing_key"], agreementKeyBytes: row["agreement_key"],
                    displayName: row["display_name"], createdAt: Date())
                let inbox = identity.inboxID.rawValue
                try DatabaseSecretStore.set(row["signing_key"], named: .identitySigningKey(inbox), db: db)
                try DatabaseSecretStore.set(row["agreement_key"], named: .identityAgreementKey(inbox), db: db)
                try db.execute(
                    sql: "UPDATE identity SET inbox_id = ?, signing_key = x'', agreement_key = x''",
                    arguments: [inbox])
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM epoch_key") {
                let epoch: Int64 = row["epoch"]
                try DatabaseSecretStore.set(
                    row["key"], named: .epochKey(group: row["group_id"], epoch: UInt64(max(0, epoch))), db: db)
            }
            try db.execute(sql: "UPDATE epoch_key SET key = x''")
            for row in try Row.fetchAll(db, sql: "SELECT * FROM invite_seed") {
                try DatabaseSecretStore.set(row["seed"], named: .inviteSeed(group: row["group_id"]), db: db)
            }
            try db.execute(sql: "UPDATE invite_seed SET seed = x''")
        }
        return migrator
    }

    // MARK: Identity

    public func loadIdentity() throws(LocalStoreError) -> Identity? {
        let row = try read { db in try Row.fetchOne(db, sql: "SELECT * FROM identity WHERE id = 1") }
        guard let row else { return nil }
        let inbox: String = row["inbox_id"] ?? ""
        let signing = try secret(.identitySigningKey(inbox))
        let agreement = try secret(.identityAgreementKey(inbox))
        guard let signing, let agreement else {
            throw .corrupt("the private keys of identity \(inbox) are not in the secret store")
        }
        let identity: Identity
        do {
            identity = try Identity(
                signingKeyBytes: signing, agreementKeyBytes: agreement, displayName: row["display_name"],
                createdAt: Date(timeIntervalSince1970: Double(row["created_at_ms"] as Int64) / 1000))
        } catch {
            throw .corrupt("stored identity: \(error)")
        }
        guard identity.inboxID.rawValue == inbox else {
            throw .corrupt("the stored private keys belong to \(identity.inboxID), not to \(inbox)")
        }
        return identity
    }

    /// Stores this home's identity: its private keys in the secret store
    /// (under names that carry its inbox id, so a second identity racing
    /// for the same home cannot overwrite them), the rest in the database.
    public func saveIdentity(_ identity: Identity) throws(LocalStoreError) {
        if try read({ db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM identity") ?? 0 }) > 0 {
            throw .identityExists(home.path)
        }
        let inbox = identity.inboxID.rawValue
        try setSecret(identity.signingKey.rawRepresentation, .identitySigningKey(inbox))
        try setSecret(identity.agreementKey.rawRepresentation, .identityAgreementKey(inbox))
        try write { db in
            if try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM identity") ?? 0 > 0 {
                throw LocalStoreError.identityExists(home.path)
            }
            try db.execute(
                sql: """
                    INSERT INTO identity (id, display_name, signing_key, agreement_key, created_at_ms, inbox_id)
                    VALUES (1, ?, x'', x'', ?, ?)
                    """,
                arguments: [identity.displayName, Self.millis(identity.createdAt), inbox])
        }
    }

    // MARK: Secrets

    func secret(_ name: SecretName) throws(LocalStoreError) -> Data? {
        do {
            return try secrets.secret(named: name)
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .failed("secret store: cannot read \(name): \(error)")
        }
    }

    func setSecret(_ value: Data, _ name: SecretName) throws(LocalStoreError) {
        do {
            try secrets.setSecret(value, named: name)
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .failed("secret store: cannot write \(name): \(error)")
        }
    }

    func removeSecret(_ name: SecretName) throws(LocalStoreError) {
        do {
            try secrets.removeSecret(named: name)
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .failed("secret store: cannot delete \(name): \(error)")
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
        try read { db in try Self.cursor(topic, db: db) }
    }

    static func cursor(_ topic: TopicName, db: Database) throws -> UInt64 {
        let seq = try Int64.fetchOne(db, sql: "SELECT seq FROM cursor WHERE topic = ?", arguments: [topic.rawValue])
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
            // Another process on this home may have ingested it already.
            guard try Self.cursor(topic, db: db) < seq else { return false }
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

    /// The stored message with this id, if any.
    public func message(id: String) throws(LocalStoreError) -> StoredMessage? {
        try read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM message WHERE id = ?", arguments: [id]).map(
                StoredMessage.init(row:))
        }
    }

    public func messageCount() throws(LocalStoreError) -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM message") ?? 0 }
    }

    // MARK: Plumbing

    func read<T>(_ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        try Self.read(queue, body)
    }

    /// Runs `body` in one write transaction (see ``write(_:_:)``).
    func write<T>(_ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        try Self.write(queue, body)
    }

    static func read<T>(_ queue: DatabaseQueue, _ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        do {
            return try retryingBusy { try queue.read(body) }
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    /// Runs `body` in a `BEGIN IMMEDIATE` transaction: it takes the write
    /// lock before reading, so what it reads cannot change under it in
    /// another process before it commits. A transaction that still meets
    /// `SQLITE_BUSY` after the busy timeout is rolled back and run again.
    static func write<T>(_ queue: DatabaseQueue, _ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        do {
            return try retryingBusy {
                try queue.writeWithoutTransaction { db in
                    var result: T?
                    try db.inTransaction(.immediate) {
                        result = try body(db)
                        return .commit
                    }
                    // inTransaction returned without throwing: body ran.
                    return result!
                }
            }
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    /// Runs `operation` again while SQLite answers `SQLITE_BUSY` (another
    /// process holds the lock longer than the busy timeout, or a snapshot
    /// went stale), a bounded number of times.
    static func retryingBusy<T>(_ operation: () throws -> T) throws -> T {
        var attempt = 0
        while true {
            do {
                return try operation()
            } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY && attempt < busyRetries {
                attempt += 1
                // A short, growing pause lets the other process finish.
                Thread.sleep(forTimeInterval: 0.005 * Double(min(attempt, 10)))
            }
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
