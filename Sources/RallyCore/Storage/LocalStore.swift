import CRallySQLite
import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// A client's local database (`<home>/rally.sqlite`): one SQLite file with
/// one migrator. Each table belongs to a GRDB record in the folder of the
/// capability that uses it (`MessageRecord` in DirectMessages,
/// `GroupInfoRecord` in Groups, …); this type only opens the database,
/// runs the migrator and the transactions, and reaches the secret store.
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
final class LocalStore: Sendable {
    static let fileName = "rally.sqlite"

    /// How long a statement waits for another process's lock before
    /// SQLite reports `SQLITE_BUSY`.
    static let busyTimeout: TimeInterval = 10
    /// How often a transaction that still met `SQLITE_BUSY` is run again.
    static let busyRetries = 20

    // GRDB's pool serializes writes on its one writer and is Sendable.
    let queue: DatabasePool
    let home: URL
    /// Where the identity's private keys, epoch keys and invite seeds are
    /// kept: by default a table of this owner-only database.
    let secrets: any SecretStore
    /// Whether `secrets` is this database's own table, which a write can
    /// fill in its own transaction.
    var secretsInDatabase: Bool { secrets is DatabaseSecretStore }
    /// Group states decoded from this database, reused while their stored
    /// bytes stay the same.
    let groupStates = GroupStateCache()

    /// Opens (creating if needed) the store in `home`. Secret keys go to
    /// `secrets`, or, without one, to the home's owner-only database.
    init(home: URL, secrets: (any SecretStore)? = nil) throws(LocalStoreError) {
        self.home = home
        do {
            try OwnerOnly.prepareDirectory(home)
            let path = home.appendingPathComponent(Self.fileName).path
            // Created owner-only before SQLite opens it: SQLite creates the
            // -wal and -shm files with the database file's mode.
            try OwnerOnly.createFile(path)
            // Before the process's first connection, or not at all: a home
            // compiles and runs statements on several threads, and with the
            // statistics on each allocation waits on one mutex (ADR 0042).
            _ = rally_sqlite_disable_memory_statistics()
            var configuration = Configuration()
            configuration.journalMode = .wal
            configuration.busyMode = .timeout(Self.busyTimeout)
            let opened = try Self.retryingBusy { try DatabasePool(path: path, configuration: configuration) }
            let migrator = Self.migrator
            // Asked on the writer, which migrating opens anyway: a read
            // would open a reader connection at start-up for this alone.
            let migrated = try Self.retryingBusy {
                try !opened.writeWithoutTransaction(migrator.hasCompletedMigrations)
            }
            try Self.retryingBusy { try migrator.migrate(opened) }
            // A new (or upgraded) home's schema fills hundreds of KiB of
            // WAL. Copied into the database now, the next transactions
            // (a fresh home's first join) start the WAL over in blocks the
            // file already has, instead of growing it: on ext4 each new
            // block a write lands in is allocated and zeroed, which cost a
            // join's first welcome up to a quarter of its CPU (ADR 0044).
            if migrated {
                try Self.retryingBusy { _ = try opened.writeWithoutTransaction { try $0.checkpoint(.passive) } }
            }
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
        from own: DatabaseSecretStore, queue: DatabasePool, to target: any SecretStore
    ) throws(LocalStoreError) {
        let names = try read(queue) { db in try SecretRecord.names(db) }
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

    /// The home's one migrator. Each table is defined by the record that
    /// owns it; the migrations keep the names and order earlier versions
    /// applied, so any home, however old, ends in the same schema.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try IdentityRecord.createTable(db)
            try ContactRecord.createTable(db)
            try CursorRecord.createTable(db)
            try MessageRecord.createTable(db)
        }
        migrator.registerMigration("v2-groups") { db in
            try GroupInfoRecord.createTable(db)
            try EpochKeyRecord.createTable(db)
        }
        migrator.registerMigration("v4-untrusted-relay") { db in
            try GroupInfoRecord.addChainColumns(db)
            try OwnCommitRecord.createTable(db)
        }
        migrator.registerMigration("v3-invites") { db in
            try InviteSeedRecord.createTable(db)
            try JoinAttemptRecord.createTable(db)
            try JoinRequestSeenRecord.createTable(db)
            // Blocks were global until v4-blocks-per-group dropped this table.
            try db.create(table: "blocked_inbox") { table in
                table.column("inbox_id", .text).primaryKey()
                table.column("reason", .text).notNull()
                table.column("at_ms", .integer).notNull()
            }
        }
        migrator.registerMigration("v4-blocks-per-group") { db in
            // A block now holds for one group's join requests and can be lifted.
            try BlockedJoinSenderRecord.createTable(db)
            try db.drop(table: "blocked_inbox")
            try RetiredInviteSeedRecord.createTable(db)
        }
        migrator.registerMigration("v4-secrets") { db in
            // Secret keys move to the secret store (by default this table);
            // the tables that held them keep only which ones exist.
            try SecretRecord.createTable(db)
            try IdentityRecord.moveKeysToSecrets(db)
            try EpochKeyRecord.moveKeysToSecrets(db)
            try InviteSeedRecord.moveSeedsToSecrets(db)
        }
        migrator.registerMigration("v5-outbox") { db in
            try OutboxRecord.createTable(db)
        }
        migrator.registerMigration("v6-vaults") { db in
            try VaultRecord.createTable(db)
            try VaultDocumentRecord.createTable(db)
        }
        migrator.registerMigration("v7-nominees") { db in
            try VaultRecord.addEpochStartSeq(db)
            try NomineeRecord.createTable(db)
            try VaultInvitationRecord.createTable(db)
            try NomineeEventRecord.createTable(db)
        }
        migrator.registerMigration("v8-emergency-access") { db in
            try NomineeRecord.addEmergencyAccess(db)
            try VaultInvitationRecord.addEmergencyAccess(db)
        }
        migrator.registerMigration("v9-timed-messages") { db in
            // When each timed group message disappears (docs/adr/0017).
            try db.create(table: "message_expiry") { table in
                table.primaryKey("id", .text)
                table.column("expires_at_ms", .integer).notNull().indexed()
            }
        }
        migrator.registerMigration("v10-call-rooms") { db in
            try CallRoomRecord.createTable(db)
        }
        migrator.registerMigration("v11-welcome-copies") { db in
            // Stored welcomes kept the group's keys and whole state; they
            // keep what they show (GroupWelcomeCodec.keptCopy).
            try MessageRecord.keepLessOfWelcomes(db)
        }
        migrator.registerMigration("v12-message-by-place") { db in
            // A follower finds the message another process on this home
            // stored at a place in a topic (docs/adr/0026).
            try MessageRecord.indexByPlace(db)
        }
        return migrator
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

    func setSecrets(_ secrets: [(name: SecretName, secret: Data)]) throws(LocalStoreError) {
        do {
            try self.secrets.setSecrets(secrets)
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .failed("secret store: cannot write \(secrets.map(\.name)): \(error)")
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

    /// SQLite integers are signed 64-bit; a relay seq beyond that is not
    /// one a real relay produces and is refused rather than trapping.
    static func checkSeq(_ seq: UInt64) throws(LocalStoreError) {
        guard Int64(exactly: seq) != nil else { throw .corrupt("relay sequence number \(seq) is out of range") }
    }

    // MARK: Plumbing

    func read<T>(_ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        try Self.read(queue, body)
    }

    /// Runs `body`, which must run exactly one statement, outside any
    /// transaction (see ``readStatement(_:_:)``).
    func readStatement<T>(_ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        try Self.readStatement(queue, body)
    }

    /// Runs `body` in one write transaction (see ``write(_:_:)``).
    func write<T>(_ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        try Self.write(queue, body)
    }

    /// Stores secrets that arrived in a relay message, with the records
    /// `body` writes, which must include that message's cursor. Kept in
    /// this database, they go into `body`'s transaction with `NORMAL` sync:
    /// a power loss that drops it drops the cursor too, so the message
    /// (still at the relay) is read again and brings them back, as it does
    /// every other record. A secret this home makes is another matter: it
    /// exists nowhere else, and `setSecret` writes it with `FULL`. Secrets
    /// kept elsewhere (a Keychain) are written there first, so a crash in
    /// between leaves unused keys, never records without their keys.
    func write<T>(
        storingReceived secrets: [(name: SecretName, secret: Data)], _ body: (Database) throws -> T
    ) throws(LocalStoreError) -> T {
        guard secretsInDatabase else {
            try setSecrets(secrets)
            return try write(body)
        }
        return try Self.write(queue) { db in
            for (name, secret) in secrets { try SecretRecord.set(secret, named: name, db: db) }
            return try body(db)
        }
    }

    /// Runs `body` in one read transaction: every statement in it sees the
    /// same committed state, whatever other connections commit meanwhile.
    static func read<T>(_ queue: DatabasePool, _ body: (Database) throws -> T) throws(LocalStoreError) -> T {
        try storeErrors { try retryingBusy { try queue.read(body) } }
    }

    /// For a body of one statement: SQLite runs a statement on its own in
    /// a read transaction of its own, so it sees one committed state
    /// without a `BEGIN` and `COMMIT` around it. GRDB prepares those two
    /// anew for every transaction; a join made about a dozen such reads
    /// (docs/adr/0019). A body of two statements or more needs ``read(_:_:)``:
    /// here a commit between them would be seen by the second only.
    static func readStatement<T>(
        _ queue: DatabasePool, _ body: (Database) throws -> T
    ) throws(LocalStoreError) -> T {
        try storeErrors { try retryingBusy { try queue.unsafeRead(body) } }
    }

    /// A read's errors as the store's: its own pass through, GRDB's become
    /// `failed`.
    private static func storeErrors<T>(_ work: () throws -> T) throws(LocalStoreError) -> T {
        do {
            return try work()
        } catch let error as LocalStoreError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    /// How a write transaction reaches the disk.
    enum Sync {
        /// SQLite's `NORMAL` in WAL mode (GRDB's setting for a pool): the
        /// commit survives the process crashing, and a power loss keeps the
        /// commits in order, but may drop the last ones.
        case normal
        /// `FULL`: the commit returns after the write-ahead log is
        /// fsynced. For secrets, which must be durable before a commit that
        /// needs them goes to the relay (``SecretStore``).
        case full
    }

    /// Runs `body` in a `BEGIN IMMEDIATE` transaction: it takes the write
    /// lock before reading, so what it reads cannot change under it in
    /// another process before it commits. A transaction that still meets
    /// `SQLITE_BUSY` after the busy timeout is rolled back and run again.
    static func write<T>(
        _ queue: DatabasePool, sync: Sync = .normal, _ body: (Database) throws -> T
    ) throws(LocalStoreError) -> T {
        do {
            return try retryingBusy {
                try queue.writeWithoutTransaction { db in
                    // A connection setting, changed only between transactions;
                    // the pool's one writer runs one write at a time.
                    if sync == .full { try db.run(cached: "PRAGMA synchronous = FULL") }
                    defer { if sync == .full { try? db.run(cached: "PRAGMA synchronous = NORMAL") } }
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
