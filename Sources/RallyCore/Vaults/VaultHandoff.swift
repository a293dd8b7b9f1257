import Foundation

/// The vault an app handed over to its extension: the id to pre-select,
/// and the name for reference. Either may be missing.
public struct PendingVault: Sendable, Equatable, Codable {
    public var vaultID: String?
    public var vaultName: String?

    public init(vaultID: String?, vaultName: String?) {
        self.vaultID = vaultID
        self.vaultName = vaultName
    }
}

/// The hand-off of a vault from an app to its extension through a
/// ``SharedContainer`` (the seed's "App Group Communication"): the app
/// ``offer(vaultID:vaultName:)``s the vault it was managing; the
/// extension, on load, ``take()``s it — read and cleared at once, so of two
/// extensions loading together exactly one gets it — and pre-selects it
/// with ``preselect(pending:vaults:id:)``, falling back to the first vault.
public struct VaultHandoff: Sendable {
    /// The key of the vault's id (a UUID string in the seed).
    public static let vaultIDKey = "pending_nominee_vault_id"
    /// The key of the vault's name, for reference.
    public static let vaultNameKey = "pending_nominee_vault_name"
    static let keys = [vaultIDKey, vaultNameKey]

    public let container: SharedContainer

    public init(container: SharedContainer) {
        self.container = container
    }

    /// The app side: stores the vault's id and name in one write,
    /// replacing a vault offered before.
    public func offer(vaultID: String, vaultName: String) throws(SharedContainerError) {
        try container.setValues([Self.vaultIDKey: vaultID, Self.vaultNameKey: vaultName])
    }

    /// The extension side, on load: the vault handed over, read and cleared
    /// under one lock; nil when none was (or another taker was first).
    public func take() throws(SharedContainerError) -> PendingVault? {
        Self.pendingVault(from: try container.take(keys: Self.keys))
    }

    /// The vault handed over, left in place.
    public func peek() throws(SharedContainerError) -> PendingVault? {
        Self.pendingVault(from: try container.values(forKeys: Self.keys))
    }

    /// The vault to pre-select: the one whose id is the pending vault's,
    /// else the first (when no vault was handed over, or its id is missing
    /// or unknown); nil only when there are no vaults.
    public static func preselect<V>(pending: PendingVault?, vaults: [V], id: (V) -> String) -> V? {
        if let wanted = pending?.vaultID, let match = vaults.first(where: { id($0) == wanted }) {
            return match
        }
        return vaults.first
    }

    private static func pendingVault(from values: [String: String]) -> PendingVault? {
        guard !values.isEmpty else { return nil }
        return PendingVault(vaultID: values[vaultIDKey], vaultName: values[vaultNameKey])
    }
}
