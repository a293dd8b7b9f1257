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
    /// Emergency access (ADR 0016): the wait after a request; 0 for none.
    var emergencyWaitMs: Int64 = 0
    /// The escrow that holds the nominee's sealed grant, once confirmed.
    var escrowID: String?
    /// When the nominee said they asked for access, and when the relay
    /// releases it unless the owner rejects.
    var emergencyRequestedAtMs: Int64?
    var emergencyReleasesAtMs: Int64?

    enum CodingKeys: String, CodingKey {
        case id, vaultID = "vault_id", name, phone, email, inbox, tokenHash = "token_hash", status
        case createdAtMs = "created_at_ms", expiresAtMs = "expires_at_ms", updatedAtMs = "updated_at_ms"
        case emergencyWaitMs = "emergency_wait_ms", escrowID = "escrow_id"
        case emergencyRequestedAtMs = "emergency_requested_at_ms", emergencyReleasesAtMs = "emergency_releases_at_ms"
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

    static func addEmergencyAccess(_ db: Database) throws {
        try db.alter(table: databaseTableName) { table in
            table.add(column: "emergency_wait_ms", .integer).notNull().defaults(to: 0)
            table.add(column: "escrow_id", .text)
            table.add(column: "emergency_requested_at_ms", .integer)
            table.add(column: "emergency_releases_at_ms", .integer)
        }
    }

    var nomineeStatus: NomineeStatus { NomineeStatus(rawValue: status) ?? .pending }

    var rules: NomineeRules.Nominee {
        NomineeRules.Nominee(inbox: inbox, tokenHash: tokenHash, status: nomineeStatus, expiresAtMs: expiresAtMs)
    }

    var summary: NomineeSummary {
        NomineeSummary(
            id: id, vaultID: vaultID, name: name, phone: phone, email: email, inbox: inbox, status: nomineeStatus,
            expiresAt: Date(milliseconds: expiresAtMs),
            emergencyAccess: emergencyWaitMs > 0
                ? EmergencyAccessTerms(
                    waitMs: emergencyWaitMs, escrowCreated: escrowID != nil,
                    requestedAt: emergencyRequestedAtMs.map(Date.init(milliseconds:)),
                    releasesAt: emergencyReleasesAtMs.map(Date.init(milliseconds:)))
                : nil)
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
    /// Emergency access the owner offered: the wait after a request; 0 for
    /// none.
    var emergencyWaitMs: Int64 = 0
    /// The escrow the owner made once they confirmed (the key to it is a
    /// secret of this home).
    var escrowID: String?

    enum CodingKeys: String, CodingKey {
        case id, vaultID = "vault_id", vaultName = "vault_name", ownerInbox = "owner_inbox"
        case ownerName = "owner_name", token, tokenHash = "token_hash", status, refusal
        case receivedAtMs = "received_at_ms", expiresAtMs = "expires_at_ms"
        case emergencyWaitMs = "emergency_wait_ms", escrowID = "escrow_id"
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

    static func addEmergencyAccess(_ db: Database) throws {
        try db.alter(table: databaseTableName) { table in
            table.add(column: "emergency_wait_ms", .integer).notNull().defaults(to: 0)
            table.add(column: "escrow_id", .text)
        }
    }

    var nomineeStatus: NomineeStatus { NomineeStatus(rawValue: status) ?? .pending }

    var summary: VaultInvitationSummary {
        VaultInvitationSummary(
            id: id, vaultID: vaultID, vaultName: vaultName, ownerInbox: ownerInbox, ownerName: ownerName,
            status: nomineeStatus, title: nomineeStatus.invitationTitle, refusal: refusal,
            expiresAt: Date(milliseconds: expiresAtMs),
            emergencyAccess: emergencyWaitMs > 0
                ? EmergencyAccessTerms(
                    waitMs: emergencyWaitMs, escrowCreated: escrowID != nil, requestedAt: nil, releasesAt: nil)
                : nil)
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
    /// Set when the nominee was offered emergency access.
    public var emergencyAccess: EmergencyAccessTerms?
}

/// Emergency access as a home knows it without asking the relay: the wait
/// and, on the owner's side, the request the nominee announced.
public struct EmergencyAccessTerms: Sendable, Equatable, Codable {
    public var waitMs: Int64
    /// The owner confirmed: the relay holds the nominee's sealed grant.
    public var escrowCreated: Bool
    public var requestedAt: Date?
    public var releasesAt: Date?
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
    /// Set when the owner offered emergency access.
    public var emergencyAccess: EmergencyAccessTerms?
}
