import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

/// A send that parks every frame until `open()`, standing in for a client
/// that stopped reading.
actor StalledSend {
    private var isOpen = false
    private var parked: [CheckedContinuation<Void, Never>] = []
    private let inbox: FrameInbox

    init(_ inbox: FrameInbox) { self.inbox = inbox }

    func send(_ frame: WireServerFrame) async {
        if !isOpen { await withCheckedContinuation { parked.append($0) } }
        inbox.continuation.yield(frame)
    }

    var parkedCount: Int { parked.count }

    func stall() { isOpen = false }

    func open() {
        isOpen = true
        for continuation in parked { continuation.resume() }
        parked.removeAll()
    }
}

@Suite("Subscriptions", .timeLimit(.minutes(3)))
struct SubscriptionTests {
    private func subscribe(_ topic: String, after: UInt64, on session: RelaySession) -> WireClientFrame.OneOf_Body {
        var subscribe = WireSubscribe()
        subscribe.topic = topic
        subscribe.afterSeq = after
        if let access = foundingAccess(of: topic) { subscribe.proof = .on(session, topic: topic, access: access) }
        return .subscribe(subscribe)
    }

    @Test("subscribe from a cursor: backlog after it, Subscribed, then live")
    func backlogThenLive() async throws {
        var limits = RelayLimits.default
        limits.backlogPageSize = 2
        var harness = try SessionHarness(limits: limits)
        for index in 1...5 {
            _ = try await harness.services.writer.publish(request(groupTopic, "\(index)")).get()
        }
        await harness.authenticate(Identity(displayName: "Ada"))
        _ = await harness.session.handle(.make(1, subscribe(groupTopic, after: 2, on: harness.session)))
        var received: [UInt64] = []
        for _ in 0..<3 { received.append(try #require(await harness.reader.envelope()).seq) }
        #expect(received == [3, 4, 5])
        let subscribed = try #require(await harness.reader.reply(to: 1))
        #expect(subscribed.subscribed.caughtUpSeq == 5)
        #expect(subscribed.subscribed.topic == groupTopic)

        _ = try await harness.services.writer.publish(request(groupTopic, "6")).get()
        let live = try #require(await harness.reader.envelope())
        #expect(live.seq == 6)
        #expect(live.payload == Data("6".utf8))
        #expect(live.topic == groupTopic)
        await harness.finish()
    }

    @Test("publishes racing a subscription arrive exactly once and in order")
    func racingPublishes() async throws {
        var limits = RelayLimits.default
        limits.backlogPageSize = 7
        var harness = try SessionHarness(limits: limits)
        let writer = harness.services.writer
        for index in 1...50 { _ = try await writer.publish(request(groupTopic, "\(index)")).get() }
        await harness.authenticate(Identity(displayName: "Ada"))

        let total: UInt64 = 400
        let publishers = Task {
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<4 {
                    group.addTask {
                        for index in 0..<(350 / 4 + 1) where 50 + worker + index * 4 < Int(total) {
                            _ = await writer.publish(request(groupTopic, "w\(worker)-\(index)"))
                        }
                    }
                }
            }
        }
        _ = await harness.session.handle(.make(1, subscribe(groupTopic, after: 10, on: harness.session)))
        var received: [UInt64] = []
        while received.last != total {
            received.append(try #require(await harness.reader.envelope()).seq)
        }
        await publishers.value
        #expect(received == Array(11...total))
        let subscribed = try #require(await harness.reader.reply(to: 1))
        #expect(subscribed.subscribed.caughtUpSeq >= 50)
        await harness.finish()
    }

    @Test("a subscriber that stops reading gets SLOW_CONSUMER and is dropped; resubscribing loses nothing")
    func slowConsumer() async throws {
        var limits = RelayLimits.default
        limits.subscriberBufferSize = 4
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteRelayStore(url: directory.storeURL)
        let services = makeServices(store: store, limits: limits)
        let inbox = FrameInbox()
        let stalled = StalledSend(inbox)
        let session = RelaySession(services: services) { await stalled.send($0) }
        var reader = FrameReader(inbox)
        let identity = Identity(displayName: "Ada")

        await stalled.open()
        _ = await session.handle(
            .make(1, .authenticate(identity.authenticate(challengeNonce: session.challengeNonce, origin: testOrigin))))
        _ = await session.handle(.make(2, subscribe(groupTopic, after: 0, on: session)))
        #expect(await reader.reply(to: 2)?.subscribed.caughtUpSeq == 0)

        // The client stops reading: envelope 1 sticks in the socket write,
        // 2...5 fill the buffer, 6 overflows it and 7...10 reach nobody.
        await stalled.stall()
        _ = try await services.writer.publish(request(groupTopic, "1")).get()
        while await stalled.parkedCount < 1 { await Task.yield() }
        for index in 2...10 { _ = try await services.writer.publish(request(groupTopic, "\(index)")).get() }
        #expect(services.hub.subscriberCount(topic: groupTopic) == 0)
        await stalled.open()

        var delivered: [UInt64] = []
        for _ in 0..<5 { delivered.append(try #require(await reader.envelope()).seq) }
        #expect(delivered == [1, 2, 3, 4, 5])
        let error = try #require(await reader.take { $0.errorCode != nil })
        #expect(error.errorCode == .slowConsumer)
        #expect(error.error.topic == groupTopic)
        #expect(error.requestID == 0)
        while await session.subscribedTopics.contains(groupTopic) { await Task.yield() }

        // Resubscribing from the cursor fills the gap.
        _ = await session.handle(.make(3, subscribe(groupTopic, after: 5, on: session)))
        var resumed: [UInt64] = []
        for _ in 0..<5 { resumed.append(try #require(await reader.envelope()).seq) }
        #expect(resumed == [6, 7, 8, 9, 10])
        #expect(await reader.reply(to: 3)?.subscribed.caughtUpSeq == 10)

        await session.close()
        await services.writer.close()
        try await store.close()
    }

    @Test("after Unsubscribed nothing more of the topic is sent")
    func unsubscribe() async throws {
        var harness = try SessionHarness()
        await harness.authenticate(Identity(displayName: "Ada"))
        _ = await harness.session.handle(.make(1, subscribe(groupTopic, after: 0, on: harness.session)))
        #expect(await harness.reader.reply(to: 1)?.subscribed.caughtUpSeq == 0)
        var unsubscribe = WireUnsubscribe()
        unsubscribe.topic = groupTopic
        _ = await harness.session.handle(.make(2, .unsubscribe(unsubscribe)))
        #expect(await harness.reader.reply(to: 2)?.unsubscribed.topic == groupTopic)
        #expect(harness.services.hub.subscriberCount(topic: groupTopic) == 0)
        // A later envelope on the topic reaches nobody.
        _ = try await harness.services.writer.publish(request(groupTopic, "after")).get()
        #expect(harness.services.hub.deliver([WireEnvelope()]) == 0)
        await harness.finish()
    }

    @Test("a live envelope is encoded once: every subscriber of its topic gets the same bytes, none another topic's")
    func liveEnvelopeEncodedOnce() async throws {
        let hub = TopicHub()
        let first = hub.subscribe(topic: groupTopic, capacity: 4)
        let second = hub.subscribe(topic: groupTopic, capacity: 4)
        let elsewhere = hub.subscribe(topic: "inbox/elsewhere", capacity: 4)
        var envelope = WireEnvelope()
        envelope.topic = groupTopic
        envelope.seq = 7
        envelope.payload = Data("hello".utf8)
        #expect(hub.deliver([envelope]) == 2)
        hub.shutdown()
        var firstItems = first.items.makeAsyncIterator()
        var secondItems = second.items.makeAsyncIterator()
        let one = try #require(await firstItems.next()?.frame)
        let other = try #require(await secondItems.next()?.frame)
        // One buffer shared by both, not two equal encodings.
        let addresses = [one, other].map { $0.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) } }
        #expect(addresses[0] == addresses[1])
        let decoded = try FrameCodec.decodeServerFrame(Data(one.webSocketServerMessage.readableBytesView))
        #expect(decoded.envelope == envelope)
        #expect(decoded.requestID == 0)
        var elsewhereItems = elsewhere.items.makeAsyncIterator()
        #expect(await elsewhereItems.next() == nil)
    }
}
