import Crypto
import Foundation
import RallyWire
import Testing

@testable import RallyCrypto

@Suite("InviteKeys")
struct InviteKeysTests {
    private static func seed(_ byte: UInt8) -> SymmetricKey { SymmetricKey(data: Data(repeating: byte, count: 32)) }
    private static func keys(_ byte: UInt8) throws -> InviteKeys { try InviteKeys(seed: seed(byte)) }
    private static func referenceKeyBytes(_ keys: InviteKeys) -> Data { keys.referenceKey.withUnsafeBytes { Data($0) } }

    static let groupID = "00112233445566778899aabbccddeeff"
    static let otherGroupID = "ffeeddccbbaa99887766554433221100"
    static let tag = Data((0..<16).map { UInt8($0) })
    static let otherTag = Data((0..<16).map { UInt8(0xF0 - $0) })
    static let issuer = InboxID(signingPublicKey: Data(repeating: 0x01, count: 32))
    static let otherIssuer = InboxID(signingPublicKey: Data(repeating: 0x02, count: 32))

    // MARK: Derivation

    @Test func sameSeedDerivesTheSameIdentityAndReferenceKey() throws {
        let first = try Self.keys(7)
        let second = try InviteKeys(seed: SymmetricKey(data: Data(repeating: 7, count: 32)))
        #expect(first.identity.inboxID == second.identity.inboxID)
        #expect(first.identity.publicIdentity == second.identity.publicIdentity)
        #expect(first.identity.publicIdentity.hasSameKeys(as: second.identity.publicIdentity))
        #expect(Self.referenceKeyBytes(first) == Self.referenceKeyBytes(second))
        #expect(first.seedBytes == Data(repeating: 7, count: 32))
        #expect(first.seedBytes == second.seedBytes)
        // A reference sealed with one opens with the other.
        let reference = first.sealReference(groupID: Self.groupID, tag: Self.tag, issuer: Self.issuer)
        #expect(second.openReference(reference, tag: Self.tag, issuer: Self.issuer) == Self.groupID)
    }

    @Test func derivationIsHKDFOfTheSeedWithTheDocumentedInfos() throws {
        let keys = try Self.keys(9)
        func derive(_ info: String) -> Data {
            HKDF<SHA256>.deriveKey(inputKeyMaterial: Self.seed(9), info: Data(info.utf8), outputByteCount: 32)
                .withUnsafeBytes { Data($0) }
        }
        let signing = try Curve25519.Signing.PrivateKey(
            rawRepresentation: derive("rally-invite-identity-signing-v1"))
        let agreement = try Curve25519.KeyAgreement.PrivateKey(
            rawRepresentation: derive("rally-invite-identity-agreement-v1"))
        #expect(keys.identity.signingKey.publicKey.rawRepresentation == signing.publicKey.rawRepresentation)
        #expect(keys.identity.agreementKey.publicKey.rawRepresentation == agreement.publicKey.rawRepresentation)
        #expect(keys.identity.inboxID == InboxID(signingPublicKey: signing.publicKey.rawRepresentation))
        #expect(Self.referenceKeyBytes(keys) == derive("rally-invite-ref-v1"))
        // Three independent keys, none equal to the seed.
        let all = [
            signing.rawRepresentation, agreement.rawRepresentation, Self.referenceKeyBytes(keys), keys.seedBytes,
        ]
        #expect(Set(all).count == 4)
        #expect(keys.identity.displayName == InviteKeys.displayName)
        #expect(keys.identity.createdAt == Date(timeIntervalSince1970: 0))
    }

    @Test func differentSeedsDeriveDifferentKeys() throws {
        let seeds: [UInt8] = [0, 1, 2, 0x80, 0xFF]
        let all = try seeds.map { try Self.keys($0) }
        #expect(Set(all.map(\.identity.inboxID)).count == seeds.count)
        #expect(Set(all.map { $0.identity.agreementKey.publicKey.rawRepresentation }).count == seeds.count)
        #expect(Set(all.map(Self.referenceKeyBytes)).count == seeds.count)
        // Seeds that differ in one bit only.
        var flipped = Data(repeating: 0x55, count: 32)
        let base = try InviteKeys(seed: SymmetricKey(data: flipped))
        flipped[31] ^= 0x01
        let neighbour = try InviteKeys(seed: SymmetricKey(data: flipped))
        #expect(base.identity.inboxID != neighbour.identity.inboxID)
        #expect(Self.referenceKeyBytes(base) != Self.referenceKeyBytes(neighbour))
    }

    @Test("a seed that is not 32 bytes is refused", arguments: [0, 1, 16, 31, 33, 64])
    func wrongSeedSize(_ count: Int) {
        let result = outcome { () throws(RallyCryptoError) in
            try InviteKeys(seed: SymmetricKey(data: Data(repeating: 0x42, count: count)))
        }
        #expect(result.failure == .malformed("invite seed"))
    }

    @Test func newSeedsAre32RandomBytes() throws {
        let seeds = (0..<8).map { _ in InviteKeys.newSeed() }
        #expect(seeds.allSatisfy { $0.bitCount == InviteKeys.seedByteCount * 8 })
        #expect(Set(seeds.map { $0.withUnsafeBytes { Data($0) } }).count == seeds.count)
        for seed in seeds { _ = try InviteKeys(seed: seed) }
    }

    // MARK: Group references

    @Test(
        "a reference opens to the group id it sealed",
        arguments: [
            "", "00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100", "Grüße 👋 |pipes|",
            String(repeating: "g", count: 228),
        ])
    func referenceRoundTrip(_ groupID: String) throws {
        let keys = try Self.keys(3)
        let reference = keys.sealReference(groupID: groupID, tag: Self.tag, issuer: Self.issuer)
        // 12-byte nonce, the ciphertext, 16-byte tag.
        #expect(reference.count == 12 + groupID.utf8.count + 16)
        #expect(keys.openReference(reference, tag: Self.tag, issuer: Self.issuer) == groupID)
        // The group id does not appear in clear.
        if groupID.utf8.count >= 8 { #expect(reference.range(of: Data(groupID.utf8)) == nil) }
    }

    @Test func sealingTwiceGivesDifferentReferencesThatBothOpen() throws {
        let keys = try Self.keys(3)
        let first = keys.sealReference(groupID: Self.groupID, tag: Self.tag, issuer: Self.issuer)
        let second = keys.sealReference(groupID: Self.groupID, tag: Self.tag, issuer: Self.issuer)
        #expect(first != second)
        #expect(keys.openReference(first, tag: Self.tag, issuer: Self.issuer) == Self.groupID)
        #expect(keys.openReference(second, tag: Self.tag, issuer: Self.issuer) == Self.groupID)
    }

    /// How a reference is opened, and whether it must fail.
    struct OpenCase: Sendable, CustomTestStringConvertible {
        let name: String
        let reference: @Sendable (Data) -> Data
        let seed: UInt8
        let tag: Data
        let issuer: InboxID
        var testDescription: String { name }

        init(
            _ name: String, seed: UInt8 = 3, tag: Data = InviteKeysTests.tag, issuer: InboxID = InviteKeysTests.issuer,
            reference: @escaping @Sendable (Data) -> Data = { $0 }
        ) {
            self.name = name
            self.seed = seed
            self.tag = tag
            self.issuer = issuer
            self.reference = reference
        }
    }

    /// `data` with the bits of `mask` flipped in the byte at `offset`.
    static func flipped(_ data: Data, at offset: Int, _ mask: UInt8) -> Data {
        var bytes = [UInt8](data)
        bytes[offset] ^= mask
        return Data(bytes)
    }

    static let forgedReferences: [OpenCase] = [
        .init("another tag", tag: otherTag),
        .init("the tag with one bit flipped", tag: flipped(tag, at: 0, 0x01)),
        .init("an empty tag", tag: Data()),
        .init("the tag one byte short", tag: tag.prefix(15)),
        .init("the tag one byte longer", tag: tag + Data([0])),
        .init("another issuer", issuer: otherIssuer),
        .init("another seed", seed: 4),
        .init("empty", reference: { _ in Data() }),
        .init("only the nonce", reference: { $0.prefix(12) }),
        .init("one byte short", reference: { $0.dropLast() }),
        .init("the nonce and authentication tag only", reference: { $0.prefix(12) + $0.suffix(16) }),
        .init("one byte appended", reference: { $0 + Data([0]) }),
        .init("nonce flipped", reference: { flipped($0, at: 0, 0x01) }),
        .init("ciphertext flipped", reference: { flipped($0, at: 12, 0x80) }),
        .init("authentication tag flipped", reference: { flipped($0, at: $0.count - 1, 0x01) }),
        .init("zeros", reference: { Data(count: $0.count) }),
        .init("257 bytes of garbage", reference: { _ in Data(repeating: 0xAA, count: 257) }),
    ]

    @Test("a reference does not open with", arguments: forgedReferences)
    func forgedReferenceDoesNotOpen(_ forged: OpenCase) throws {
        let sealer = try Self.keys(3)
        let reference = sealer.sealReference(groupID: Self.groupID, tag: Self.tag, issuer: Self.issuer)
        let opener = try Self.keys(forged.seed)
        #expect(opener.openReference(forged.reference(reference), tag: forged.tag, issuer: forged.issuer) == nil)
        // The untouched reference with the right inputs still opens.
        #expect(sealer.openReference(reference, tag: Self.tag, issuer: Self.issuer) == Self.groupID)
    }

    @Test func everyFlippedBitIsCaught() throws {
        let keys = try Self.keys(3)
        let reference = keys.sealReference(groupID: Self.groupID, tag: Self.tag, issuer: Self.issuer)
        for offset in 0..<reference.count {
            for bit in 0..<8 {
                var flipped = reference
                flipped[offset] ^= UInt8(1 << bit)
                #expect(
                    keys.openReference(flipped, tag: Self.tag, issuer: Self.issuer) == nil,
                    "byte \(offset) bit \(bit)")
            }
        }
    }

    @Test func everyTruncationIsCaught() throws {
        let keys = try Self.keys(3)
        let reference = keys.sealReference(groupID: Self.groupID, tag: Self.tag, issuer: Self.issuer)
        for length in 0..<reference.count {
            #expect(keys.openReference(reference.prefix(length), tag: Self.tag, issuer: Self.issuer) == nil)
        }
    }

    @Test func referencesAbove256BytesAreRefusedEvenWhenGenuine() throws {
        let keys = try Self.keys(3)
        let largest = keys.sealReference(
            groupID: String(repeating: "g", count: 228), tag: Self.tag, issuer: Self.issuer)
        #expect(largest.count == 256)
        #expect(keys.openReference(largest, tag: Self.tag, issuer: Self.issuer) == String(repeating: "g", count: 228))
        let oversized = keys.sealReference(
            groupID: String(repeating: "g", count: 229), tag: Self.tag, issuer: Self.issuer)
        #expect(oversized.count == 257)
        #expect(keys.openReference(oversized, tag: Self.tag, issuer: Self.issuer) == nil)
    }

    @Test func aReferenceThatIsNotUTF8DoesNotOpen() throws {
        let keys = try Self.keys(3)
        let aad = InviteKeys.referenceAAD(tag: Self.tag, issuer: Self.issuer)
        let box = try ChaChaPoly.seal(Data([0xFF, 0xFE, 0xC0]), using: keys.referenceKey, authenticating: aad)
        #expect(keys.openReference(box.combined, tag: Self.tag, issuer: Self.issuer) == nil)
    }

    // MARK: Welcome proofs

    static let newcomer = InboxID(signingPublicKey: Data(repeating: 0x03, count: 32))
    static let otherNewcomer = InboxID(signingPublicKey: Data(repeating: 0x04, count: 32))

    /// One way of checking a proof made for (tag, groupID, newcomer) by seed 5.
    static let requestID = Data(repeating: 0x42, count: 16)

    struct ProofCase: Sendable, CustomTestStringConvertible {
        let name: String
        let verifierSeed: UInt8
        let tag: Data
        let groupID: String
        let newcomer: InboxID
        let requestID: Data
        let proof: @Sendable (Data) -> Data
        let valid: Bool
        var testDescription: String { name }

        init(
            _ name: String, valid: Bool = false, verifierSeed: UInt8 = 5, tag: Data = InviteKeysTests.tag,
            groupID: String = InviteKeysTests.groupID, newcomer: InboxID = InviteKeysTests.newcomer,
            requestID: Data = InviteKeysTests.requestID, proof: @escaping @Sendable (Data) -> Data = { $0 }
        ) {
            self.requestID = requestID
            self.name = name
            self.valid = valid
            self.verifierSeed = verifierSeed
            self.tag = tag
            self.groupID = groupID
            self.newcomer = newcomer
            self.proof = proof
        }
    }

    static let proofCases: [ProofCase] = [
        .init("the same tag, group, newcomer and invite identity", valid: true),
        .init("another tag", tag: otherTag),
        .init("another group", groupID: otherGroupID),
        .init("a group id that extends the proven one", groupID: groupID + "0"),
        .init("another newcomer", newcomer: otherNewcomer),
        .init("another join request (a replayed answer)", requestID: Data(repeating: 0x77, count: 16)),
        .init("the invite identity of another seed", verifierSeed: 6),
        .init("an empty proof", proof: { _ in Data() }),
        .init("a truncated proof", proof: { $0.dropLast() }),
        .init("a flipped proof", proof: { flipped($0, at: 10, 0x04) }),
    ]

    @Test("a welcome proof verifies only for", arguments: proofCases)
    func welcomeProof(_ check: ProofCase) throws {
        let signer = try Self.keys(5)
        let proof = signer.welcomeProof(
            tag: Self.tag, groupID: Self.groupID, newcomer: Self.newcomer, requestID: Self.requestID)
        #expect(proof.count == 64)
        let verifier = try Self.keys(check.verifierSeed).identity.publicIdentity
        let valid = InviteKeys.isValidWelcomeProof(
            check.proof(proof), by: verifier, tag: check.tag, groupID: check.groupID, newcomer: check.newcomer,
            requestID: check.requestID)
        #expect(valid == check.valid)
    }

    @Test func aProofBySomeoneOtherThanTheInviteIdentityIsInvalid() throws {
        let keys = try Self.keys(5)
        // An admin's own key (not the invite identity) signing the same bytes.
        let admin = try Identity(
            signingKeyBytes: Data(repeating: 0x21, count: 32), agreementKeyBytes: Data(repeating: 0x22, count: 32),
            displayName: "Ada", createdAt: Date(timeIntervalSince1970: 0))
        let payload = InviteKeys.welcomeProofPayload(
            tag: Self.tag, groupID: Self.groupID, newcomer: Self.newcomer, requestID: Self.requestID)
        let byAdmin = try admin.signingKey.signature(for: payload)
        #expect(
            !InviteKeys.isValidWelcomeProof(
                byAdmin, by: keys.identity.publicIdentity, tag: Self.tag, groupID: Self.groupID,
                newcomer: Self.newcomer, requestID: Self.requestID))
        // The invite identity signing the bare fields, without the domain.
        let undomained = try keys.identity.signingKey.signature(
            for: Self.tag + Data("|\(Self.groupID)|\(Self.newcomer.rawValue)|".utf8) + Self.requestID)
        #expect(
            !InviteKeys.isValidWelcomeProof(
                undomained, by: keys.identity.publicIdentity, tag: Self.tag, groupID: Self.groupID,
                newcomer: Self.newcomer, requestID: Self.requestID))
        // The same seed re-derived verifies the genuine proof.
        let proof = keys.welcomeProof(
            tag: Self.tag, groupID: Self.groupID, newcomer: Self.newcomer, requestID: Self.requestID)
        #expect(
            InviteKeys.isValidWelcomeProof(
                proof, by: try Self.keys(5).identity.publicIdentity, tag: Self.tag, groupID: Self.groupID,
                newcomer: Self.newcomer, requestID: Self.requestID))
    }
}
