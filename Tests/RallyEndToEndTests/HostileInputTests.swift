import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

@Suite("Hostile input, end to end", .timeLimit(.minutes(10)))
struct HostileInputTests {
    /// Posts raw bytes to an inbox as an envelope payload, the way an
    /// attacker who knows the inbox id could.
    func post(_ payload: Data, to inbox: InboxID, relay: URL) async throws {
        let connection = try await RelayConnection.connect(to: relay, identity: nil, logger: TestLogger.quiet)
        _ = try await connection.publish(
            topic: try .inbox(inbox.rawValue), payload: payload, idempotencyKey: MessageSealing.newMessageID())
        await connection.close()
    }

    func sealedText(
        _ text: String, from sender: Identity, to recipient: PublicIdentity
    ) throws -> (WireMessageBody, Data) {
        var body = WireMessageBody()
        body.messageID = MessageSealing.newMessageID()
        body.sender = sender.publicIdentity.wireBundle
        body.recipient = recipient.inboxID.rawValue
        body.sentAtMs = 1
        body.content = try TextCodec().encode(text)
        return (body, try MessageSealing.seal(MessageSealing.sign(body, by: sender), to: recipient))
    }

    @Test("Tampered ciphertext and bad signatures are rejected with typed errors and nothing is stored")
    func tamperedAndForged() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-homes")
        defer { homes.remove() }
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: relay.url, displayName: "Bob", logger: TestLogger.quiet)
        let mallory = Identity(displayName: "Mallory")
        let alice = Identity(displayName: "Alice")

        // 1. A valid message with one ciphertext byte flipped.
        var (_, tampered) = try sealedText("tampered", from: alice, to: bob.identity.publicIdentity)
        tampered[tampered.count - 5] ^= 0x01
        try await post(tampered, to: bob.inboxID, relay: relay.url)

        // 2. Mallory claims to be Alice: Alice's keys in the body, Mallory's
        // signature, sealed correctly to Bob.
        var forgedBody = WireMessageBody()
        forgedBody.messageID = MessageSealing.newMessageID()
        forgedBody.sender = alice.publicIdentity.wireBundle
        forgedBody.recipient = bob.inboxID.rawValue
        forgedBody.content = try TextCodec().encode("I am Alice, honest")
        var forged = MessageSealing.sign(forgedBody, by: mallory)
        forged.signature = mallory.sign(.message, forged.body)
        try await post(
            try MessageSealing.seal(forged, to: bob.identity.publicIdentity), to: bob.inboxID, relay: relay.url)

        // 3. Garbage.
        try await post(Data([0xde, 0xad, 0xbe, 0xef]), to: bob.inboxID, relay: relay.url)

        // 4. A genuine message after all that.
        let (_, genuine) = try sealedText("genuine", from: alice, to: bob.identity.publicIdentity)
        try await post(genuine, to: bob.inboxID, relay: relay.url)

        let report = try await bob.syncInbox()
        #expect(report.received.map(\.displayText) == ["genuine"])
        #expect(
            report.rejected.map(\.reason) == [
                .decryptionFailed,
                .invalidSignature("message from \(alice.inboxID)"),
                .malformed("sealed message"),
            ])
        #expect(report.rejected.map(\.seq) == [1, 2, 3])
        #expect(try bob.store.messageCount() == 1)
        // The cursor moved past the rejected envelopes: they are not retried.
        #expect(try await bob.syncInbox().rejected.isEmpty)
        await bob.disconnect()
        await relay.stop()
    }

    @Test("Truncated and oversized frames get typed errors, and the relay keeps serving others")
    func badFrames() async throws {
        let relay = try await TestRelay.start()
        let identity = Identity(displayName: "bystander")
        let access = try TopicAccess(secret: TopicAccess.newSecret())
        let topic = try TopicName(validating: "test/\(access.foundedTopicID)")
        let bystander = try await RelayConnection.connect(to: relay.url, identity: identity, logger: TestLogger.quiet)

        var frame = WireClientFrame()
        frame.requestID = 7
        frame.publish.topic = topic.rawValue
        frame.publish.payload = Data(repeating: 0x42, count: 64)
        frame.publish.idempotencyKey = MessageSealing.newMessageID()
        let encoded = FrameCodec.encode(frame)

        let attacks: [(Data, WireErrorCode)] = [
            (Data(encoded.prefix(encoded.count / 2)), .malformedFrame),
            (Data(repeating: 0xFF, count: 32), .malformedFrame),
            (Data(repeating: 0x0A, count: WireLimits.maxFrameBytes + 1), .frameTooLarge),
        ]
        for (attack, expected) in attacks {
            let attacker = try await RelayConnection.connect(to: relay.url, identity: nil, logger: TestLogger.quiet)
            let refusal = try await expectPushedError(on: attacker, after: attack)
            #expect(refusal == expected, "\(attack.count)-byte attack")
            await attacker.close()
        }

        // A payload over the limit in a well-formed frame: refused, not stored.
        let large = try await RelayConnection.connect(to: relay.url, identity: nil, logger: TestLogger.quiet)
        do {
            _ = try await large.publish(
                topic: topic, payload: Data(count: WireLimits.maxPayloadBytes + 1),
                idempotencyKey: MessageSealing.newMessageID(), access: access)
            Issue.record("an oversized payload was accepted")
        } catch .refused(let code, _) {
            #expect(code == .payloadTooLarge)
        } catch {
            Issue.record("expected payload_too_large, got \(error)")
        }
        await large.close()

        // The bystander is unaffected and the topic holds only its publish.
        let ack = try await bystander.publish(
            topic: topic, payload: Data("still here".utf8), idempotencyKey: MessageSealing.newMessageID(),
            access: access)
        #expect(ack.seq == 1)
        let stream = await bystander.subscribe(topic: topic, after: 0, access: access)
        let stored = try await collect(stream) { $0.count == 1 }
        #expect(stored.map(\.payload) == [Data("still here".utf8)])
        await bystander.close()
        await relay.stop()
    }

    /// Sends raw bytes and returns the error code of the relay's answer.
    func expectPushedError(on connection: RelayConnection, after bytes: Data) async throws -> WireErrorCode? {
        // A ping after the bad frame: if the relay closed the connection
        // with a typed error, the ping fails with that error.
        try await connection.sendRaw(bytes)
        do {
            try await connection.ping()
        } catch .refused(let code, _) {
            return code
        } catch {
            return nil
        }
        return nil
    }
}
