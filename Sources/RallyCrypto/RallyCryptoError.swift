/// Every way a cryptographic check can fail. Callers map these to their own
/// user-facing errors; none of them is ever silently ignored.
public enum RallyCryptoError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidInboxID(String)
    case invalidPublicKey(String)
    case invalidPrivateKey
    case invalidSignature(String)
    case inboxMismatch(expected: String, actual: String)
    case malformed(String)
    case tooLarge(size: Int, limit: Int)
    case unsupportedVersion(UInt32)
    case decryptionFailed
    case wrongRecipient
    case staleTimestamp

    public var description: String {
        switch self {
        case .invalidInboxID(let text): "\"\(text)\" is not an inbox id (expected 32 characters a-z 2-7)"
        case .invalidPublicKey(let what): "invalid public key: \(what)"
        case .invalidPrivateKey: "invalid private key"
        case .invalidSignature(let what): "bad signature on \(what)"
        case .inboxMismatch(let expected, let actual): "keys belong to inbox \(actual), not \(expected)"
        case .malformed(let what): "malformed \(what)"
        case .tooLarge(let size, let limit): "\(size) bytes exceeds the limit of \(limit)"
        case .unsupportedVersion(let version): "unsupported version \(version)"
        case .decryptionFailed: "decryption failed: the ciphertext was altered or not sealed to this identity"
        case .wrongRecipient: "message was addressed to another recipient"
        case .staleTimestamp: "signed timestamp is outside the accepted window"
        }
    }
}
