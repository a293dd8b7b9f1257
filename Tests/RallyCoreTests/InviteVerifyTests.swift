import Foundation
import RallyCore
import RallyCrypto
import RallyWire
import Testing

@Suite("Invite.verify")
struct InviteVerifyTests {
    @Test func validInviteVerifies() throws {
        let alice = try InviteFixtures.alice()
        let payload = InviteFixtures.payload(issuer: alice)
        let signed = Invite.sign(payload, by: alice)
        #expect(signed.signature.count == 64)

        let invite = try Invite.verify(signed, now: InviteFixtures.now)
        #expect(invite.payload == payload)
        #expect(invite.signed == signed)
        #expect(invite.issuer == alice.publicIdentity)
        #expect(invite.issuer.inboxID == alice.inboxID)
        #expect(invite.tag == payload.inviteTag)
        #expect(invite.tag.count == Invite.tagByteCount)
        #expect(invite.tagText == payload.inviteTag.map { String(format: "%02x", $0) }.joined())
        #expect(invite.tagText.count == 32)
        #expect(invite.expiresAt == Fixtures.date(ms: InviteFixtures.nowMs + InviteFixtures.weekMs))
    }

    @Test func expiry() throws {
        let alice = try InviteFixtures.alice()
        let expiresAtMs = InviteFixtures.nowMs + 3_600_000
        let expiry = Fixtures.date(ms: expiresAtMs)
        let signed = Invite.sign(InviteFixtures.payload(issuer: alice, expiresAtMs: expiresAtMs), by: alice)

        #expect(try Invite.verify(signed, now: Fixtures.date(ms: expiresAtMs - 1)).expiresAt == expiry)
        #expect(throws: InviteError.expired(expiry)) { try Invite.verify(signed, now: expiry) }
        #expect(throws: InviteError.expired(expiry)) {
            try Invite.verify(signed, now: Fixtures.date(ms: expiresAtMs + 1))
        }
        #expect(throws: InviteError.expired(expiry)) {
            try Invite.verify(signed, now: expiry.addingTimeInterval(365 * 86_400))
        }
    }

    @Test func expiryInThePastAtSigning() throws {
        let alice = try InviteFixtures.alice()
        let signed = Invite.sign(InviteFixtures.payload(issuer: alice, expiresAtMs: 1), by: alice)
        #expect(throws: InviteError.expired(Fixtures.date(ms: 1))) {
            try Invite.verify(signed, now: InviteFixtures.now)
        }
    }

    @Test func zeroNeverExpires() throws {
        let alice = try InviteFixtures.alice()
        let signed = Invite.sign(InviteFixtures.payload(issuer: alice, expiresAtMs: 0), by: alice)
        let invite = try Invite.verify(signed, now: .distantFuture)
        #expect(invite.expiresAt == nil)
        #expect(try Invite.verify(signed, now: Date(timeIntervalSince1970: 0)).expiresAt == nil)
    }

    @Test func changedFieldsWithTheOldSignatureAreInvalid() throws {
        let alice = try InviteFixtures.alice()
        let original = InviteFixtures.payload(issuer: alice)
        let signed = Invite.sign(original, by: alice)
        let malloryInbox = try InviteFixtures.mallory().inboxID.rawValue
        var edits: [(String, (inout WireInvitePayload) -> Void)] = [
            ("name", { $0.name = "Free crypto" }),
            ("expiry", { $0.expiresAtMs = 0 }),
            ("role", { $0.role = .owner }),
            ("approval", { $0.requiresApproval = false }),
            ("max uses", { $0.maxUses = 0 }),
            ("join inbox", { $0.joinInboxID = malloryInbox }),
            ("group reference", { $0.groupReference[0] ^= 1 }),
        ]
        edits.append(("tag", { $0.inviteTag[15] ^= 0x80 }))
        for (label, edit) in edits {
            var payload = original
            edit(&payload)
            var tampered = signed
            tampered.payload = FrameCodec.encode(payload)
            #expect(throws: InviteError.invalidSignature, "\(label)") {
                try Invite.verify(tampered, now: InviteFixtures.now)
            }
        }
    }

    @Test func everyFlippedPayloadBitIsCaught() throws {
        let signed = try InviteFixtures.signedInvite()
        for offset in 0..<signed.payload.count {
            for bit in [0, 3, 7] {
                var tampered = signed
                tampered.payload[offset] ^= UInt8(1 << bit)
                do {
                    _ = try Invite.verify(tampered, now: InviteFixtures.now)
                    Issue.record("payload byte \(offset) bit \(bit) flipped and still verified")
                } catch .invalidSignature, .malformed {
                } catch {
                    Issue.record("payload byte \(offset) bit \(bit): unexpected \(error)")
                }
            }
        }
    }

    @Test func damagedSignaturesAreInvalid() throws {
        let signed = try InviteFixtures.signedInvite()
        var variants: [Data] = [Data(), signed.signature.prefix(63), signed.signature + Data([0])]
        for offset in stride(from: 0, to: 64, by: 7) {
            var flipped = signed.signature
            flipped[offset] ^= 0x01
            variants.append(flipped)
        }
        for signature in variants {
            var tampered = signed
            tampered.signature = signature
            #expect(throws: InviteError.invalidSignature) { try Invite.verify(tampered, now: InviteFixtures.now) }
        }
    }

    @Test func signatureByAnotherIdentityIsInvalid() throws {
        let alice = try InviteFixtures.alice()
        let mallory = try InviteFixtures.mallory()
        // Alice's bundle, Mallory's signature.
        let forged = Invite.sign(InviteFixtures.payload(issuer: alice), by: mallory)
        #expect(throws: InviteError.invalidSignature) { try Invite.verify(forged, now: InviteFixtures.now) }
        // Alice's signature moved onto a payload naming Mallory as issuer.
        var payload = InviteFixtures.payload(issuer: alice)
        payload.issuer = mallory.publicIdentity.wireBundle
        var swapped = Invite.sign(payload, by: mallory)
        swapped.signature = Invite.sign(payload, by: alice).signature
        #expect(throws: InviteError.invalidSignature) { try Invite.verify(swapped, now: InviteFixtures.now) }
    }

    @Test func signatureIsDomainSeparated() throws {
        // Alice's signature over the bare payload bytes (no "rally-invite-v1"
        // prefix), as another part of Rally might produce, is not an invite
        // signature.
        let alice = try InviteFixtures.alice()
        var signed = try InviteFixtures.signedInvite()
        signed.signature = try alice.signingKey.signature(for: signed.payload)
        #expect(throws: InviteError.invalidSignature) { try Invite.verify(signed, now: InviteFixtures.now) }
        signed.signature = alice.sign(.keyBundle, signed.payload)
        #expect(throws: InviteError.invalidSignature) { try Invite.verify(signed, now: InviteFixtures.now) }
    }

    @Test("a signed tag of the wrong length is malformed", arguments: [0, 1, 15, 17, 32])
    func wrongTagLength(_ length: Int) throws {
        let alice = try InviteFixtures.alice()
        var payload = InviteFixtures.payload(issuer: alice)
        payload.inviteTag = Data(repeating: 0xAB, count: length)
        #expect(throws: InviteError.malformed("invite tag")) {
            try Invite.verify(Invite.sign(payload, by: alice), now: InviteFixtures.now)
        }
    }

    @Test(
        "a signed join inbox id that is not an inbox id is malformed",
        arguments: [
            "", "alice", String(repeating: "a", count: 31), String(repeating: "a", count: 33),
            "0000000000000000000000000000000!",
        ])
    func badJoinInboxID(_ joinInbox: String) throws {
        let alice = try InviteFixtures.alice()
        var payload = InviteFixtures.payload(issuer: alice)
        payload.joinInboxID = joinInbox
        #expect(throws: InviteError.malformed("join inbox id")) {
            try Invite.verify(Invite.sign(payload, by: alice), now: InviteFixtures.now)
        }
    }

    @Test func missingOrBadIssuerKeysAreMalformed() throws {
        let alice = try InviteFixtures.alice()
        var noIssuer = InviteFixtures.payload(issuer: alice)
        noIssuer.clearIssuer()
        var shortKey = InviteFixtures.payload(issuer: alice)
        shortKey.issuer.signingPublicKey = shortKey.issuer.signingPublicKey.prefix(31)
        var longName = InviteFixtures.payload(issuer: alice)
        longName.issuer.displayName = String(repeating: "A", count: WireLimits.maxDisplayNameBytes + 1)
        for payload in [noIssuer, shortKey, longName] {
            #expect(throws: InviteError.malformed("issuer keys")) {
                try Invite.verify(Invite.sign(payload, by: alice), now: InviteFixtures.now)
            }
        }
    }

    @Test func payloadThatIsNotAProtobufIsMalformed() throws {
        let alice = try InviteFixtures.alice()
        for bytes in [Data(), Data(repeating: 0xFF, count: 40)] {
            var signed = WireSignedInvite()
            signed.payload = bytes
            signed.signature = alice.sign(.keyBundle, bytes)
            #expect(throws: InviteError.malformed("invite payload")) {
                try Invite.verify(signed, now: InviteFixtures.now)
            }
        }
    }

    @Test func parseEndToEnd() throws {
        let alice = try InviteFixtures.alice()
        let signed = try InviteFixtures.signedInvite()
        let slug = InviteSlug.encode(signed)
        let links = InviteLink.links(for: slug, relayURL: try #require(URL(string: "wss://relay.rally.example")))

        let invite = try Invite.parse("\n  \(links.web)  \n", now: InviteFixtures.now)
        #expect(invite.issuer == alice.publicIdentity)
        #expect(invite.payload.name == "Saturday climbing")
        #expect(try Invite.parse(links.app, now: InviteFixtures.now) == invite)

        let expiry = Fixtures.date(ms: InviteFixtures.nowMs + InviteFixtures.weekMs)
        #expect(throws: InviteError.expired(expiry)) { try Invite.parse(links.app, now: expiry) }

        // Re-signed by Mallory under Alice's name, then linked.
        let forged = InviteSlug.encode(
            Invite.sign(InviteFixtures.payload(issuer: alice), by: try InviteFixtures.mallory()))
        #expect(throws: InviteError.invalidSignature) {
            try Invite.parse("rally://join/\(forged)", now: InviteFixtures.now)
        }
        #expect(throws: InviteError.notAnInviteLink("https://rally.example/groups/\(slug)")) {
            try Invite.parse("https://rally.example/groups/\(slug)", now: InviteFixtures.now)
        }
        #expect(throws: InviteError.empty) { try Invite.parse("  ", now: InviteFixtures.now) }
    }

    @Test func errorDescriptionsTellTheJoinerWhatHappened() {
        #expect(InviteError.expired(Fixtures.date(ms: 1_767_780_000_000)).description.contains("2026-01-07T10:00:00Z"))
        #expect(InviteError.invalidSignature.description.contains("signature"))
        #expect(InviteError.unsupportedVersion(2).description.contains("newer version"))
        #expect(InviteError.tooLong(characters: 5000, limit: 4096).description.contains("4096"))
    }
}
