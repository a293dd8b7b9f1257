public import Crypto
public import Foundation

/// A document's bytes sealed in segments under the document's own key
/// (ADR 0014): ChaChaPoly per segment, the nonce made of the segment index
/// and a "last segment" flag (the STREAM construction), so segments cannot
/// be reordered, dropped, repeated or the stream truncated without failing
/// to open.
public struct DocumentCipher: Sendable {
    /// Plaintext bytes per segment; the last may be shorter (an empty
    /// document is one empty last segment).
    public static let segmentBytes = 1 << 20
    public static let tagBytes = 16
    public static let sealedSegmentBytes = segmentBytes + tagBytes
    static let associatedData = Data("rally-document-segment-v1".utf8)

    public let key: SymmetricKey

    public init(key: SymmetricKey) { self.key = key }

    public static func newKey() -> SymmetricKey { SymmetricKey(size: .bits256) }

    /// Segments of a document of `plaintextSize` bytes: at least one.
    public static func segmentCount(plaintextSize: Int64) -> Int64 {
        max(1, (plaintextSize + Int64(segmentBytes) - 1) / Int64(segmentBytes))
    }

    /// Bytes of the sealed document.
    public static func sealedSize(plaintextSize: Int64) -> Int64 {
        plaintextSize + segmentCount(plaintextSize: plaintextSize) * Int64(tagBytes)
    }

    static func nonce(index: Int64, isLast: Bool) -> ChaChaPoly.Nonce {
        var bytes = Data(count: 12)
        bytes[0] = isLast ? 1 : 0
        var big = UInt64(index).bigEndian
        withUnsafeBytes(of: &big) { bytes.replaceSubrange(4..<12, with: $0) }
        // 12 bytes is always a valid ChaChaPoly nonce.
        return try! ChaChaPoly.Nonce(data: bytes)
    }

    /// Seals segment `index` (its ciphertext followed by its tag).
    public func seal(_ segment: Data, index: Int64, isLast: Bool) throws(RallyCryptoError) -> Data {
        guard segment.count <= Self.segmentBytes else {
            throw .tooLarge(size: segment.count, limit: Self.segmentBytes)
        }
        do {
            let box = try ChaChaPoly.seal(
                segment, using: key, nonce: Self.nonce(index: index, isLast: isLast),
                authenticating: Self.associatedData)
            return box.ciphertext + box.tag
        } catch {
            throw .malformed("document segment \(index)")
        }
    }

    /// Opens segment `index`; fails if it was altered, moved or is not the
    /// last segment when `isLast` says it is (or the reverse).
    public func open(_ sealed: Data, index: Int64, isLast: Bool) throws(RallyCryptoError) -> Data {
        guard sealed.count >= Self.tagBytes, sealed.count <= Self.sealedSegmentBytes else {
            throw .malformed("document segment \(index) of \(sealed.count) bytes")
        }
        do {
            let box = try ChaChaPoly.SealedBox(
                nonce: Self.nonce(index: index, isLast: isLast), ciphertext: sealed.dropLast(Self.tagBytes),
                tag: sealed.suffix(Self.tagBytes))
            return try ChaChaPoly.open(box, using: key, authenticating: Self.associatedData)
        } catch {
            throw .decryptionFailed
        }
    }
}

/// Keys and entries of a vault: document keys wrapped by the vault key,
/// log entries sealed by it, and the signature domain of the owner's
/// entries.
public enum VaultSealing {
    public static func newVaultKey() -> SymmetricKey { SymmetricKey(size: .bits256) }

    static func wrapAAD(vaultID: String, documentID: String, epoch: UInt64) -> Data {
        Data("rally-document-key-v1".utf8)
            + lengthPrefixed([Data(vaultID.utf8), Data(documentID.utf8), epochBytes(epoch)])
    }

    static func entryAAD(vaultID: String, epoch: UInt64) -> Data {
        Data("rally-vault-entry-seal-v1".utf8) + lengthPrefixed([Data(vaultID.utf8), epochBytes(epoch)])
    }

    static func epochBytes(_ epoch: UInt64) -> Data {
        var big = epoch.bigEndian
        return Data(bytes: &big, count: 8)
    }

    /// The document key sealed with the vault key of `epoch`.
    public static func wrap(
        documentKey: SymmetricKey, vaultKey: SymmetricKey, vaultID: String, documentID: String, epoch: UInt64
    ) throws(RallyCryptoError) -> Data {
        try seal(
            documentKey.withUnsafeBytes { Data($0) }, key: vaultKey,
            aad: wrapAAD(vaultID: vaultID, documentID: documentID, epoch: epoch))
    }

    public static func unwrap(
        _ wrapped: Data, vaultKey: SymmetricKey, vaultID: String, documentID: String, epoch: UInt64
    ) throws(RallyCryptoError) -> SymmetricKey {
        let raw = try open(wrapped, key: vaultKey, aad: wrapAAD(vaultID: vaultID, documentID: documentID, epoch: epoch))
        guard raw.count == 32 else { throw .malformed("document key") }
        return SymmetricKey(data: raw)
    }

    /// A signed entry sealed for the relay.
    public static func sealEntry(
        _ signedEntry: Data, vaultKey: SymmetricKey, vaultID: String, epoch: UInt64
    ) throws(RallyCryptoError) -> Data {
        try seal(signedEntry, key: vaultKey, aad: entryAAD(vaultID: vaultID, epoch: epoch))
    }

    public static func openEntry(
        _ sealed: Data, vaultKey: SymmetricKey, vaultID: String, epoch: UInt64
    ) throws(RallyCryptoError) -> Data {
        try open(sealed, key: vaultKey, aad: entryAAD(vaultID: vaultID, epoch: epoch))
    }

    /// The owner's signature over a serialized entry.
    public static func sign(entry: Data, with identity: Identity) -> Data {
        identity.sign(.vaultEntry, entry)
    }

    public static func verify(entry: Data, signature: Data, ownerSigningKey: Data) -> Bool {
        guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: ownerSigningKey) else { return false }
        return key.verifies(signature, for: SigningDomain.vaultEntry.bytes(entry))
    }

    private static func seal(_ plaintext: Data, key: SymmetricKey, aad: Data) throws(RallyCryptoError) -> Data {
        do {
            return try ChaChaPoly.seal(plaintext, using: key, authenticating: aad).combined
        } catch {
            throw .malformed("vault seal")
        }
    }

    private static func open(_ combined: Data, key: SymmetricKey, aad: Data) throws(RallyCryptoError) -> Data {
        do {
            return try ChaChaPoly.open(ChaChaPoly.SealedBox(combined: combined), using: key, authenticating: aad)
        } catch {
            throw .decryptionFailed
        }
    }
}
