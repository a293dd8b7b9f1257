import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// The pure rules of a vault's log (ADR 0014): how an entry is built and
/// sealed, and how a reader opens, checks and applies one. No I/O.
enum VaultEntries {
    /// Longest vault or document name, in UTF-8 bytes.
    static let maxNameBytes = 255

    /// A name as it may be stored: trimmed, not empty, no control
    /// characters, at most ``maxNameBytes``.
    static func validName(_ raw: String) throws(VaultClientError) -> String {
        let name = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !name.isEmpty else { throw .invalidName("a name cannot be empty") }
        guard name.utf8.count <= maxNameBytes else {
            throw .invalidName("a name is at most \(maxNameBytes) bytes; this one is \(name.utf8.count)")
        }
        // The characters a deep link refuses too: controls, and marks that
        // reorder how text is shown.
        guard !name.unicodeScalars.contains(where: NomineeInviteLink.isControl) else {
            throw .invalidName("a name cannot contain control or text-direction characters")
        }
        return name
    }

    /// The relay payload of `entry`: signed by the owner, sealed with the
    /// vault key of the entry's epoch.
    static func seal(
        _ entry: WireVaultEntry, owner: Identity, vaultKey: SymmetricKey
    ) throws(RallyCryptoError) -> Data {
        let bytes = FrameCodec.encode(entry)
        var signed = WireSignedVaultEntry()
        signed.entry = bytes
        signed.signature = VaultSealing.sign(entry: bytes, with: owner)
        var sealed = WireSealedVaultEntry()
        sealed.epoch = entry.epoch
        sealed.ciphertext = try VaultSealing.sealEntry(
            FrameCodec.encode(signed), vaultKey: vaultKey, vaultID: entry.vaultID, epoch: entry.epoch)
        return FrameCodec.encode(sealed)
    }

    /// A payload as the relay stores it; its epoch names the key that
    /// opens it.
    static func sealed(_ payload: Data) throws(VaultClientError) -> WireSealedVaultEntry {
        do {
            return try FrameCodec.decode(WireSealedVaultEntry.self, from: payload, limit: WireLimits.maxPayloadBytes)
        } catch {
            throw .invalidEntry("not a sealed vault entry (\(error))")
        }
    }

    /// Opens and checks one sealed entry: the key of its epoch opens it,
    /// the owner signed it, it names this vault and the epoch it was sealed
    /// under.
    static func open(
        _ sealed: WireSealedVaultEntry, vaultID: String, vaultKey: SymmetricKey, ownerSigningKey: Data
    ) throws(VaultClientError) -> WireVaultEntry {
        let signed: WireSignedVaultEntry
        let entry: WireVaultEntry
        do {
            let opened = try VaultSealing.openEntry(
                sealed.ciphertext, vaultKey: vaultKey, vaultID: vaultID, epoch: sealed.epoch)
            signed = try FrameCodec.decode(WireSignedVaultEntry.self, from: opened, limit: WireLimits.maxPayloadBytes)
        } catch {
            throw .invalidEntry("it does not open with the vault key (\(error))")
        }
        guard VaultSealing.verify(entry: signed.entry, signature: signed.signature, ownerSigningKey: ownerSigningKey)
        else { throw .invalidEntry("it is not signed by the vault's owner") }
        do {
            entry = try FrameCodec.decode(WireVaultEntry.self, from: signed.entry, limit: WireLimits.maxPayloadBytes)
        } catch {
            throw .invalidEntry("undecodable entry (\(error))")
        }
        guard entry.vaultID == vaultID, entry.epoch == sealed.epoch else {
            throw .invalidEntry("it belongs to another vault or epoch")
        }
        return entry
    }

    /// ``sealed(_:)`` then ``open(_:vaultID:vaultKey:ownerSigningKey:)``.
    static func open(
        _ payload: Data, vaultID: String, vaultKey: SymmetricKey, ownerSigningKey: Data
    ) throws(VaultClientError) -> WireVaultEntry {
        try open(sealed(payload), vaultID: vaultID, vaultKey: vaultKey, ownerSigningKey: ownerSigningKey)
    }

    /// A document's description as its entry stores it.
    static func document(
        id: String, name: String, uploaded: DocumentTransfer.Uploaded, blobID: String, wrappedKey: Data,
        at millis: Int64
    ) -> WireVaultDocument {
        var document = WireVaultDocument()
        document.documentID = id
        document.name = name
        document.size = UInt64(uploaded.plaintextSize)
        document.blobID = blobID
        document.sealedSize = UInt64(uploaded.sealedSize)
        document.sealedSha256 = uploaded.sealedSHA256
        document.segmentBytes = UInt32(DocumentCipher.segmentBytes)
        document.wrappedKey = wrappedKey
        document.addedAtMs = millis
        return document
    }

    /// Checks a document description before it is stored: the sizes agree
    /// with the segment format this build reads.
    static func check(_ document: WireVaultDocument) throws(VaultClientError) {
        guard document.segmentBytes == UInt32(DocumentCipher.segmentBytes) else {
            throw .invalidEntry("document \(document.documentID) uses \(document.segmentBytes)-byte segments")
        }
        guard document.size < UInt64(Int64.max / 2),
            document.sealedSize == UInt64(DocumentCipher.sealedSize(plaintextSize: Int64(document.size))),
            document.sealedSha256.count == 32, !document.documentID.isEmpty, !document.blobID.isEmpty
        else { throw .invalidEntry("document \(document.documentID) is malformed") }
    }
}
