/// Why a vault operation did not happen; each says what to do.
public enum VaultClientError: Error, Equatable, Sendable, CustomStringConvertible {
    case unknownVault(String)
    /// More than one vault has this name.
    case ambiguousVault(String, ids: [String])
    case unknownDocument(vault: String, document: String)
    case ambiguousDocument(String, ids: [String])
    case notOwner(vault: String)
    case invalidName(String)
    case fileUnreadable(path: String, reason: String)
    case fileChanged(path: String)
    case outputUnwritable(path: String, reason: String)
    case tooLarge(size: Int64, limit: Int64)
    /// A downloaded document failed its checks: nothing was written.
    case integrity(String)
    /// An entry of the vault's log failed its checks: it was skipped.
    case invalidEntry(String)
    /// The relay kept refusing or failing a transfer.
    case transferFailed(String)

    public var description: String {
        switch self {
        case .unknownVault(let name):
            "no vault named \"\(name)\" in this home: see `rally vault list`"
        case .ambiguousVault(let name, let ids):
            "several vaults are named \"\(name)\": use one of their ids (\(ids.joined(separator: ", ")))"
        case .unknownDocument(let vault, let document):
            "vault \"\(vault)\" has no document \"\(document)\": see `rally vault ls \(vault)`"
        case .ambiguousDocument(let name, let ids):
            "several documents are named \"\(name)\": use one of their ids (\(ids.joined(separator: ", ")))"
        case .notOwner(let vault):
            "only the owner of vault \"\(vault)\" can change it"
        case .invalidName(let reason): "invalid name: \(reason)"
        case .fileUnreadable(let path, let reason): "cannot read \(path): \(reason)"
        case .fileChanged(let path): "\(path) changed while it was being uploaded; add it again"
        case .outputUnwritable(let path, let reason): "cannot write \(path): \(reason)"
        case .tooLarge(let size, let limit):
            "the document is \(size) bytes; a vault document is at most \(limit) bytes"
        case .integrity(let reason): "the downloaded document failed its integrity check (\(reason)); nothing was saved"
        case .invalidEntry(let reason): "a vault entry was ignored: \(reason)"
        case .transferFailed(let reason): "the transfer did not finish: \(reason); run the command again to resume"
        }
    }
}
