import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// The home's one identity. Its private keys live in the secret store
/// under names that carry its inbox id; the row keeps the rest.
struct IdentityRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "identity"

    var id: Int64 = 1
    var displayName: String
    /// Empty since v4-secrets (the keys are in the secret store).
    var signingKey = Data()
    var agreementKey = Data()
    var createdAtMs: Int64
    var inboxID: String?

    enum CodingKeys: String, CodingKey {
        case id, displayName = "display_name", signingKey = "signing_key", agreementKey = "agreement_key"
        case createdAtMs = "created_at_ms", inboxID = "inbox_id"
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("id", .integer).primaryKey().check { $0 == 1 }
            table.column("display_name", .text).notNull()
            table.column("signing_key", .blob).notNull()
            table.column("agreement_key", .blob).notNull()
            table.column("created_at_ms", .integer).notNull()
        }
    }

    /// v4-secrets: the private keys move to the secret store.
    static func moveKeysToSecrets(_ db: Database) throws {
        try db.alter(table: databaseTableName) { table in table.add(column: "inbox_id", .text) }
        for row in try Row.fetchAll(db, sql: "SELECT * FROM identity") {
            let identity = try Identity(
                signingKeyBytes: row["signing_key"], agreementKeyBytes: row["agreement_key"],
                displayName: row["display_name"], createdAt: Date(timeIntervalSince1970: 0))
            let inbox = identity.inboxID.rawValue
            try SecretRecord.set(row["signing_key"], named: .identitySigningKey(inbox), db: db)
            try SecretRecord.set(row["agreement_key"], named: .identityAgreementKey(inbox), db: db)
            try db.execute(
                sql: "UPDATE identity SET inbox_id = ?, signing_key = x'', agreement_key = x''", arguments: [inbox])
        }
    }
}

/// A key bundle this client verified, cached by inbox id.
struct ContactRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "contact"

    var inboxID: String
    var displayName: String
    var signingKey: Data
    var agreementKey: Data
    var createdAtMs: Int64

    enum CodingKeys: String, CodingKey {
        case inboxID = "inbox_id", displayName = "display_name", signingKey = "signing_key"
        case agreementKey = "agreement_key", createdAtMs = "created_at_ms"
    }

    init(_ identity: PublicIdentity) {
        inboxID = identity.inboxID.rawValue
        displayName = identity.displayName
        signingKey = identity.signingKeyBytes
        agreementKey = identity.agreementKeyBytes
        createdAtMs = ClientClock.millis(identity.createdAt)
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("inbox_id", .text).primaryKey()
            table.column("display_name", .text).notNull()
            table.column("signing_key", .blob).notNull()
            table.column("agreement_key", .blob).notNull()
            table.column("created_at_ms", .integer).notNull()
        }
    }

    func publicIdentity() throws -> PublicIdentity {
        var bundle = WireKeyBundle()
        bundle.signingPublicKey = signingKey
        bundle.agreementPublicKey = agreementKey
        bundle.displayName = displayName
        bundle.createdAtMs = createdAtMs
        return try PublicIdentity(wire: bundle)
    }
}

extension LocalStore {
    func loadIdentity() throws(LocalStoreError) -> Identity? {
        guard let record = try read({ db in try IdentityRecord.fetchOne(db, key: 1) }) else { return nil }
        let inbox = record.inboxID ?? ""
        let signing = try secret(.identitySigningKey(inbox))
        let agreement = try secret(.identityAgreementKey(inbox))
        guard let signing, let agreement else {
            throw .corrupt("the private keys of identity \(inbox) are not in the secret store")
        }
        let identity: Identity
        do {
            identity = try Identity(
                signingKeyBytes: signing, agreementKeyBytes: agreement, displayName: record.displayName,
                createdAt: Date(milliseconds: record.createdAtMs))
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
    func saveIdentity(_ identity: Identity) throws(LocalStoreError) {
        if try read({ db in try IdentityRecord.fetchCount(db) }) > 0 { throw .identityExists(home.path) }
        let inbox = identity.inboxID.rawValue
        try setSecret(identity.signingKey.rawRepresentation, .identitySigningKey(inbox))
        try setSecret(identity.agreementKey.rawRepresentation, .identityAgreementKey(inbox))
        let home = self.home
        try write { db in
            if try IdentityRecord.fetchCount(db) > 0 { throw LocalStoreError.identityExists(home.path) }
            try IdentityRecord(
                displayName: identity.displayName, createdAtMs: ClientClock.millis(identity.createdAt), inboxID: inbox
            ).insert(db)
        }
    }

    func contact(_ inbox: InboxID) throws(LocalStoreError) -> PublicIdentity? {
        guard
            let record = try readStatement({ db in
                try db.fetchOne(
                    ContactRecord.self, cached: "SELECT * FROM contact WHERE inbox_id = ?", [inbox.rawValue])
            })
        else { return nil }
        do {
            return try record.publicIdentity()
        } catch {
            throw .corrupt("stored contact \(inbox): \(error)")
        }
    }

    /// Caches a verified key bundle; a newer bundle of the same signing key
    /// replaces an older one, never the other way round.
    func saveContact(_ identity: PublicIdentity) throws(LocalStoreError) {
        let record = ContactRecord(identity)
        try write { db in
            try db.run(
                cached: """
                    INSERT INTO contact (inbox_id, display_name, signing_key, agreement_key, created_at_ms)
                    VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(inbox_id) DO UPDATE SET display_name = excluded.display_name,
                        signing_key = excluded.signing_key, agreement_key = excluded.agreement_key,
                        created_at_ms = excluded.created_at_ms
                    WHERE excluded.created_at_ms >= contact.created_at_ms
                    """,
                [record.inboxID, record.displayName, record.signingKey, record.agreementKey, record.createdAtMs])
        }
    }
}
