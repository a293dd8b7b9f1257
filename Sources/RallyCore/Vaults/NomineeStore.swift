public import Foundation
import GRDB

/// The owner's record of one nominee: who, how to reach them, the hash of
/// their token (never the token) and where the invitation stands.
struct NomineeRecord: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    static let databaseTableName = "vault_nominee"

    var id: String
    var vaultID: String
    var name: String
    var phone: String?
    var email: String?
    var inbox: String
    var tokenHash: Data
    var status: String
    var createdAtMs: Int64
    var expiresAtMs: Int64
    var updatedAtMs: Int64

    enum CodingKeys: String, CodingKey {
        case id, vaultID = "vault_id", name, phone, email, inbox, tokenHash = "token_hash", status
        case createdAtMs = "created_at_ms", expiresAtMs = "expires_at_ms", updatedAtMs = "updated_at_ms"
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("id", .text).primaryKey()
            table.column("vault_id", .text).notNull().references(VaultRecord.databaseTableName, onDelete: .cascade)
            table.column("name", .text).notNull()
            table.column("phone", .text)
            table.column("email", .text)
            table.column("inbox", .text).notNull()
            table.column("token_hash", .blob).notNull()
            table.column("status", .text).notNull()
            table.column("created_at_ms", .integer).notNull()
            table.column("expires_at_ms", .integer).notNull()
            table.column("updated_at_ms", .integer).notNull()
        }
    }

    var nomineeStatus: NomineeStatus { NomineeStatus(rawValue: status) ?? .pending }

    var rules: NomineeRules.Nominee {
        NomineeRules.Nominee(inbox: inbox, tokenHash: tokenHash, status: nomineeStatus, expiresAtMs: expiresAtMs)
    }

    var summary: NomineeSummary {
        NomineeSummary(
            id: id, vaultID: vaultID, name: name, phone: phone, email: email, inbox: inbox, status: nomineeStatus,
            expiresAt: Date(timeIntervalSince1970: Double(expiresAtMs) / 1000))
    }
}

/// An invitation this identity received: kept so it can be answered (the
/// token is the invitee's to present) and shown with its current status.
struct VaultInvitationRecord: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    static let databaseTableName = "vault_invitation"

    var id: String
    var vaultID: String
    var vaultName: String
    var ownerInbox: String
    var ownerName: String
    var token: Data
    var tokenHash: Data
    var status: String
    var refusal: String?
    var receivedAtMs: Int64
    var expiresAtMs: Int64

    enum CodingKeys: String, CodingKey {
        case id, vaultID = "vault_id", vaultName = "vault_name", ownerInbox = "owner_inbox"
        case ownerName = "owner_name", token, tokenHash = "token_hash", status, refusal
        case receivedAtMs = "received_at_ms", expiresAtMs = "expires_at_ms"
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("id", .text).primaryKey()
            table.column("vault_id", .text).notNull()
            table.column("vault_name", .text).notNull()
            table.column("owner_inbox", .text).notNull()
            table.column("owner_name", .text).notNull()
            table.column("token", .blob).notNull()
            table.column("token_hash", .blob).notNull().indexed()
            table.column("status", .text).notNull()
            table.column("refusal", .text)
            table.column("received_at_ms", .integer).notNull()
            table.column("expires_at_ms", .integer).notNull()
        }
    }

    var nomineeStatus: NomineeStatus { NomineeStatus(rawValue: status) ?? .pending }

    var summary: VaultInvitationSummary {
        VaultInvitationSummary(
            id: id, vaultID: vaultID, vaultName: vaultName, ownerInbox: ownerInbox, ownerName: ownerName,
            status: nomineeStatus, title: nomineeStatus.invitationTitle, refusal: refusal,
            expiresAt: Date(timeIntervalSince1970: Double(expiresAtMs) / 1000))
    }
}

/// A nominee answer this home has decided, with the reply it sends: acted
/// on again (after a crash before the inbox's cursor moved), nothing
/// changes and the same reply goes out again under the same message id.
struct NomineeEventRecord: Codable, FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "vault_nominee_event"

    var messageID: String
    /// The serialized `VaultAccessUpdate` sent in reply.
    var reply: Data

    enum CodingKeys: String, CodingKey { case messageID = "message_id", reply }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("message_id", .text).primaryKey()
            table.column("reply", .blob).notNull()
        }
    }
}

/// A nominee as the owner manages them (the seed's "Manage Nominees").
public struct NomineeSummary: Sendable, Equatable, Codable {
    public var id: String
    public var vaultID: String
    public var name: String
    public var phone: String?
    public var email: String?
    public var inbox: String
    public var status: NomineeStatus
    public var expiresAt: Date
}

/// An invitation as its recipient sees it.
public struct VaultInvitationSummary: Sendable, Equatable, Codable {
    public var id: String
    public var vaultID: String
    public var vaultName: String
    public var ownerInbox: String
    public var ownerName: String
    public var status: NomineeStatus
    /// "🔐 Vault Invitation", "✅ Vault Access Accepted", …
    public var title: String
    /// Why the owner refused the last answer, if they did.
    public var refusal: String?
    public var expiresAt: Date
}
