public import Crypto
public import Foundation
public import RallyWire

/// Group commits travel sealed (ADR 0008): the relay holds no group name,
/// member, role, ban or invite tag. A commit that builds on epoch `e` is
/// encrypted under a key derived from epoch `e`'s key, so exactly the
/// members of that epoch read it, and a welcome can hand a newcomer the key
/// of its own admission commit without the epoch's message key.
public enum CommitSealing {
    static let commitKeyInfo = Data("rally-commit-key-v1".utf8)
    static let commitDomain = Data("rally-group-commit-sealed-v1".utf8)
    static let linkKeyInfo = Data("rally-epoch-link-key-v1".utf8)
    static let transcriptDomain = Data("rally-transcript-v1".utf8)

    /// The key that seals commits building on the epoch whose key is `epochKey`.
    public static func commitKey(epochKey: SymmetricKey) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: epochKey, info: commitKeyInfo, outputByteCount: 32)
    }

    static func aad(groupID: String, epoch: UInt64) -> Data {
        commitDomain + Data("|\(groupID)|\(epoch)".utf8)
    }

    public static func seal(
        _ signed: WireSignedGroupCommit, commitKey: SymmetricKey, groupID: String, epoch: UInt64
    ) throws(RallyCryptoError) -> WireSealedGroupCommit {
        do {
            let box = try ChaChaPoly.seal(
                FrameCodec.encode(signed), using: commitKey, authenticating: aad(groupID: groupID, epoch: epoch))
            var sealed = WireSealedGroupCommit()
            sealed.epoch = epoch
            sealed.sealedBox = box.combined
            return sealed
        } catch {
            throw .malformed("commit encryption failed: \(error)")
        }
    }

    public static func open(
        _ sealed: WireSealedGroupCommit, commitKey: SymmetricKey, groupID: String
    ) throws(RallyCryptoError) -> WireSignedGroupCommit {
        let plaintext: Data
        do {
            let box = try ChaChaPoly.SealedBox(combined: sealed.sealedBox)
            plaintext = try ChaChaPoly.open(
                box, using: commitKey, authenticating: aad(groupID: groupID, epoch: sealed.epoch))
        } catch {
            throw .decryptionFailed
        }
        do {
            return try FrameCodec.decode(WireSignedGroupCommit.self, from: plaintext, limit: WireLimits.maxPayloadBytes)
        } catch {
            throw .malformed("sealed group commit")
        }
    }

    // MARK: Transcript

    /// The transcript a group starts from, before its create commit.
    public static func initialTranscript(groupID: String) -> Data {
        Data(SHA256.hash(data: transcriptDomain + Data("|\(groupID)".utf8)))
    }

    /// The transcript after applying the commit whose signed bytes are
    /// `commitBytes` on a state whose transcript was `parent`.
    public static func transcript(after parent: Data, commitBytes: Data) -> Data {
        var hasher = SHA256()
        hasher.update(data: transcriptDomain)
        hasher.update(data: parent)
        hasher.update(data: commitBytes)
        return Data(hasher.finalize())
    }

    // MARK: Epoch links

    /// The MAC every entry of epoch `epoch` carries over that epoch's
    /// transcript, keyed from the previous epoch's key: whoever held the
    /// previous key can check that an entry claiming the next epoch (or
    /// another transcript for the same one) is genuine.
    public static func epochLink(
        previousEpochKey: SymmetricKey, groupID: String, epoch: UInt64, transcript: Data
    ) -> Data {
        let (key, message) = linkInput(previousEpochKey, groupID, epoch, transcript)
        return Data(HMAC<SHA256>.authenticationCode(for: message, using: key))
    }

    public static func isValidEpochLink(
        _ link: Data, previousEpochKey: SymmetricKey, groupID: String, epoch: UInt64, transcript: Data
    ) -> Bool {
        let (key, message) = linkInput(previousEpochKey, groupID, epoch, transcript)
        return HMAC<SHA256>.isValidAuthenticationCode(link, authenticating: message, using: key)
    }

    private static func linkInput(
        _ previousEpochKey: SymmetricKey, _ groupID: String, _ epoch: UInt64, _ transcript: Data
    ) -> (SymmetricKey, Data) {
        let key = HKDF<SHA256>.deriveKey(inputKeyMaterial: previousEpochKey, info: linkKeyInfo, outputByteCount: 32)
        return (key, Data("\(groupID)|\(epoch)|".utf8) + transcript)
    }
}
