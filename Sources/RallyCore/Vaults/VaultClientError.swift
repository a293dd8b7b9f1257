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
    /// The owner moved the vault to a new key this home has not received.
    case awaitingKey(vault: String)
    case unknownNominee(vault: String, nominee: String)
    case unknownInvitation
    /// The owner revoked this nominee's access to the vault.
    case accessRevoked(vault: String)
    case nomineeNotReady(name: String, status: NomineeStatus, action: String)
    case invitationRefused(String)
    /// This home holds no key to an emergency escrow for the vault (or the
    /// nominee).
    case noEmergencyAccess(vault: String)
    /// The owner tried to approve or reject with no request standing.
    case noEmergencyRequest(nominee: String, action: String, state: EmergencyAccessState)
    case invalidEmergencyWait(minimum: Duration, maximum: Duration)

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
        case .awaitingKey(let vault):
            "the owner of vault \"\(vault)\" moved it to a new key that has not reached you yet; read your messages (`rally dm read`) and try again"
        case .unknownNominee(let vault, let nominee):
            "vault \"\(vault)\" has no nominee \"\(nominee)\": see `rally nominee list \(vault)`"
        case .accessRevoked(let vault):
            "the owner of vault \"\(vault)\" revoked your access; documents added since are out of your reach"
        case .unknownInvitation:
            "no vault invitation with this token was sent to you: an invitation works only for the person it was sent to"
        case .nomineeNotReady(let name, let status, let action):
            "\(name) cannot be \(action): the invitation is \(status.rawValue)"
        case .invitationRefused(let reason): reason
        case .noEmergencyAccess(let vault):
            "no emergency access to \"\(vault)\" here: the owner gives it when they confirm a nominee invited with --emergency-wait"
        case .noEmergencyRequest(let nominee, let action, let state):
            state == .rejected
                ? "\(nominee)'s last request was already rejected; there is nothing to \(action)"
                : "\(nominee) has not asked for emergency access; there is nothing to \(action)"
        case .invalidEmergencyWait(let minimum, let maximum):
            "an emergency wait is between \(minimum.components.seconds / 60) minute\(minimum.components.seconds == 60 ? "" : "s") and \(maximum.components.seconds / 86_400) days"
        }
    }
}
