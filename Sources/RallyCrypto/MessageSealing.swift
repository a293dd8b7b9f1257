import Crypto
public import Foundation
public import RallyWire

/// Signing and HPKE sealing of direct messages.
///
/// Sign-then-seal: the signature (inside the seal) proves the author; the
/// seal hides content and author from the relay. The signed body names the
/// recipient and the seal authenticates the recipient's inbox id, so a
/// message cannot be re-addressed to someone else.
public enum MessageSealing {
    public static let sealVersion: UInt32 = 1
    public static let messageIDByteCount = 16
    static let hpkeInfo = Data("rally-dm-v1".utf8)
    static let ciphersuite = HPKE.Ciphersuite.Curve25519_SHA256_ChachaPoly

    /// Signs a message body with the sender's identity.
    public static func sign(_ body: WireMessageBody, by sender: Identity) -> WireSignedMessage {
        let bodyBytes = FrameCodec.encode(body)
        var signed = WireSignedMessage()
        signed.body = bodyBytes
        signed.signature = sender.sign(.message, bodyBytes)
        return signed
    }

    /// Verifies a signed message: parses the body, checks the sender's keys
    /// and the signature. Returns the body and the sender.
    public static func verify(_ signed: WireSignedMessage) throws(RallyCryptoError) -> VerifiedMessage {
        let body: WireMessageBody
        do {
            body = try FrameCodec.decode(WireMessageBody.self, from: signed.body, limit: WireLimits.maxFrameBytes)
        } catch {
            throw .malformed("message body")
        }
        let sender = try PublicIdentity(wire: body.sender)
        guard sender.isValidSignature(signed.signature, domain: .message, payload: signed.body) else {
            throw .invalidSignature("message from \(sender.inboxID)")
        }
        guard body.messageID.count == messageIDByteCount else { throw .malformed("message id") }
        return VerifiedMessage(body: body, sender: sender)
    }

    /// Seals a signed message to the recipient's agreement key.
    public static func seal(_ signed: WireSignedMessage, to recipient: PublicIdentity) throws(RallyCryptoError) -> Data
    {
        do {
            var sender = try HPKE.Sender(recipientKey: recipient.agreementKey, ciphersuite: ciphersuite, info: hpkeInfo)
            let ciphertext = try sender.seal(
                FrameCodec.encode(signed), authenticating: Data(recipient.inboxID.rawValue.utf8))
            var sealed = WireSealedMessage()
            sealed.version = sealVersion
            sealed.encapsulatedKey = sender.encapsulatedKey
            sealed.ciphertext = ciphertext
            return FrameCodec.encode(sealed)
        } catch {
            throw .malformed("seal failed: \(error)")
        }
    }

    /// Opens a sealed direct message addressed to `recipient` and verifies
    /// it. Every failure is typed; nothing partial is returned.
    public static func open(_ payload: Data, as recipient: Identity) throws(RallyCryptoError) -> VerifiedMessage {
        let sealed: WireSealedMessage
        do {
            sealed = try FrameCodec.decode(WireSealedMessage.self, from: payload, limit: WireLimits.maxFrameBytes)
        } catch {
            throw .malformed("sealed message")
        }
        guard sealed.version == sealVersion else { throw .unsupportedVersion(sealed.version) }
        let plaintext: Data
        do {
            var opener = try HPKE.Recipient(
                privateKey: recipient.agreementKey, ciphersuite: ciphersuite, info: hpkeInfo,
                encapsulatedKey: sealed.encapsulatedKey)
            plaintext = try opener.open(sealed.ciphertext, authenticating: Data(recipient.inboxID.rawValue.utf8))
        } catch {
            throw .decryptionFailed
        }
        let signed: WireSignedMessage
        do {
            signed = try FrameCodec.decode(WireSignedMessage.self, from: plaintext, limit: WireLimits.maxFrameBytes)
        } catch {
            throw .malformed("signed message")
        }
        let verified = try verify(signed)
        guard verified.body.recipient == recipient.inboxID.rawValue else { throw .wrongRecipient }
        return verified
    }

    public static func newMessageID() -> Data {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<messageIDByteCount).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }
}

public struct VerifiedMessage: Sendable {
    public let body: WireMessageBody
    public let sender: PublicIdentity

    public var messageID: Data { body.messageID }
}
