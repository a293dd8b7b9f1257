public import Foundation
import GRDB
import RallyWire

/// A vault this home owns or was given access to. The documents are not
/// here but in `vault_document`, both rebuilt from the vault's log.
struct VaultRecord: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    static let databaseTableName = "vault"

    /// The vault's topic id (`group/<id>` on the relay).
    var id: String
    var name: String
    var ownerInbox: String
    var ownerSigningKey: Data
    var isOwner: Bool
    /// The epoch whose key this home reads and writes with.
    var epoch: Int64
    /// The seq of the epoch's first entry (its creation or the first part
    /// of its snapshot): where a nominee granted this epoch starts reading.
    var epochStartSeq: Int64
    var createdAtMs: Int64

    enum CodingKeys: String, CodingKey {
        case id, name, ownerInbox = "owner_inbox", ownerSigningKey = "owner_signing_key", isOwner = "is_owner"
        case epoch, epochStartSeq = "epoch_start_seq", createdAtMs = "created_at_ms"
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("id", .text).primaryKey()
            table.column("name", .text).notNull()
            table.column("owner_inbox", .text).notNull()
            table.column("owner_signing_key", .blob).notNull()
            table.column("is_owner", .boolean).notNull()
            table.column("epoch", .integer).notNull()
            table.column("created_at_ms", .integer).notNull()
        }
    }

    /// v7: where the current epoch starts (a vault made before has had
    /// one epoch, from its first entry).
    static func addEpochStartSeq(_ db: Database) throws {
        try db.alter(table: databaseTableName) { table in
            table.add(column: "epoch_start_seq", .integer).notNull().defaults(to: 1)
        }
    }

    var topic: TopicName {
        // A vault id is a founded topic id: 64 hex digits, always valid.
        try! TopicName.group(id)
    }
}

/// One document of a vault as its log last described it.
struct VaultDocumentRecord: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    static let databaseTableName = "vault_document"

    var vaultID: String
    var documentID: String
    var name: String
    var size: Int64
    var blobID: String
    var sealedSize: Int64
    var sealedSHA256: Data
    var segmentBytes: Int64
    /// The document key sealed with the vault key of `epoch`.
    var wrappedKey: Data
    var epoch: Int64
    var addedAtMs: Int64

    enum CodingKeys: String, CodingKey {
        case vaultID = "vault_id", documentID = "document_id", name, size, blobID = "blob_id"
        case sealedSize = "sealed_size", sealedSHA256 = "sealed_sha256", segmentBytes = "segment_bytes"
        case wrappedKey = "wrapped_key", epoch, addedAtMs = "added_at_ms"
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("vault_id", .text).notNull().references(VaultRecord.databaseTableName, onDelete: .cascade)
            table.column("document_id", .text).notNull()
            table.column("name", .text).notNull()
            table.column("size", .integer).notNull()
            table.column("blob_id", .text).notNull()
            table.column("sealed_size", .integer).notNull()
            table.column("sealed_sha256", .blob).notNull()
            table.column("segment_bytes", .integer).notNull()
            table.column("wrapped_key", .blob).notNull()
            table.column("epoch", .integer).notNull()
            table.column("added_at_ms", .integer).notNull()
            table.primaryKey(["vault_id", "document_id"])
        }
    }

    init(vaultID: String, epoch: UInt64, _ document: WireVaultDocument) {
        self.vaultID = vaultID
        self.documentID = document.documentID
        self.name = document.name
        self.size = Int64(clamping: document.size)
        self.blobID = document.blobID
        self.sealedSize = Int64(clamping: document.sealedSize)
        self.sealedSHA256 = document.sealedSha256
        self.segmentBytes = Int64(document.segmentBytes)
        self.wrappedKey = document.wrappedKey
        self.epoch = Int64(clamping: epoch)
        self.addedAtMs = document.addedAtMs
    }

    /// The document as a log entry describes it, with `wrappedKey`.
    func wire(wrappedKey: Data) -> WireVaultDocument {
        var document = WireVaultDocument()
        document.documentID = documentID
        document.name = name
        document.size = UInt64(size)
        document.blobID = blobID
        document.sealedSize = UInt64(sealedSize)
        document.sealedSha256 = sealedSHA256
        document.segmentBytes = UInt32(segmentBytes)
        document.wrappedKey = wrappedKey
        document.addedAtMs = addedAtMs
        return document
    }

    var summary: VaultDocumentSummary {
        VaultDocumentSummary(
            id: documentID, name: name, size: size, addedAt: Date(milliseconds: addedAtMs))
    }
}

/// A vault as apps and the CLI list it.
public struct VaultSummary: Sendable, Equatable, Codable {
    public var id: String
    public var name: String
    public var ownerInbox: String
    public var isOwner: Bool
    public var documentCount: Int
}

/// A document as apps and the CLI list it.
public struct VaultDocumentSummary: Sendable, Equatable, Codable {
    public var id: String
    public var name: String
    /// Plaintext bytes.
    public var size: Int64
    public var addedAt: Date
}

extension LocalStore {
    func vaults() throws(LocalStoreError) -> [VaultSummary] {
        try read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT v.id, v.name, v.owner_inbox, v.is_owner,
                        (SELECT COUNT(*) FROM vault_document d WHERE d.vault_id = v.id) AS documents
                    FROM vault v ORDER BY v.created_at_ms, v.id
                    """
            ).map { row in
                VaultSummary(
                    id: row["id"], name: row["name"], ownerInbox: row["owner_inbox"], isOwner: row["is_owner"],
                    documentCount: row["documents"])
            }
        }
    }

    func vault(id: String) throws(LocalStoreError) -> VaultRecord? {
        try read { db in try VaultRecord.fetchOne(db, key: id) }
    }

    /// Vaults whose id or name is `text`.
    func vaults(matching text: String) throws(LocalStoreError) -> [VaultRecord] {
        try read { db in
            try VaultRecord.fetchAll(
                db, sql: "SELECT * FROM vault WHERE id = ? OR name = ? ORDER BY created_at_ms", arguments: [text, text])
        }
    }

    func vaultDocuments(_ vaultID: String) throws(LocalStoreError) -> [VaultDocumentRecord] {
        try read { db in
            try VaultDocumentRecord.fetchAll(
                db, sql: "SELECT * FROM vault_document WHERE vault_id = ? ORDER BY added_at_ms, document_id",
                arguments: [vaultID])
        }
    }
}
