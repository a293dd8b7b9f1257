public import RallyCrypto

/// Errors the SDK reports to apps and the CLI, each saying what to do.
public enum RallyClientError: Error, Equatable, Sendable, CustomStringConvertible {
    case noIdentity(home: String)
    case unknownRecipient(InboxID)
    case recipientKeysInvalid(InboxID, reason: String)
    case messageTooLarge(size: Int, limit: Int)
    case relay(RelayClientError)
    case store(LocalStoreError)
    case content(ContentError)
    case group(GroupClientError)
    case invite(InviteClientError)
    case vault(VaultClientError)

    public var description: String {
        switch self {
        case .noIdentity(let home):
            "no identity in \(home): create one with `rally id new --name NAME` (or pass --home)"
        case .unknownRecipient(let inbox):
            "the relay has no key bundle for \(inbox): check the inbox id, or ask them to run `rally id new` against this relay"
        case .recipientKeysInvalid(let inbox, let reason):
            "the key bundle the relay returned for \(inbox) is not valid (\(reason)); not sending"
        case .messageTooLarge(let size, let limit):
            "message is \(size) bytes after encryption; the relay accepts at most \(limit)"
        case .relay(let error): error.description
        case .store(let error): error.description
        case .content(let error): error.description
        case .group(let error): error.description
        case .invite(let error): error.description
        case .vault(let error): error.description
        }
    }
}
