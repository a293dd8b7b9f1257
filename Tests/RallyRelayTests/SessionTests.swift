import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

/// A session wired to a real store, writer and hub, with its output
/// collected instead of written to a socket.
struct SessionHarness {
    let directory: TemporaryDirectory
    let store: SQLiteRelayStore
    let services: RelayServices
    let session: RelaySession
    let inbox: FrameInbox
    var reader: FrameReader
    /// Attach a proof by the topic's founding test key to publishes and
    /// subscribes of capability topics that carry none.
    var autoProof = true

    init(clock: any RelayClock = SystemRelayClock(), limits: RelayLimits = .default) throws {
        directory = try TemporaryDirectory()
        store = try SQLiteRelayStore(url: directory.storeURL)
        services = makeServices(store: store, clock: clock, limits: limits)
        inbox = FrameInbox()
        session = RelaySession(services: services, send: inbox.send)
        reader = FrameReader(inbox)
        let session = session
        Task { await session.pumpAcks() }
    }

    /// Sends a frame and returns the reply carrying its request id.
    mutating func call(_ requestID: UInt64, _ body: WireClientFrame.OneOf_Body) async -> WireServerFrame? {
        var body = body
        if autoProof {
            switch body {
            case .publish(var publish) where !publish.hasProof && !publish.topic.hasPrefix("inbox/"):
                if let access = foundingAccess(of: publish.topic) {
                    publish.proof = .on(session, topic: publish.topic, access: access)
                    body = .publish(publish)
                }
            case .subscribe(var subscribe) where !subscribe.hasProof && !subscribe.topic.hasPrefix("inbox/"):
                if let access = foundingAccess(of: subscribe.topic) {
                    subscribe.proof = .on(session, topic: subscribe.topic, access: access)
                    body = .subscribe(subscribe)
                }
            default: break
            }
        }
        let disposition = await session.handle(.make(requestID, body))
        #expect(disposition == .keepOpen)
        return await reader.reply(to: requestID)
    }

    @discardableResult
    mutating func authenticate(_ identity: Identity) async -> WireServerFrame? {
        await call(
            9_000, .authenticate(identity.authenticate(challengeNonce: session.challengeNonce, origin: testOrigin)))
    }

    func finish() async {
        await session.close()
        await services.writer.close()
        try? await store.close()
        directory.remove()
    }
}

@Suite("Relay session", .timeLimit(.minutes(1)))
struct SessionTests {
    @Test("the challenge announces nonce, protocol version and limits")
    func challenge() async throws {
        let clock = ManualRelayClock()
        let harness = try SessionHarness(clock: clock)
        let challenge = harness.session.challengeFrame.challenge
        #expect(challenge.nonce.count == 32)
        #expect(challenge.nonce == harness.session.challengeNonce)
        #expect(challenge.protocolVersion == WireLimits.protocolVersion)
        #expect(challenge.maxPayloadBytes == UInt32(WireLimits.maxPayloadBytes))
        #expect(challenge.authTimeoutMs == 10_000)
        #expect(challenge.serverTimeMs == clock.nowMilliseconds)
        let other = try SessionHarness()
        #expect(other.session.challengeNonce != challenge.nonce)
        await harness.finish()
        await other.finish()
    }

    @Test("authentication: a signature over the nonce passes, anything else fails")
    func authentication() async throws {
        var harness = try SessionHarness()
        let identity = Identity(displayName: "Ada")
        var forged = identity.authenticate(challengeNonce: Data(count: 32), origin: testOrigin)
        let failed = await harness.call(1, .authenticate(forged))
        #expect(failed?.errorCode == .authenticationFailed)
        // Bound to the origin: a signature made for another relay (a relay
        // passing its challenge through) is refused.
        let elsewhere = identity.authenticate(
            challengeNonce: harness.session.challengeNonce, origin: "https://evil.example")
        #expect(await harness.call(3, .authenticate(elsewhere))?.errorCode == .authenticationFailed)
        forged.signingPublicKey = Data([1, 2, 3])
        #expect(await harness.call(2, .authenticate(forged))?.errorCode == .authenticationFailed)
        #expect(harness.session.inboxID == nil)

        let reply = await harness.authenticate(identity)
        #expect(reply?.authenticated.inboxID == identity.inboxID.rawValue)
        #expect(harness.session.inboxID == identity.inboxID)
        #expect(await harness.session.authTimeoutElapsed() == .keepOpen)
        await harness.finish()
    }

    @Test("no authentication in time: AUTHENTICATION_TIMEOUT, then close")
    func authenticationTimeout() async throws {
        var harness = try SessionHarness()
        #expect(await harness.session.authTimeoutElapsed() == .close)
        let frame = await harness.reader.take { $0.errorCode != nil }
        #expect(frame?.errorCode == .authenticationTimeout)
        await harness.finish()
    }

    @Test("ping is answered with pong carrying the nonce and request id")
    func ping() async throws {
        var harness = try SessionHarness()
        var ping = WirePing()
        ping.nonce = 77
        let reply = await harness.call(5, .ping(ping))
        #expect(reply?.pong.nonce == 77)
        #expect(reply?.requestID == 5)
        await harness.finish()
    }

    @Test("an inbox is readable by its owner only")
    func inboxReadByOwnerOnly() async throws {
        var harness = try SessionHarness()
        let owner = Identity(displayName: "Owner")
        let stranger = Identity(displayName: "Stranger")
        var subscribe = WireSubscribe()
        subscribe.topic = "inbox/" + owner.inboxID.rawValue
        #expect(await harness.call(1, .subscribe(subscribe))?.errorCode == .notAuthenticated)

        await harness.authenticate(stranger)
        let refused = await harness.call(2, .subscribe(subscribe))
        #expect(refused?.errorCode == .forbidden)
        #expect(refused?.error.topic == subscribe.topic)

        // Posting to someone else's inbox is fine.
        let ack = await harness.call(3, .publish(publishBody(subscribe.topic, "hi")))
        #expect(ack?.publishAck.seq == 1)

        var ownerHarness = try SessionHarness()
        await ownerHarness.authenticate(owner)
        #expect(await ownerHarness.call(4, .subscribe(subscribe))?.subscribed.caughtUpSeq == 0)
        await harness.finish()
        await ownerHarness.finish()
    }

    @Test("an oversized payload is refused and nothing is stored")
    func payloadTooLarge() async throws {
        var harness = try SessionHarness()
        var publish = publishBody(groupTopic, "")
        publish.payload = Data(count: WireLimits.maxPayloadBytes + 1)
        let reply = await harness.call(1, .publish(publish))
        #expect(reply?.errorCode == .payloadTooLarge)
        #expect(reply?.error.topic == groupTopic)
        #expect(try await harness.store.headSeq(topic: groupTopic) == 0)

        publish.payload = Data(count: WireLimits.maxPayloadBytes)
        #expect(await harness.call(2, .publish(publish))?.publishAck.seq == 1)
        await harness.finish()
    }

    @Test("invalid topics and idempotency keys are refused")
    func invalidPublishes() async throws {
        var harness = try SessionHarness()
        #expect(await harness.call(1, .publish(publishBody("Group/X", "x")))?.errorCode == .invalidTopic)
        #expect(await harness.call(2, .publish(publishBody("nokind", "x")))?.errorCode == .invalidTopic)
        var publish = publishBody(groupTopic, "x")
        publish.idempotencyKey = Data(count: WireLimits.maxIdempotencyKeyBytes + 1)
        #expect(await harness.call(3, .publish(publish))?.errorCode == .invalidRequest)
        #expect(await harness.session.handle(WireClientFrame()) == .keepOpen)
        #expect(await harness.reader.reply(to: 0)?.errorCode == .invalidRequest)
        #expect(try await harness.store.headSeq(topic: groupTopic) == 0)
        await harness.finish()
    }

    @Test("a retried publish is acknowledged with the same seq and marked duplicate")
    func idempotentPublish() async throws {
        var harness = try SessionHarness()
        let first = await harness.call(1, .publish(publishBody(groupTopic, "x", key: "key-1")))
        let retry = await harness.call(2, .publish(publishBody(groupTopic, "x", key: "key-1")))
        #expect(first?.publishAck.seq == 1 && first?.publishAck.duplicate == false)
        #expect(retry?.publishAck.seq == 1 && retry?.publishAck.duplicate == true)
        #expect(try await harness.store.headSeq(topic: groupTopic) == 1)
        await harness.finish()
    }

    @Test("garbage, truncated, empty and oversized frames are fatal with a typed error")
    func badFrames() async throws {
        let valid = WireClientFrame.make(1, .publish(publishBody(groupTopic, String(repeating: "x", count: 100)))).bytes
        let cases: [(Data, WireErrorCode)] = [
            (Data([0xFF, 0xFF, 0xFF, 0xFF, 0xFF]), .malformedFrame),
            (valid.prefix(valid.count - 10), .malformedFrame),
            (Data(), .malformedFrame),
            (Data(count: WireLimits.maxFrameBytes + 1), .frameTooLarge),
        ]
        for (bytes, code) in cases {
            var harness = try SessionHarness()
            #expect(await harness.session.receive(bytes) == .close)
            let frame = await harness.reader.take { $0.errorCode != nil }
            #expect(frame?.errorCode == code)
            #expect(try await harness.store.headSeq(topic: groupTopic) == 0)
            await harness.finish()
        }
        // A text message is not a frame either.
        let harness = try SessionHarness()
        #expect(await harness.session.reject(RelayFailure(.malformedFrame, "text")) == .close)
        await harness.finish()
    }

    @Test("publishes over the rate are refused with retry_after and not stored")
    func rateLimit() async throws {
        let clock = ManualRelayClock()
        var limits = RelayLimits.default
        limits.publishRatePerSecond = 2
        limits.publishBurst = 3
        var harness = try SessionHarness(clock: clock, limits: limits)
        for index in 1...3 {
            #expect(
                await harness.call(UInt64(index), .publish(publishBody(groupTopic, "\(index)")))?.publishAck.seq
                    == UInt64(index))
        }
        let limited = await harness.call(4, .publish(publishBody(groupTopic, "4")))
        #expect(limited?.errorCode == .rateLimited)
        #expect(limited?.error.retryAfterMs == 500)
        #expect(try await harness.store.headSeq(topic: groupTopic) == 3)

        clock.advance(by: .milliseconds(499))
        #expect(await harness.call(5, .publish(publishBody(groupTopic, "5")))?.error.retryAfterMs == 1)
        clock.advance(by: .milliseconds(1))
        #expect(await harness.call(6, .publish(publishBody(groupTopic, "6")))?.publishAck.seq == 4)
        // The bucket refills to its burst, not beyond.
        clock.advance(by: .seconds(60))
        for index in 7...9 {
            #expect(await harness.call(UInt64(index), .publish(publishBody(groupTopic, "\(index)")))?.publishAck != nil)
        }
        #expect(await harness.call(10, .publish(publishBody(groupTopic, "10")))?.errorCode == .rateLimited)
        await harness.finish()
    }

    @Test("key bundles: a valid one is stored and served, a forged one is refused and not stored")
    func keyBundles() async throws {
        var harness = try SessionHarness()
        let identity = Identity(displayName: "Ada")
        var get = WireGetKeyBundle()
        get.inboxID = identity.inboxID.rawValue
        #expect(await harness.call(1, .getKeyBundle(get))?.errorCode == .notFound)

        var forged = identity.signedKeyBundle()
        forged.signature[0] ^= 0x01
        var put = WirePutKeyBundle()
        put.bundle = forged
        #expect(await harness.call(2, .putKeyBundle(put))?.errorCode == .invalidSignature)
        #expect(await harness.call(3, .getKeyBundle(get))?.errorCode == .notFound)

        put.bundle = identity.signedKeyBundle()
        #expect(await harness.call(4, .putKeyBundle(put))?.keyBundle.bundle == put.bundle)
        #expect(await harness.call(5, .getKeyBundle(get))?.keyBundle.bundle == put.bundle)

        get.inboxID = "not an inbox id"
        #expect(await harness.call(6, .getKeyBundle(get))?.errorCode == .invalidRequest)
        await harness.finish()
    }

    @Test("too many subscriptions are refused; resubscribing a topic is not a new one")
    func tooManySubscriptions() async throws {
        var limits = RelayLimits.default
        limits.maxSubscriptionsPerConnection = 2
        var harness = try SessionHarness(limits: limits)
        await harness.authenticate(Identity(displayName: "Ada"))
        func subscribe(_ topic: String) -> WireClientFrame.OneOf_Body {
            var subscribe = WireSubscribe()
            subscribe.topic = topic
            return .subscribe(subscribe)
        }
        let (a, b, c) = (testTopic(1), testTopic(2), testTopic(3))
        #expect(await harness.call(1, subscribe(a))?.subscribed.topic == a)
        #expect(await harness.call(2, subscribe(b))?.subscribed.topic == b)
        #expect(await harness.call(3, subscribe(a))?.subscribed.topic == a)
        #expect(await harness.call(4, subscribe(c))?.errorCode == .tooManySubscriptions)

        var unsubscribe = WireUnsubscribe()
        unsubscribe.topic = b
        #expect(await harness.call(5, .unsubscribe(unsubscribe))?.unsubscribed.topic == b)
        #expect(harness.services.hub.subscriberCount(topic: b) == 0)
        #expect(await harness.call(6, subscribe(c))?.subscribed.topic == c)
        #expect(await harness.session.subscribedTopics == [a, c])
        await harness.finish()
    }
}
