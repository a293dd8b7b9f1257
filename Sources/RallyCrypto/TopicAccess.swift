public import Crypto
public import Foundation
public import RallyWire

/// The capability that reads and writes a topic other than an inbox: an
/// Ed25519 key pair derived from a 32-byte access secret that only the
/// topic's members hold. The relay keeps the public keys it has been shown
/// for a topic and checks proofs against them; it never learns who holds
/// them. See docs/adr/0008-untrusted-relay.md.
public struct TopicAccess: Sendable {
    public static let secretByteCount = 32
    static let keyInfo = Data("rally-topic-access-key-v1".utf8)
    static let topicIDDomain = Data("rally-topic-id-v1".utf8)
    static let secretInfo = Data("rally-topic-access-v1".utf8)

    public let secret: SymmetricKey
    public let signingKey: Curve25519.Signing.PrivateKey

    public init(secret: SymmetricKey) throws(RallyCryptoError) {
        guard secret.bitCount == Self.secretByteCount * 8 else {
            throw .invalidPublicKey("a topic access secret is \(Self.secretByteCount) bytes")
        }
        self.secret = secret
        let seed = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: secret, info: Self.keyInfo, outputByteCount: 32)
        do {
            signingKey = try seed.withUnsafeBytes { try Curve25519.Signing.PrivateKey(rawRepresentation: Data($0)) }
        } catch {
            throw .invalidPublicKey("topic access key: \(error)")
        }
    }

    /// The access secret a group's topic uses while `key` is the group's
    /// latest fresh epoch key: whoever loses the key loses the topic.
    public static func secret(fromEpochKey key: SymmetricKey) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: key, info: secretInfo, outputByteCount: secretByteCount)
    }

    public static func newSecret() -> SymmetricKey { SymmetricKey(size: .bits256) }

    public var publicKey: Data { signingKey.publicKey.rawRepresentation }
    public var secretBytes: Data { secret.withUnsafeBytes { Data($0) } }

    /// A topic id that names its first access key, so nobody can claim a
    /// topic id before its creator: 64 lowercase hex digits.
    public static func topicID(firstAccessKey: Data) -> String {
        var hasher = SHA256()
        hasher.update(data: topicIDDomain)
        hasher.update(data: firstAccessKey)
        return Hex.encode(hasher.finalize())
    }

    /// The topic id this access key founds.
    public var foundedTopicID: String { Self.topicID(firstAccessKey: publicKey) }

    // MARK: Proofs

    /// The bytes a WebSocket proof signs: bound to the relay's origin and
    /// this connection's challenge, so a proof can neither be replayed on
    /// another connection nor passed through to another relay.
    public static func connectionProofBytes(origin: String, challengeNonce: Data, topic: String) -> Data {
        SigningDomain.topicAccess.bytes(lengthPrefixed([Data(origin.utf8), challengeNonce, Data(topic.utf8)]))
    }

    public func connectionProof(origin: String, challengeNonce: Data, topic: String) -> WireTopicProof {
        proof(over: Self.connectionProofBytes(origin: origin, challengeNonce: challengeNonce, topic: topic))
    }

    /// A proof over arbitrary bound bytes (the HTTP request binding).
    public func proof(over bytes: Data) -> WireTopicProof {
        var proof = WireTopicProof()
        proof.accessKey = publicKey
        // Signing with a valid Curve25519 key does not fail in practice;
        // an empty signature is refused by every verifier.
        proof.signature = (try? signingKey.signature(for: bytes)) ?? Data()
        return proof
    }

    /// Checks a proof's signature over `bytes`; the caller checks that the
    /// key is one the topic accepts.
    public static func isValid(_ proof: WireTopicProof, over bytes: Data) -> Bool {
        guard proof.accessKey.count == 32, proof.signature.count == 64,
            let key = try? Curve25519.Signing.PublicKey(rawRepresentation: proof.accessKey)
        else { return false }
        return key.verifies(proof.signature, for: bytes)
    }
}
