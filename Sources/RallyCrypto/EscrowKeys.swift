public import Crypto
import Foundation

/// The two capability keys of an emergency escrow (ADR 0016), derived from
/// one seed the owner keeps: the owner's approves, rejects, replaces and
/// deletes; the nominee's requests and reads the released grant. The
/// escrow's id is the topic id the owner's key founds, so nobody can take
/// it first, and a retried creation names the same escrow.
public struct EscrowKeys: Sendable {
    static let ownerInfo = Data("rally-escrow-owner-v1".utf8)
    static let nomineeInfo = Data("rally-escrow-nominee-v1".utf8)

    public let owner: TopicAccess
    public let nominee: TopicAccess

    public init(seed: SymmetricKey) throws(RallyCryptoError) {
        owner = try TopicAccess(secret: Self.derive(seed, Self.ownerInfo))
        nominee = try TopicAccess(secret: Self.derive(seed, Self.nomineeInfo))
    }

    public var id: String { owner.foundedTopicID }

    public static func newSeed() -> SymmetricKey { SymmetricKey(size: .bits256) }

    private static func derive(_ seed: SymmetricKey, _ info: Data) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: seed, info: info, outputByteCount: TopicAccess.secretByteCount)
    }
}
