import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

/// Collects a subscription's envelopes until a condition holds.
func collect(
    _ stream: AsyncThrowingStream<RelayConnection.SubscriptionEvent, any Error>,
    until done: ([WireEnvelope]) -> Bool
) async throws -> [WireEnvelope] {
    var envelopes: [WireEnvelope] = []
    if done(envelopes) { return envelopes }
    for try await event in stream {
        if case .envelope(let envelope) = event { envelopes.append(envelope) }
        if done(envelopes) { break }
    }
    return envelopes
}

@Suite("Relay guarantees, end to end", .timeLimit(.minutes(10)))
struct RelayGuaranteeTests {
    @Test("Every acknowledged publish survives SIGKILL of the relay and a restart")
    func acknowledgedSurvivesKill() async throws {
        let directory = TemporaryDirectory("rally-kill")
        defer { directory.remove() }
        let data = directory.path("data")
        let relay = try await RelayProcess.start(dataDirectory: data)
        let identity = Identity(displayName: "publisher")
        // A capability topic (docs/adr/0008): its id names its access key.
        let access = try TopicAccess(secret: TopicAccess.newSecret())
        let topic = try TopicName(validating: "test/\(access.foundedTopicID)")

        let acked = await publishUntilKilled(relayURL: relay.url, identity: identity, topic: topic, access: access) {
            await relay.kill(signal: SIGKILL)
        }
        #expect(relay.terminationStatus != 0)

        let restarted = try await RelayProcess.start(dataDirectory: data)

        let reader = try await RelayConnection.connect(to: restarted.url, identity: identity, logger: TestLogger.quiet)
        let stream = await reader.subscribe(topic: topic, after: 0, access: access)
        var stored: [WireEnvelope] = []
        for try await event in stream {
            if case .envelope(let envelope) = event { stored.append(envelope) }
            if case .caughtUp = event { break }
        }
        expectAcknowledgedStored(acked, stored)
        await reader.close()
        // SIGTERM is a graceful stop: the relay exits cleanly.
        await restarted.kill(signal: SIGTERM)
        #expect(restarted.terminationStatus == 0)
    }

    @Test("A publish retried with the same idempotency key after a lost ack is stored once")
    func retryAfterLostAck() async throws {
        let relay = try await TestRelay.start()
        let identity = Identity(displayName: "sender")
        let access = try TopicAccess(secret: TopicAccess.newSecret())
        let topic = try TopicName(validating: "test/\(access.foundedTopicID)")
        let watcher = try await RelayConnection.connect(to: relay.url, identity: identity, logger: TestLogger.quiet)
        let stream = await watcher.subscribe(topic: topic, after: 0, access: access)
        var events = stream.makeAsyncIterator()
        #expect(try await events.next() == .caughtUp(seq: 0))

        // Send the publish and hang up without reading the ack: the relay
        // commits it and its ack goes to a connection that is gone.
        let key = MessageSealing.newMessageID()
        var frame = WireClientFrame()
        frame.requestID = 1
        frame.publish.topic = topic.rawValue
        frame.publish.payload = Data("once".utf8)
        frame.publish.idempotencyKey = key
        let first = try await RelayConnection.connect(to: relay.url, identity: identity, logger: TestLogger.quiet)
        frame.publish.proof = access.connectionProof(
            origin: first.origin, challengeNonce: try #require(await first.challengeNonce), topic: topic.rawValue)
        try await first.sendRaw(FrameCodec.encode(frame))
        await first.close()
        // The watcher seeing it proves the commit happened.
        guard case .envelope(let committed)? = try await events.next() else {
            Issue.record("expected the committed envelope")
            return
        }
        #expect(committed.seq == 1)

        let retry = try await RelayConnection.connect(to: relay.url, identity: identity, logger: TestLogger.quiet)
        let ack = try await retry.publish(
            topic: topic, payload: Data("once".utf8), idempotencyKey: key, access: access)
        #expect(ack.seq == 1)
        #expect(ack.duplicate)
        // The next distinct publish is the very next envelope the watcher
        // sees: the retry added nothing.
        let next = try await retry.publish(
            topic: topic, payload: Data("next".utf8), idempotencyKey: MessageSealing.newMessageID(), access: access)
        #expect(next.seq == 2)
        guard case .envelope(let following)? = try await events.next() else {
            Issue.record("expected the next envelope")
            return
        }
        #expect(following.seq == 2)
        #expect(following.payload == Data("next".utf8))

        await retry.close()
        await watcher.close()
        await relay.stop()
    }

    @Test("Capabilities through RelayConnection: typed CONFLICT and ACCESS_REVOKED, a retired key's stream ends")
    func capabilitiesThroughTheClient() async throws {
        let relay = try await TestRelay.start()
        let identity = Identity(displayName: "member")
        let first = try TopicAccess(secret: TopicAccess.newSecret())
        let second = try TopicAccess(secret: TopicAccess.newSecret())
        let topic = try TopicName.group(first.foundedTopicID)
        let connection = try await RelayConnection.connect(to: relay.url, identity: identity, logger: TestLogger.quiet)
        func publish(
            _ text: String, _ access: TopicAccess?, control: Bool = false, expected: UInt64 = 0,
            rotate: TopicAccess? = nil
        ) async throws(RelayClientError) -> WirePublishAck {
            try await connection.publish(
                topic: topic, payload: Data(text.utf8), idempotencyKey: MessageSealing.newMessageID(),
                access: access, control: control, expectedControlSeq: expected, rotateAccessKey: rotate?.publicKey)
        }
        await #expect(throws: RelayClientError.refused(code: .forbidden, message: "this topic needs a topic proof")) {
            try await publish("no proof", nil)
        }
        #expect(try await publish("create", first, control: true).seq == 1)
        await #expect(throws: RelayClientError.conflict(topic: topic.rawValue, lastControlSeq: 1)) {
            try await publish("stale commit", first, control: true, expected: 0)
        }
        #expect(try await publish("rotate", first, control: true, expected: 1, rotate: second).seq == 2)
        await #expect(throws: RelayClientError.accessRevoked(topic: topic.rawValue, lastReadableSeq: 2)) {
            try await publish("late", first)
        }
        #expect(try await publish("3", second).seq == 3)
        // The removed member's stream delivers up to the rotation, then ends.
        var seen: [UInt64] = []
        var controls: [Bool] = []
        do {
            for try await event in await connection.subscribe(topic: topic, after: 0, access: first) {
                if case .envelope(let envelope) = event {
                    seen.append(envelope.seq)
                    controls.append(envelope.control)
                }
            }
            Issue.record("the stream ended without an error")
        } catch let error as RelayClientError {
            #expect(error == .accessRevoked(topic: topic.rawValue, lastReadableSeq: 2))
        }
        #expect(seen == [1, 2])
        #expect(controls == [true, true])
        await connection.close()
        await relay.stop()
    }

    @Test("Subscribing to another identity's inbox is refused")
    func foreignInboxRefused() async throws {
        let relay = try await TestRelay.start()
        let owner = Identity(displayName: "owner")
        let snoop = Identity(displayName: "snoop")
        let connection = try await RelayConnection.connect(to: relay.url, identity: snoop, logger: TestLogger.quiet)
        let stream = await connection.subscribe(topic: try .inbox(owner.inboxID.rawValue), after: 0)
        do {
            for try await _ in stream {}
            Issue.record("the subscription should have been refused")
        } catch let error as RelayClientError {
            guard case .refused(code: .forbidden, _) = error else {
                Issue.record("expected forbidden, got \(error)")
                return
            }
        }
        // Its own inbox is fine on the same connection.
        let own = await connection.subscribe(topic: try .inbox(snoop.inboxID.rawValue), after: 0)
        var iterator = own.makeAsyncIterator()
        #expect(try await iterator.next() == .caughtUp(seq: 0))

        // An unauthenticated connection cannot read any inbox either.
        let anonymous = try await RelayConnection.connect(to: relay.url, identity: nil, logger: TestLogger.quiet)
        let denied = await anonymous.subscribe(topic: try .inbox(owner.inboxID.rawValue), after: 0)
        await #expect(throws: RelayClientError.self) {
            for try await _ in denied {}
        }
        await connection.close()
        await anonymous.close()
        await relay.stop()
    }
}
