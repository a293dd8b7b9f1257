import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@Suite("CommitSealing")
struct CommitSealingTests {
    static let groupID = "00112233445566778899aabbccddeeff"
    static let otherGroupID = "ffeeddccbbaa99887766554433221100"

    let epochKey = SymmetricKey(data: Data(repeating: 0x11, count: 32))
    let otherKey = SymmetricKey(data: Data(repeating: 0x22, count: 32))

    /// A signed commit as the sealing layer sees it: opaque bytes and a signature.
    static func signedCommit(_ marker: String = "commit-marker-bytes") -> WireSignedGroupCommit {
        var signed = WireSignedGroupCommit()
        signed.commit = Data(marker.utf8)
        signed.signature = Data(repeating: 0x5A, count: 64)
        return signed
    }

    func seal(
        _ signed: WireSignedGroupCommit = signedCommit(), key: SymmetricKey? = nil, groupID: String = groupID,
        epoch: UInt64 = 3
    ) throws -> WireSealedGroupCommit {
        try CommitSealing.seal(
            signed, commitKey: CommitSealing.commitKey(epochKey: key ?? epochKey), groupID: groupID, epoch: epoch)
    }

    func open(
        _ sealed: WireSealedGroupCommit, key: SymmetricKey? = nil, groupID: String = groupID
    ) -> Result<WireSignedGroupCommit, RallyCryptoError> {
        outcome { () throws(RallyCryptoError) in
            try CommitSealing.open(
                sealed, commitKey: CommitSealing.commitKey(epochKey: key ?? epochKey), groupID: groupID)
        }
    }

    /// Seals arbitrary plaintext exactly as `CommitSealing.seal` frames it
    /// (ChaChaPoly under the commit key, the group and epoch authenticated),
    /// to reach the checks after decryption.
    func sealRaw(_ plaintext: Data, epoch: UInt64 = 3) throws -> WireSealedGroupCommit {
        let aad = Data("rally-group-commit-sealed-v1".utf8) + Data("|\(Self.groupID)|\(epoch)".utf8)
        let box = try ChaChaPoly.seal(
            plaintext, using: CommitSealing.commitKey(epochKey: epochKey), authenticating: aad)
        var sealed = WireSealedGroupCommit()
        sealed.epoch = epoch
        sealed.sealedBox = box.combined
        return sealed
    }

    // MARK: Sealing

    @Test func sealThenOpenRoundTrips() throws {
        let signed = Self.signedCommit()
        let sealed = try seal(signed, epoch: 7)
        #expect(sealed.epoch == 7)
        #expect(try open(sealed).get() == signed)
        // The relay sees neither the commit nor its signature.
        #expect(sealed.sealedBox.range(of: Data("commit-marker-bytes".utf8)) == nil)
        #expect(sealed.sealedBox.range(of: signed.signature) == nil)
    }

    @Test func sealingIsRandomized() throws {
        let first = try seal()
        let second = try seal()
        #expect(first.sealedBox != second.sealedBox)
        #expect(try open(first).get() == open(second).get())
    }

    @Test func theCommitKeyIsNotTheEpochKeyAndDiffersPerEpochKey() {
        let commitKey = CommitSealing.commitKey(epochKey: epochKey)
        let bytes = commitKey.withUnsafeBytes { Data($0) }
        #expect(bytes.count == 32)
        #expect(bytes != epochKey.withUnsafeBytes { Data($0) })
        #expect(bytes == CommitSealing.commitKey(epochKey: epochKey).withUnsafeBytes { Data($0) })
        #expect(bytes != CommitSealing.commitKey(epochKey: otherKey).withUnsafeBytes { Data($0) })
    }

    @Test func anotherEpochKeyDoesNotOpen() throws {
        #expect(open(try seal(), key: otherKey).failure == .decryptionFailed)
    }

    @Test func theEpochKeyItselfDoesNotOpen() throws {
        let sealed = try seal()
        let result = outcome { () throws(RallyCryptoError) in
            try CommitSealing.open(sealed, commitKey: epochKey, groupID: Self.groupID)
        }
        #expect(result.failure == .decryptionFailed)
    }

    @Test func anotherGroupDoesNotOpen() throws {
        #expect(open(try seal(), groupID: Self.otherGroupID).failure == .decryptionFailed)
        #expect(open(try seal(groupID: Self.otherGroupID)).failure == .decryptionFailed)
    }

    @Test(arguments: [UInt64(0), 2, 4, .max])
    func anotherEpochDoesNotOpen(_ epoch: UInt64) throws {
        var sealed = try seal(epoch: 3)
        sealed.epoch = epoch
        #expect(open(sealed).failure == .decryptionFailed)
    }

    @Test func aTruncatedBoxDoesNotOpen() throws {
        let sealed = try seal()
        // Nonce (12) and tag (16) at least; every shorter prefix fails.
        for length in [0, 1, 11, 12, 27, 28, sealed.sealedBox.count - 1] {
            var truncated = sealed
            truncated.sealedBox = sealed.sealedBox.prefix(length)
            #expect(open(truncated).failure == .decryptionFailed, "\(length) bytes")
        }
    }

    @Test func flippingAnyBitOfTheBoxNeverOpens() throws {
        let sealed = try seal()
        for index in sealed.sealedBox.indices {
            for mask: UInt8 in [0x01, 0x80] {
                var tampered = sealed
                tampered.sealedBox[index] ^= mask
                #expect(open(tampered).failure == .decryptionFailed, "byte \(index) mask \(mask)")
            }
        }
    }

    @Test func garbagePlaintextIsMalformed() throws {
        for plaintext in [Data([0xFF, 0xFF, 0xFF]), Data("not a protobuf".utf8), Data()] {
            #expect(open(try sealRaw(plaintext)).failure == .malformed("sealed group commit"), "\(plaintext)")
        }
    }

    @Test func anOversizedPlaintextIsMalformed() throws {
        var signed = Self.signedCommit()
        signed.commit = Data(repeating: 0x41, count: WireLimits.maxPayloadBytes)
        let plaintext = try signed.serializedData()
        #expect(plaintext.count > WireLimits.maxPayloadBytes)
        #expect(open(try sealRaw(plaintext)).failure == .malformed("sealed group commit"))
        // Just under the limit still opens.
        signed.commit = Data(repeating: 0x41, count: WireLimits.maxPayloadBytes - 80)
        let fitting = try seal(signed)
        #expect(try open(fitting).get() == signed)
    }

    // MARK: Transcript

    @Test func theInitialTranscriptIsDeterministicPerGroup() {
        let first = CommitSealing.initialTranscript(groupID: Self.groupID)
        #expect(first.count == 32)
        #expect(first == CommitSealing.initialTranscript(groupID: Self.groupID))
        #expect(first != CommitSealing.initialTranscript(groupID: Self.otherGroupID))
    }

    @Test func theTranscriptIsDeterministicAndCommitsToParentBytesAndOrder() {
        let start = CommitSealing.initialTranscript(groupID: Self.groupID)
        let a = Data("commit a".utf8)
        let b = Data("commit b".utf8)
        let afterA = CommitSealing.transcript(after: start, commitBytes: a)
        #expect(afterA.count == 32)
        #expect(afterA == CommitSealing.transcript(after: start, commitBytes: a))
        #expect(afterA != CommitSealing.transcript(after: start, commitBytes: b))
        #expect(afterA != CommitSealing.transcript(after: Data(repeating: 0, count: 32), commitBytes: a))
        let ab = CommitSealing.transcript(after: afterA, commitBytes: b)
        let ba = CommitSealing.transcript(after: CommitSealing.transcript(after: start, commitBytes: b), commitBytes: a)
        #expect(ab != ba)
        #expect(
            ab
                == CommitSealing.transcript(
                    after: CommitSealing.transcript(after: start, commitBytes: a), commitBytes: b))
    }

    @Test func theTranscriptIsSHA256OverDomainParentAndBytes() {
        let parent = Data(repeating: 0x01, count: 32)
        let bytes = Data("commit".utf8)
        let expected = Data(SHA256.hash(data: Data("rally-transcript-v1".utf8) + parent + bytes))
        #expect(CommitSealing.transcript(after: parent, commitBytes: bytes) == expected)
    }

    // MARK: Epoch links

    @Test func anEpochLinkVerifiesOnlyForTheRightPreviousKeyEpochGroupAndTranscript() {
        let transcript = Data(repeating: 0x33, count: 32)
        let link = CommitSealing.epochLink(
            previousEpochKey: epochKey, groupID: Self.groupID, epoch: 5, transcript: transcript)
        #expect(link.count == 32)
        #expect(
            link
                == CommitSealing.epochLink(
                    previousEpochKey: epochKey, groupID: Self.groupID, epoch: 5, transcript: transcript))
        func valid(
            _ link: Data, key: SymmetricKey? = nil, groupID: String? = nil, epoch: UInt64 = 5,
            transcript other: Data? = nil
        ) -> Bool {
            CommitSealing.isValidEpochLink(
                link, previousEpochKey: key ?? epochKey, groupID: groupID ?? Self.groupID, epoch: epoch,
                transcript: other ?? transcript)
        }
        #expect(valid(link))
        #expect(!valid(link, key: otherKey))
        #expect(!valid(link, key: CommitSealing.commitKey(epochKey: epochKey)))
        #expect(!valid(link, epoch: 4))
        #expect(!valid(link, epoch: 6))
        #expect(!valid(link, groupID: Self.otherGroupID))
        #expect(!valid(link, transcript: Data(repeating: 0x34, count: 32)))
        #expect(!valid(link, transcript: transcript.prefix(31)))
        #expect(!valid(Data()))
        #expect(!valid(link.prefix(16)))
        var flipped = link
        flipped[0] ^= 0x01
        #expect(!valid(flipped))
    }
}
