public import Crypto
public import Foundation
public import RallyWire

/// Group epoch keys: creating, sealing to members, opening, deriving the
/// next key, and encrypting group messages under them.
public enum EpochKeys {
    public static let keyByteCount = 32
    static let sealInfo = Data("rally-epoch-key-v1".utf8)
    /// HPKE info for the group's invite seed, sealed to admins the same way
    /// epoch keys are sealed to members.
    public static let inviteSeedInfo = Data("rally-invite-seed-v1".utf8)
    static let commitmentDomain = Data("rally-epoch-key-v1".utf8)
    static let deriveInfo = Data("rally-epoch-derive-v1".utf8)
    static let messageDomain = Data("rally-group-message-v1".utf8)
    static let ciphersuite = HPKE.Ciphersuite.Curve25519_SHA256_ChachaPoly

    public static func newKey() -> SymmetricKey { SymmetricKey(size: .bits256) }

    /// Binds a fresh key to a commit, so members can check they were all
    /// handed the same key.
    public static func commitment(to key: SymmetricKey) -> Data {
        key.withUnsafeBytes { Data(SHA256.hash(data: commitmentDomain + Data($0))) }
    }

    static func sealAAD(groupID: String, epoch: UInt64, inbox: String) -> Data {
        Data("\(groupID)|\(epoch)|\(inbox)".utf8)
    }

    /// Seals `key` to each member for the epoch it starts.
    public static func seal(
        _ key: SymmetricKey, to members: [PublicIdentity], groupID: String, epoch: UInt64, info: Data? = nil
    )
        throws(RallyCryptoError) -> [WireSealedEpochKey]
    {
        let sealInfo = info ?? sealInfo
        let keyBytes = key.withUnsafeBytes { Data($0) }
        var sealed: [WireSealedEpochKey] = []
        sealed.reserveCapacity(members.count)
        for member in members {
            do {
                var sender = try HPKE.Sender(
                    recipientKey: member.agreementKey, ciphersuite: ciphersuite, info: sealInfo)
                var entry = WireSealedEpochKey()
                entry.inboxID = member.inboxID.rawValue
                entry.ciphertext = try sender.seal(
                    keyBytes, authenticating: sealAAD(groupID: groupID, epoch: epoch, inbox: member.inboxID.rawValue))
                entry.encapsulatedKey = sender.encapsulatedKey
                sealed.append(entry)
            } catch {
                throw .malformed("epoch key seal failed: \(error)")
            }
        }
        return sealed
    }

    /// Opens the entry sealed to `identity` and checks it against the
    /// commit's commitment.
    public static func open(
        _ sealed: [WireSealedEpochKey], as identity: Identity, groupID: String, epoch: UInt64, commitment: Data
    ) throws(RallyCryptoError) -> SymmetricKey {
        let key = try openEntry(sealed, as: identity, groupID: groupID, epoch: epoch, info: sealInfo)
        guard commitment == Self.commitment(to: key) else { throw .invalidSignature("epoch key commitment") }
        return key
    }

    /// Opens the entry sealed to `identity`, without a commitment check (the
    /// caller checks what the key must match).
    public static func openEntry(
        _ sealed: [WireSealedEpochKey], as identity: Identity, groupID: String, epoch: UInt64, info: Data
    ) throws(RallyCryptoError) -> SymmetricKey {
        let sealInfo = info
        let inbox = identity.inboxID.rawValue
        guard let entry = sealed.first(where: { $0.inboxID == inbox }) else { throw .wrongRecipient }
        let keyBytes: Data
        do {
            var recipient = try HPKE.Recipient(
                privateKey: identity.agreementKey, ciphersuite: ciphersuite, info: sealInfo,
                encapsulatedKey: entry.encapsulatedKey)
            keyBytes = try recipient.open(
                entry.ciphertext, authenticating: sealAAD(groupID: groupID, epoch: epoch, inbox: inbox))
        } catch {
            throw .decryptionFailed
        }
        guard keyBytes.count == keyByteCount else { throw .malformed("epoch key") }
        return SymmetricKey(data: keyBytes)
    }

    /// The key of the next epoch when a commit does not replace it: only
    /// members who held the previous key can compute it.
    public static func derive(from previous: SymmetricKey, epoch: UInt64, commitID: Data) -> SymmetricKey {
        var info = deriveInfo
        withUnsafeBytes(of: epoch.bigEndian) { info.append(contentsOf: $0) }
        return HKDF<SHA256>.deriveKey(inputKeyMaterial: previous, salt: commitID, info: info, outputByteCount: 32)
    }

    static func messageAAD(groupID: String, epoch: UInt64) -> Data {
        messageDomain + Data("|\(groupID)|\(epoch)".utf8)
    }

    /// Encrypts a signed group message under an epoch key.
    public static func encrypt(
        _ signed: WireSignedMessage, key: SymmetricKey, groupID: String, epoch: UInt64
    )
        throws(RallyCryptoError) -> WireGroupCiphertext
    {
        do {
            let box = try ChaChaPoly.seal(
                FrameCodec.encode(signed), using: key, authenticating: messageAAD(groupID: groupID, epoch: epoch))
            var ciphertext = WireGroupCiphertext()
            ciphertext.epoch = epoch
            ciphertext.sealedBox = box.combined
            return ciphertext
        } catch {
            throw .malformed("group message encryption failed: \(error)")
        }
    }

    /// Decrypts and verifies a group message. The caller checks that the
    /// sender was a member allowed to send at that point of the log.
    public static func decrypt(
        _ ciphertext: WireGroupCiphertext, key: SymmetricKey, groupID: String
    )
        throws(RallyCryptoError) -> VerifiedMessage
    {
        let plaintext: Data
        do {
            let box = try ChaChaPoly.SealedBox(combined: ciphertext.sealedBox)
            plaintext = try ChaChaPoly.open(
                box, using: key, authenticating: messageAAD(groupID: groupID, epoch: ciphertext.epoch))
        } catch {
            throw .decryptionFailed
        }
        let signed: WireSignedMessage
        do {
            signed = try FrameCodec.decode(WireSignedMessage.self, from: plaintext, limit: WireLimits.maxFrameBytes)
        } catch {
            throw .malformed("signed group message")
        }
        let verified = try MessageSealing.verify(signed)
        guard verified.body.recipient == groupID else { throw .wrongRecipient }
        return verified
    }
}
