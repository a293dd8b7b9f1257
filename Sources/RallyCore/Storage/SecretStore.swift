public import Foundation
import GRDB

/// Where a client keeps its secret keys: the identity's private keys,
/// group epoch keys, invite seeds (and, later, topic access secrets).
///
/// Everything else a client stores (messages, group state, cursors, public
/// keys) lives in its home's database (`<home>/rally.sqlite`); the secrets
/// go through this protocol so an app can keep them where its platform
/// keeps keys.
///
/// The default (no secret store given) keeps them in the owner-only
/// database of the home (mode 0600 in a 0700 directory), which is what
/// Linux offers.
///
/// ## A Keychain implementation
///
/// On Apple platforms an app passes its own store to
/// `RallyClient.create(…, secrets:)` / `RallyClient.open(…, secrets:)`. A
/// Keychain store maps each secret to one generic password item:
///
/// ```swift
/// struct KeychainSecretStore: SecretStore {
///     let service: String  // e.g. "org.example.app.rally/" + a per-home id
///
///     private func query(_ name: SecretName) -> [String: Any] {
///         [kSecClass as String: kSecClassGenericPassword,
///          kSecAttrService as String: service,
///          kSecAttrAccount as String: name.rawValue,
///          kSecUseDataProtectionKeychain as String: true]
///     }
///     func secret(named name: SecretName) throws -> Data? {
///         var query = query(name)
///         query[kSecReturnData as String] = true
///         var item: CFTypeRef?
///         let status = SecItemCopyMatching(query as CFDictionary, &item)
///         if status == errSecItemNotFound { return nil }
///         guard status == errSecSuccess else { throw KeychainError(status) }
///         return item as? Data
///     }
///     func setSecret(_ secret: Data, named name: SecretName) throws {
///         let update = [kSecValueData as String: secret]
///         var status = SecItemUpdate(query(name) as CFDictionary, update as CFDictionary)
///         if status == errSecItemNotFound {
///             var add = query(name)
///             add[kSecValueData as String] = secret
///             add[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
///             status = SecItemAdd(add as CFDictionary, nil)
///         }
///         guard status == errSecSuccess else { throw KeychainError(status) }
///     }
///     func removeSecret(named name: SecretName) throws {
///         let status = SecItemDelete(query(name) as CFDictionary)
///         guard status == errSecSuccess || status == errSecItemNotFound else { throw KeychainError(status) }
///     }
/// }
/// ```
///
/// `AfterFirstUnlock` lets a notification service extension read the keys
/// while the device is locked; `ThisDeviceOnly` keeps them out of backups.
/// An app sharing keys with an extension adds `kSecAttrAccessGroup`.
///
/// Rules every implementation keeps:
/// - `setSecret` replaces what is stored under the name, and is durable when
///   it returns: the store writes a secret *before* the database records
///   anything that needs it, so a crash leaves at most an unused secret.
/// - Writing the same value twice is harmless (several processes on one
///   home may derive and store the same epoch key).
/// - It is safe to call from any thread and from several processes.
///
/// When a home that kept its secrets in the database is opened with another
/// store, the client moves them over and deletes them from the database.
public protocol SecretStore: Sendable {
    /// The secret stored under `name`, or nil if there is none.
    func secret(named name: SecretName) throws -> Data?
    /// Stores `secret` under `name`, replacing any earlier value.
    func setSecret(_ secret: Data, named name: SecretName) throws
    /// Deletes the secret under `name`; deleting a missing one is no error.
    func removeSecret(named name: SecretName) throws
    /// Stores several secrets, each as `setSecret` would; all are durable
    /// when it returns. A store that can write them together (one fsync
    /// instead of one each) says so by implementing it.
    func setSecrets(_ secrets: [(name: SecretName, secret: Data)]) throws
}

extension SecretStore {
    public func setSecrets(_ secrets: [(name: SecretName, secret: Data)]) throws {
        for (name, secret) in secrets { try setSecret(secret, named: name) }
    }
}

/// The name of one secret: a stable, printable key (`rawValue`) a store can
/// use as, say, a Keychain account.
public struct SecretName: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }

    /// The Ed25519 private key of the identity with this inbox id.
    public static func identitySigningKey(_ inbox: String) -> SecretName {
        SecretName(rawValue: "identity/\(inbox)/signing")
    }

    /// The X25519 private key of the identity with this inbox id.
    public static func identityAgreementKey(_ inbox: String) -> SecretName {
        SecretName(rawValue: "identity/\(inbox)/agreement")
    }

    /// A group's key for one epoch.
    public static func epochKey(group: String, epoch: UInt64) -> SecretName {
        SecretName(rawValue: "epoch-key/\(group)/\(epoch)")
    }

    /// A group's invite seed (admins only).
    public static func inviteSeed(group: String) -> SecretName {
        SecretName(rawValue: "invite-seed/\(group)")
    }

    /// An invite seed a rotation retired, by the inbox of its identity.
    public static func retiredInviteSeed(group: String, inbox: String) -> SecretName {
        SecretName(rawValue: "invite-seed/\(group)/retired/\(inbox)")
    }

    /// A vault's key for one epoch (ADR 0014).
    public static func vaultKey(vault: String, epoch: UInt64) -> SecretName {
        SecretName(rawValue: "vault-key/\(vault)/\(epoch)")
    }

    /// The owner's seed of a nominee's emergency escrow: both escrow keys
    /// derive from it (ADR 0016).
    public static func escrowSeed(_ escrow: String) -> SecretName {
        SecretName(rawValue: "escrow-seed/\(escrow)")
    }

    /// A nominee's key to the escrow that holds their emergency grant.
    public static func escrowAccess(_ escrow: String) -> SecretName {
        SecretName(rawValue: "escrow-access/\(escrow)")
    }

    /// The access secret of a topic (ADR 0008).
    public static func topicAccess(_ topic: String) -> SecretName {
        SecretName(rawValue: "topic-access/\(topic)")
    }

    public var description: String { rawValue }
}

/// The default secret store: a table of the home's owner-only database.
/// A secret in the home's own database: the default ``SecretStore``.
struct SecretRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "secret"

    var name: String
    var value: Data

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("name", .text).primaryKey()
            table.column("value", .blob).notNull()
        }
    }

    static func names(_ db: Database) throws -> [String] {
        try fetchAll(db).map(\.name)
    }

    /// One column by primary key: read on every group and epoch-key lookup.
    static func value(named name: SecretName, _ db: Database) throws -> Data? {
        try db.fetchValue(Data.self, cached: "SELECT value FROM secret WHERE name = ?", [name.rawValue])
    }

    static func set(_ secret: Data, named name: SecretName, db: Database) throws {
        try db.run(
            cached:
                "INSERT INTO secret (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            [name.rawValue, secret])
    }
}

/// Secrets kept in the home's owner-only database.
struct DatabaseSecretStore: SecretStore {
    let queue: DatabasePool

    func secret(named name: SecretName) throws -> Data? {
        try LocalStore.readStatement(queue) { db in try SecretRecord.value(named: name, db) }
    }

    // Durable when it returns, as the protocol asks: fsynced.
    func setSecret(_ secret: Data, named name: SecretName) throws {
        try LocalStore.write(queue, sync: .full) { db in try SecretRecord.set(secret, named: name, db: db) }
    }

    // One transaction, one fsync.
    func setSecrets(_ secrets: [(name: SecretName, secret: Data)]) throws {
        try LocalStore.write(queue, sync: .full) { db in
            for (name, secret) in secrets { try SecretRecord.set(secret, named: name, db: db) }
        }
    }

    func removeSecret(named name: SecretName) throws {
        try LocalStore.write(queue, sync: .full) { db in _ = try SecretRecord.deleteOne(db, key: name.rawValue) }
    }
}
