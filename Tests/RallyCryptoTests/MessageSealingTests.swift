import Foundation
import RallyCrypto
import RallyWire
import Testing

@Suite("MessageSealing")
struct MessageSealingTests {
    let alice = Identity(displayName: "Alice", createdAt: Fixtures.created)
    let bob = Identity(displayName: "Bob", createdAt: Fixtures.created)
    let carol = Identity(displayName: "Carol", createdAt: Fixtures.created)

    func open(_ payload: Data, as recipient: Identity) -> Result<VerifiedMessage, RallyCryptoError> {
        outcome { () throws(RallyCryptoError) in try MessageSealing.open(payload, as: recipient) }
    }

    func seal(_ body: WireMessageBody, signedBy signer: Identity, to recipient: Identity) throws -> Data {
        try MessageSealing.seal(MessageSealing.sign(body, by: signer), to: recipient.publicIdentity)
    }

    @Test func sealThenOpenRoundTrips() throws {
        let messageID = MessageSealing.newMessageID()
        let body = Fixtures.body(from: alice, to: bob.inboxID.rawValue, text: "hi 👋", messageID: messageID)
        let payload = try seal(body, signedBy: alice, to: bob)
        let verified = try MessageSealing.open(payload, as: bob)
        #expect(verified.body == body)
        #expect(verified.messageID == messageID)
        #expect(verified.sender == alice.publicIdentity)
        #expect(verified.sender.inboxID == alice.inboxID)
        #expect(verified.body.content.content == Data("hi 👋".utf8))
    }

    @Test func sealingIsRandomizedAndHidesThePlaintext() throws {
        let body = Fixtures.body(from: alice, to: bob.inboxID.rawValue, text: "secret-marker-text")
        let first = try seal(body, signedBy: alice, to: bob)
        let second = try seal(body, signedBy: alice, to: bob)
        #expect(first != second)
        #expect(first.range(of: Data("secret-marker-text".utf8)) == nil)
        #expect(first.range(of: Data("Alice".utf8)) == nil)
        #expect(try MessageSealing.open(first, as: bob).body == (try MessageSealing.open(second, as: bob).body))
    }

    @Test func messageIDsAre16RandomBytes() {
        let ids = (0..<100).map { _ in MessageSealing.newMessageID() }
        #expect(ids.allSatisfy { $0.count == MessageSealing.messageIDByteCount })
        #expect(Set(ids).count == 100)
    }

    @Test func flippingAnyByteOfTheSealedPayloadNeverOpens() throws {
        let payload = try Fixtures.sealed(from: alice, to: bob)
        let sealed = try FrameCodec.decode(WireSealedMessage.self, from: payload, limit: .max)
        // The ciphertext is the last field, the encapsulated key is 32 bytes
        // after a 4-byte header (version field, key tag, key length).
        let ciphertextStart = payload.count - sealed.ciphertext.count
        let keyRange = 4..<36
        #expect(payload[keyRange] == sealed.encapsulatedKey)
        for index in payload.indices {
            for mask: UInt8 in [0x01, 0x80] {
                var tampered = payload
                tampered[index] ^= mask
                let result = open(tampered, as: bob)
                if index >= ciphertextStart || keyRange.contains(index) {
                    #expect(result.failure == .decryptionFailed, "byte \(index) ^ \(mask): \(result)")
                    continue
                }
                switch result {
                case .success:
                    Issue.record("byte \(index) ^ \(mask) opened")
                case .failure(.decryptionFailed), .failure(.malformed), .failure(.unsupportedVersion):
                    break
                case .failure(let other):
                    Issue.record("byte \(index) ^ \(mask): unexpected \(other)")
                }
            }
        }
    }

    @Test func truncatedOrExtendedPayloadsNeverOpen() throws {
        let payload = try Fixtures.sealed(from: alice, to: bob)
        for length in 0..<payload.count {
            let result = open(payload.prefix(length), as: bob)
            switch result {
            case .success: Issue.record("prefix of \(length) bytes opened")
            case .failure(.decryptionFailed), .failure(.malformed), .failure(.unsupportedVersion): break
            case .failure(let other): Issue.record("prefix \(length): unexpected \(other)")
            }
        }
    }

    @Test func openingAsTheWrongIdentityFails() throws {
        let payload = try Fixtures.sealed(from: alice, to: bob)
        #expect(open(payload, as: carol).failure == .decryptionFailed)
        #expect(open(payload, as: alice).failure == .decryptionFailed)
    }

    @Test func aRecipientWithTheSameAgreementKeyButAnotherInboxFails() throws {
        // The inbox id is the associated data: the same agreement key under
        // another signing key (another inbox) must not open the message.
        let payload = try Fixtures.sealed(from: alice, to: bob)
        let impostor = try Identity(
            signingKeyBytes: carol.signingKey.rawRepresentation,
            agreementKeyBytes: bob.agreementKey.rawRepresentation, displayName: "Bob?", createdAt: Date())
        #expect(open(payload, as: impostor).failure == .decryptionFailed)
    }

    @Test func aSenderBundleThatDidNotSignIsAnInvalidSignature() throws {
        // Signed by Alice, but the body claims Carol as the sender.
        var body = Fixtures.body(from: alice, to: bob.inboxID.rawValue)
        body.sender = carol.publicIdentity.wireBundle
        let payload = try seal(body, signedBy: alice, to: bob)
        #expect(open(payload, as: bob).failure == .invalidSignature("message from \(carol.inboxID)"))
    }

    @Test func aTamperedSignatureIsAnInvalidSignature() throws {
        var signed = MessageSealing.sign(Fixtures.body(from: alice, to: bob.inboxID.rawValue), by: alice)
        signed.signature[5] ^= 0x10
        let payload = try MessageSealing.seal(signed, to: bob.publicIdentity)
        #expect(open(payload, as: bob).failure == .invalidSignature("message from \(alice.inboxID)"))
    }

    @Test func aSignatureFromAnotherDomainIsAnInvalidSignature() throws {
        var signed = MessageSealing.sign(Fixtures.body(from: alice, to: bob.inboxID.rawValue), by: alice)
        signed.signature = alice.sign(.keyBundle, signed.body)
        let payload = try MessageSealing.seal(signed, to: bob.publicIdentity)
        #expect(open(payload, as: bob).failure == .invalidSignature("message from \(alice.inboxID)"))
    }

    @Test func sealedToBobButAddressedToCarolIsTheWrongRecipient() throws {
        let body = Fixtures.body(from: alice, to: carol.inboxID.rawValue)
        let payload = try seal(body, signedBy: alice, to: bob)
        #expect(open(payload, as: bob).failure == .wrongRecipient)
    }

    @Test func aMessageResealedToAThirdPartyIsTheWrongRecipient() throws {
        // Bob forwards Alice's signed message to Carol as if Alice wrote to her.
        let signed = MessageSealing.sign(Fixtures.body(from: alice, to: bob.inboxID.rawValue), by: alice)
        let resealed = try MessageSealing.seal(signed, to: carol.publicIdentity)
        #expect(open(resealed, as: carol).failure == .wrongRecipient)
    }

    @Test("an empty or differently spelled recipient is the wrong recipient", arguments: ["", " ", "UPPER"])
    func recipientSpelling(_ variant: String) throws {
        let recipient =
            switch variant {
            case "": ""
            case " ": bob.inboxID.rawValue + " "
            default: bob.inboxID.rawValue.uppercased()
            }
        let payload = try seal(Fixtures.body(from: alice, to: recipient), signedBy: alice, to: bob)
        #expect(open(payload, as: bob).failure == .wrongRecipient)
    }

    @Test("an unknown seal version is unsupported", arguments: [UInt32(0), 2, .max])
    func wrongVersion(_ version: UInt32) throws {
        let payload = try Fixtures.sealed(from: alice, to: bob)
        var sealed = try FrameCodec.decode(WireSealedMessage.self, from: payload, limit: .max)
        sealed.version = version
        #expect(open(FrameCodec.encode(sealed), as: bob).failure == .unsupportedVersion(version))
    }

    @Test("a message id of the wrong length is malformed", arguments: [0, 1, 15, 17, 32])
    func wrongMessageIDLength(_ length: Int) throws {
        let body = Fixtures.body(
            from: alice, to: bob.inboxID.rawValue, messageID: Data(repeating: 7, count: length))
        let payload = try seal(body, signedBy: alice, to: bob)
        #expect(open(payload, as: bob).failure == .malformed("message id"))
        let signed = MessageSealing.sign(body, by: alice)
        #expect(
            outcome { () throws(RallyCryptoError) in try MessageSealing.verify(signed) }.failure
                == .malformed("message id"))
    }

    @Test(
        "payloads that are not a sealed message are malformed",
        arguments: [Data(), Data([0xFF]), Data(repeating: 0xFF, count: 64)])
    func garbagePayload(_ payload: Data) {
        #expect(open(payload, as: bob).failure == .malformed("sealed message"))
    }

    @Test func anOversizedPayloadIsMalformed() {
        let payload = Data(repeating: 0, count: WireLimits.maxFrameBytes + 1)
        #expect(open(payload, as: bob).failure == .malformed("sealed message"))
    }

    @Test func anEmptySealIsUndecryptable() {
        var sealed = WireSealedMessage()
        sealed.version = MessageSealing.sealVersion
        #expect(open(FrameCodec.encode(sealed), as: bob).failure == .decryptionFailed)
        sealed.encapsulatedKey = Data(repeating: 9, count: 32)
        sealed.ciphertext = Data(repeating: 1, count: 100)
        #expect(open(FrameCodec.encode(sealed), as: bob).failure == .decryptionFailed)
    }

    @Test func sealedEmptySignedMessageIsMalformed() throws {
        let payload = try MessageSealing.seal(WireSignedMessage(), to: bob.publicIdentity)
        #expect(open(payload, as: bob).failure == .malformed("signed message"))
    }

    @Test func aSignedMessageWithAGarbageBodyIsMalformed() throws {
        var signed = WireSignedMessage()
        signed.body = Data(repeating: 0xFF, count: 20)
        signed.signature = alice.sign(.message, signed.body)
        let payload = try MessageSealing.seal(signed, to: bob.publicIdentity)
        #expect(open(payload, as: bob).failure == .malformed("message body"))
    }

    @Test func aBodyWithoutSenderKeysHasAnInvalidPublicKey() throws {
        var body = Fixtures.body(from: alice, to: bob.inboxID.rawValue)
        body.clearSender()
        let payload = try seal(body, signedBy: alice, to: bob)
        #expect(open(payload, as: bob).failure == .invalidPublicKey("key bundle keys must be 32 bytes each"))
    }

    @Test func errorDescriptionsAreReadable() {
        #expect(RallyCryptoError.decryptionFailed.description.hasPrefix("decryption failed"))
        #expect(RallyCryptoError.wrongRecipient.description == "message was addressed to another recipient")
        #expect(RallyCryptoError.unsupportedVersion(3).description == "unsupported version 3")
        #expect(RallyCryptoError.tooLarge(size: 5, limit: 4).description == "5 bytes exceeds the limit of 4")
        #expect(RallyCryptoError.invalidInboxID("x").description.contains("\"x\""))
    }
}
