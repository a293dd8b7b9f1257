import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@Suite("TopicAccess")
struct TopicAccessTests {
    let secret = SymmetricKey(data: Data(repeating: 0x42, count: 32))
    let nonce = Data(repeating: 0x07, count: 32)
    static let origin = "https://relay.example"
    static let topic = "group/" + String(repeating: "ab", count: 32)

    @Test func theAccessKeyIsDeterministicPerSecret() throws {
        let one = try TopicAccess(secret: secret)
        let two = try TopicAccess(secret: SymmetricKey(data: secret.withUnsafeBytes { Data($0) }))
        #expect(one.publicKey == two.publicKey)
        #expect(one.publicKey.count == 32)
        #expect(one.secretBytes == secret.withUnsafeBytes { Data($0) })
        let other = try TopicAccess(secret: SymmetricKey(data: Data(repeating: 0x43, count: 32)))
        #expect(other.publicKey != one.publicKey)
    }

    @Test(arguments: [0, 16, 31, 33, 64])
    func aSecretMustBe32Bytes(_ count: Int) {
        #expect(throws: RallyCryptoError.self) {
            try TopicAccess(secret: SymmetricKey(data: Data(repeating: 1, count: count)))
        }
    }

    @Test func theTopicIDNamesTheFirstAccessKey() throws {
        let access = try TopicAccess(secret: secret)
        let id = access.foundedTopicID
        #expect(id.count == 64)
        #expect(id.allSatisfy { "0123456789abcdef".contains($0) })
        let expected = SHA256.hash(data: Data("rally-topic-id-v1".utf8) + access.publicKey)
            .map { String(format: "%02x", $0) }.joined()
        #expect(id == expected)
        #expect(TopicAccess.topicID(firstAccessKey: access.publicKey) == id)
        #expect(try TopicAccess(secret: TopicAccess.newSecret()).foundedTopicID != id)
    }

    @Test func theSecretFromAnEpochKeyIsDeterministicAndNeitherTheKeyNorItsCommitKey() {
        let epochKey = SymmetricKey(data: Data(repeating: 0x11, count: 32))
        let bytes = TopicAccess.secret(fromEpochKey: epochKey).withUnsafeBytes { Data($0) }
        #expect(bytes.count == TopicAccess.secretByteCount)
        #expect(bytes == TopicAccess.secret(fromEpochKey: epochKey).withUnsafeBytes { Data($0) })
        #expect(bytes != epochKey.withUnsafeBytes { Data($0) })
        #expect(bytes != CommitSealing.commitKey(epochKey: epochKey).withUnsafeBytes { Data($0) })
        let other = SymmetricKey(data: Data(repeating: 0x12, count: 32))
        #expect(bytes != TopicAccess.secret(fromEpochKey: other).withUnsafeBytes { Data($0) })
    }

    @Test func aConnectionProofVerifiesOnlyForItsOriginNonceAndTopic() throws {
        let access = try TopicAccess(secret: secret)
        let proof = access.connectionProof(origin: Self.origin, challengeNonce: nonce, topic: Self.topic)
        #expect(proof.accessKey == access.publicKey)
        func valid(origin: String? = nil, nonce: Data? = nil, topic: String? = nil) -> Bool {
            TopicAccess.isValid(
                proof,
                over: TopicAccess.connectionProofBytes(
                    origin: origin ?? Self.origin, challengeNonce: nonce ?? self.nonce, topic: topic ?? Self.topic))
        }
        #expect(valid())
        #expect(!valid(origin: "https://other.example"))
        #expect(!valid(nonce: Data(repeating: 0x08, count: 32)))
        #expect(!valid(topic: "group/" + String(repeating: "cd", count: 32)))
    }

    @Test func theProofBytesAreLengthPrefixedSoPartsCannotShift() {
        let one = TopicAccess.connectionProofBytes(origin: "ab", challengeNonce: Data("c".utf8), topic: "d")
        let two = TopicAccess.connectionProofBytes(origin: "a", challengeNonce: Data("bc".utf8), topic: "d")
        #expect(one != two)
    }

    @Test func aProofWithAnotherKeyOrABadSignatureIsInvalid() throws {
        let access = try TopicAccess(secret: secret)
        let bytes = TopicAccess.connectionProofBytes(origin: Self.origin, challengeNonce: nonce, topic: Self.topic)
        let proof = access.proof(over: bytes)
        #expect(TopicAccess.isValid(proof, over: bytes))
        var otherKey = proof
        otherKey.accessKey = try TopicAccess(secret: TopicAccess.newSecret()).publicKey
        #expect(!TopicAccess.isValid(otherKey, over: bytes))
        var flipped = proof
        flipped.signature[0] ^= 0x01
        #expect(!TopicAccess.isValid(flipped, over: bytes))
        var short = proof
        short.signature = proof.signature.prefix(63)
        #expect(!TopicAccess.isValid(short, over: bytes))
        var noKey = proof
        noKey.accessKey = Data()
        #expect(!TopicAccess.isValid(noKey, over: bytes))
    }
}
