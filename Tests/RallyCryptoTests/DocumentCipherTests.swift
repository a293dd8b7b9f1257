import Crypto
import Foundation
import Testing

@testable import RallyCrypto

@Suite("Document segments and vault keys")
struct DocumentCipherTests {
    let cipher = DocumentCipher(key: DocumentCipher.newKey())

    static let sizeCases: [(Int64, Int64)] = [
        (0, 1), (1, 1), (Int64(DocumentCipher.segmentBytes), 1), (Int64(DocumentCipher.segmentBytes) + 1, 2),
        (Int64(3 * DocumentCipher.segmentBytes), 3),
    ]

    @Test("sizes: at least one segment, a tag per segment", arguments: sizeCases)
    func sizes(plaintext: Int64, segments: Int64) {
        #expect(DocumentCipher.segmentCount(plaintextSize: plaintext) == segments)
        #expect(DocumentCipher.sealedSize(plaintextSize: plaintext) == plaintext + segments * 16)
    }

    @Test("a segment opens only at its index and with its last-segment flag")
    func positionBound() throws {
        let segment = Data("hello, vault".utf8)
        let sealed = try cipher.seal(segment, index: 3, isLast: false)
        #expect(sealed.count == segment.count + DocumentCipher.tagBytes)
        #expect(try cipher.open(sealed, index: 3, isLast: false) == segment)
        #expect(throws: RallyCryptoError.decryptionFailed) { try cipher.open(sealed, index: 4, isLast: false) }
        // A stream cut after segment 3 cannot pass it off as the end.
        #expect(throws: RallyCryptoError.decryptionFailed) { try cipher.open(sealed, index: 3, isLast: true) }
        let other = DocumentCipher(key: DocumentCipher.newKey())
        #expect(throws: RallyCryptoError.decryptionFailed) { try other.open(sealed, index: 3, isLast: false) }
    }

    @Test("every flipped bit of a sealed segment is detected")
    func tamper() throws {
        let sealed = try cipher.seal(Data(repeating: 0x41, count: 40), index: 0, isLast: true)
        for byte in sealed.indices {
            var altered = sealed
            altered[byte] ^= 0x01
            #expect(throws: RallyCryptoError.decryptionFailed) { try cipher.open(altered, index: 0, isLast: true) }
        }
    }

    @Test("truncated, empty and oversized segments are refused with a typed error")
    func badSizes() throws {
        #expect(throws: RallyCryptoError.malformed("document segment 0 of 15 bytes")) {
            try cipher.open(Data(count: 15), index: 0, isLast: true)
        }
        let tooBig = DocumentCipher.sealedSegmentBytes + 1
        #expect(throws: RallyCryptoError.malformed("document segment 0 of \(tooBig) bytes")) {
            try cipher.open(Data(count: tooBig), index: 0, isLast: true)
        }
        #expect(
            throws: RallyCryptoError.tooLarge(size: DocumentCipher.segmentBytes + 1, limit: DocumentCipher.segmentBytes)
        ) {
            try cipher.seal(Data(count: DocumentCipher.segmentBytes + 1), index: 0, isLast: true)
        }
        let empty = try cipher.seal(Data(), index: 0, isLast: true)
        #expect(try cipher.open(empty, index: 0, isLast: true).isEmpty)
    }

    @Test("a wrapped document key opens only for its vault, document and epoch")
    func wrapping() throws {
        let documentKey = DocumentCipher.newKey()
        let vaultKey = VaultSealing.newVaultKey()
        let wrapped = try VaultSealing.wrap(
            documentKey: documentKey, vaultKey: vaultKey, vaultID: "v", documentID: "d", epoch: 2)
        let opened = try VaultSealing.unwrap(wrapped, vaultKey: vaultKey, vaultID: "v", documentID: "d", epoch: 2)
        #expect(opened == documentKey)
        for (vault, document, epoch) in [("w", "d", UInt64(2)), ("v", "e", 2), ("v", "d", 3)] {
            #expect(throws: RallyCryptoError.decryptionFailed) {
                try VaultSealing.unwrap(wrapped, vaultKey: vaultKey, vaultID: vault, documentID: document, epoch: epoch)
            }
        }
        #expect(throws: RallyCryptoError.decryptionFailed) {
            try VaultSealing.unwrap(
                wrapped, vaultKey: VaultSealing.newVaultKey(), vaultID: "v", documentID: "d", epoch: 2)
        }
    }

    @Test("an entry's signature is the owner's, over the vault-entry domain only")
    func entrySignature() {
        let owner = Identity(displayName: "owner")
        let entry = Data("entry".utf8)
        let signature = VaultSealing.sign(entry: entry, with: owner)
        let key = owner.signingKey.publicKey.rawRepresentation
        #expect(VaultSealing.verify(entry: entry, signature: signature, ownerSigningKey: key))
        #expect(!VaultSealing.verify(entry: Data("other".utf8), signature: signature, ownerSigningKey: key))
        let stranger = Identity(displayName: "stranger").signingKey.publicKey.rawRepresentation
        #expect(!VaultSealing.verify(entry: entry, signature: signature, ownerSigningKey: stranger))
        #expect(!VaultSealing.verify(entry: entry, signature: signature, ownerSigningKey: Data(count: 5)))
        // A message signature over the same bytes is not an entry's.
        let message = owner.sign(.message, entry)
        #expect(!VaultSealing.verify(entry: entry, signature: message, ownerSigningKey: key))
    }
}
