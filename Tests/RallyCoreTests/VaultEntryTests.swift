import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

@Suite("Vault entries: sealed, signed, bound to their vault")
struct VaultEntryTests {
    let owner = Identity(displayName: "owner")
    let key = VaultSealing.newVaultKey()
    let vaultID = String(repeating: "a", count: 64)

    func entry(name: String = "Papers", vaultID: String? = nil, epoch: UInt64 = 0) -> WireVaultEntry {
        var created = WireVaultCreated()
        created.name = name
        var entry = WireVaultEntry()
        entry.vaultID = vaultID ?? self.vaultID
        entry.epoch = epoch
        entry.body = .created(created)
        return entry
    }

    var ownerKey: Data { owner.signingKey.publicKey.rawRepresentation }

    @Test("an owner's entry opens with the vault key and names the vault")
    func roundTrip() throws {
        let payload = try VaultEntries.seal(entry(), owner: owner, vaultKey: key)
        let opened = try VaultEntries.open(payload, vaultID: vaultID, vaultKey: key, ownerSigningKey: ownerKey)
        #expect(opened == entry())
        #expect(try VaultEntries.sealed(payload).epoch == 0)
    }

    @Test("an entry signed by anyone but the owner is refused")
    func forged() throws {
        let stranger = Identity(displayName: "stranger")
        let payload = try VaultEntries.seal(entry(), owner: stranger, vaultKey: key)
        #expect(throws: VaultClientError.invalidEntry("it is not signed by the vault's owner")) {
            try VaultEntries.open(payload, vaultID: vaultID, vaultKey: key, ownerSigningKey: ownerKey)
        }
    }

    @Test("an entry of another vault, replayed here, does not open; one naming another vault inside is refused")
    func replayed() throws {
        let other = String(repeating: "b", count: 64)
        let payload = try VaultEntries.seal(entry(vaultID: other), owner: owner, vaultKey: key)
        #expect {
            try VaultEntries.open(payload, vaultID: vaultID, vaultKey: key, ownerSigningKey: ownerKey)
        } throws: { error in
            guard case .invalidEntry(let reason) = error as? VaultClientError else { return false }
            return reason.hasPrefix("it does not open with the vault key")
        }
    }

    @Test("an entry sealed under another key or epoch does not open")
    func wrongKey() throws {
        let payload = try VaultEntries.seal(entry(epoch: 1), owner: owner, vaultKey: key)
        for otherKey in [VaultSealing.newVaultKey()] {
            #expect(throws: VaultClientError.self) {
                try VaultEntries.open(payload, vaultID: vaultID, vaultKey: otherKey, ownerSigningKey: ownerKey)
            }
        }
        // The sealed epoch is authenticated: relabelling it fails.
        var sealed = try FrameCodec.decode(WireSealedVaultEntry.self, from: payload, limit: 1 << 20)
        sealed.epoch = 0
        #expect(throws: VaultClientError.self) {
            try VaultEntries.open(FrameCodec.encode(sealed), vaultID: vaultID, vaultKey: key, ownerSigningKey: ownerKey)
        }
    }

    @Test("truncated, garbage and oversized payloads are typed refusals, never crashes")
    func hostile() throws {
        let payload = try VaultEntries.seal(entry(), owner: owner, vaultKey: key)
        for cut in stride(from: 0, to: payload.count, by: 7) {
            #expect(throws: VaultClientError.self) {
                try VaultEntries.open(payload.prefix(cut), vaultID: vaultID, vaultKey: key, ownerSigningKey: ownerKey)
            }
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let garbage = Data((0..<Int.random(in: 0..<300, using: &generator)).map { _ in UInt8.random(in: 0...255) })
            #expect(throws: VaultClientError.self) {
                try VaultEntries.open(garbage, vaultID: vaultID, vaultKey: key, ownerSigningKey: ownerKey)
            }
        }
        let oversized = Data(count: WireLimits.maxPayloadBytes + 1)
        #expect(throws: VaultClientError.self) { try VaultEntries.sealed(oversized) }
    }

    @Test("names: trimmed, not empty, no control characters, at most 255 bytes")
    func names() throws {
        #expect(try VaultEntries.validName("  Deeds  ") == "Deeds")
        #expect(try VaultEntries.validName("Ünïcødé 🔐") == "Ünïcødé 🔐")
        #expect(throws: VaultClientError.invalidName("a name cannot be empty")) { try VaultEntries.validName(" \n") }
        #expect(throws: VaultClientError.invalidName("a name cannot contain control or text-direction characters")) {
            try VaultEntries.validName("a\u{7}b")
        }
        #expect(throws: VaultClientError.invalidName("a name is at most 255 bytes; this one is 256")) {
            try VaultEntries.validName(String(repeating: "x", count: 256))
        }
    }

    @Test("a document whose sizes disagree with the segment format is refused")
    func documentChecks() throws {
        var document = WireVaultDocument()
        document.documentID = "d"
        document.blobID = "b"
        document.size = 10
        document.sealedSize = 26
        document.sealedSha256 = Data(count: 32)
        document.segmentBytes = UInt32(DocumentCipher.segmentBytes)
        try VaultEntries.check(document)
        var wrongSize = document
        wrongSize.sealedSize = 27
        var wrongSegments = document
        wrongSegments.segmentBytes = 4096
        var shortHash = document
        shortHash.sealedSha256 = Data(count: 31)
        for bad in [wrongSize, wrongSegments, shortHash] {
            #expect(throws: VaultClientError.self) { try VaultEntries.check(bad) }
        }
    }
}
