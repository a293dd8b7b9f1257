import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

/// The relay's limits (issue 8, item 7): each one is shown to bite.
@Suite("Relay limits", .timeLimit(.minutes(1)))
struct LimitsTests {
    /// A second session on the same services, as from another connection.
    static func session(
        _ services: RelayServices, ip: String, inbox: FrameInbox
    ) -> RelaySession {
        let session = RelaySession(services: services, remoteIP: ip, send: inbox.send)
        Task { await session.pumpAcks() }
        return session
    }

    static func publish(
        _ session: RelaySession, _ requestID: UInt64, _ reader: inout FrameReader, topic: String = groupTopic
    ) async -> WireServerFrame? {
        var body = publishBody(topic, "\(requestID)")
        if let access = foundingAccess(of: topic) { body.proof = .on(session, topic: topic, access: access) }
        _ = await session.handle(.make(requestID, .publish(body)))
        return await reader.reply(to: requestID)
    }

    @Test("publishes are rate limited per IP address across connections")
    func perIP() async throws {
        var limits = RelayLimits.default
        limits.publishRatePerSecondPerIP = 1
        limits.publishBurstPerIP = 2
        let clock = ManualRelayClock()
        let harness = try SessionHarness(clock: clock, limits: limits)
        let inbox = FrameInbox()
        var reader = FrameReader(inbox)
        let first = Self.session(harness.services, ip: "192.0.2.1", inbox: inbox)
        let second = Self.session(harness.services, ip: "192.0.2.1", inbox: inbox)
        let elsewhere = Self.session(harness.services, ip: "192.0.2.2", inbox: inbox)
        #expect(await Self.publish(first, 1, &reader)?.publishAck.seq == 1)
        #expect(await Self.publish(second, 2, &reader)?.publishAck.seq == 2)
        let limited = await Self.publish(second, 3, &reader)
        #expect(limited?.errorCode == .rateLimited)
        #expect(limited?.error.retryAfterMs == 1000)
        #expect(await Self.publish(elsewhere, 4, &reader)?.publishAck.seq == 3)
        clock.advance(by: .seconds(1))
        #expect(await Self.publish(first, 5, &reader)?.publishAck.seq == 4)
        for session in [first, second, elsewhere] { await session.close() }
        await harness.finish()
    }

    @Test("publishes are rate limited per identity across connections and addresses")
    func perIdentity() async throws {
        var limits = RelayLimits.default
        limits.publishRatePerSecondPerIdentity = 1
        limits.publishBurstPerIdentity = 1
        let clock = ManualRelayClock()
        let harness = try SessionHarness(clock: clock, limits: limits)
        let inbox = FrameInbox()
        var reader = FrameReader(inbox)
        let identity = Identity(displayName: "Ada")
        let first = Self.session(harness.services, ip: "192.0.2.1", inbox: inbox)
        let second = Self.session(harness.services, ip: "192.0.2.2", inbox: inbox)
        for (index, session) in [first, second].enumerated() {
            let auth = identity.authenticate(challengeNonce: session.challengeNonce, origin: testOrigin)
            _ = await session.handle(.make(100 + UInt64(index), .authenticate(auth)))
            #expect(await reader.reply(to: 100 + UInt64(index))?.authenticated.inboxID == identity.inboxID.rawValue)
        }
        #expect(await Self.publish(first, 1, &reader)?.publishAck.seq == 1)
        #expect(await Self.publish(second, 2, &reader)?.errorCode == .rateLimited)
        clock.advance(by: .seconds(1))
        #expect(await Self.publish(second, 3, &reader)?.publishAck.seq == 2)
        for session in [first, second] { await session.close() }
        await harness.finish()
    }

    @Test("a connection that published before authenticating is held to its identity's limit after it")
    func identityLimitAfterLateAuthentication() async throws {
        var limits = RelayLimits.default
        limits.publishRatePerSecondPerIdentity = 1
        limits.publishBurstPerIdentity = 1
        let harness = try SessionHarness(clock: ManualRelayClock(), limits: limits)
        let inbox = FrameInbox()
        var reader = FrameReader(inbox)
        let session = Self.session(harness.services, ip: "192.0.2.1", inbox: inbox)
        // Anonymous: only the address's limit applies.
        #expect(await Self.publish(session, 1, &reader)?.publishAck.seq == 1)
        #expect(await Self.publish(session, 2, &reader)?.publishAck.seq == 2)
        let identity = Identity(displayName: "Ada")
        let auth = identity.authenticate(challengeNonce: session.challengeNonce, origin: testOrigin)
        _ = await session.handle(.make(100, .authenticate(auth)))
        #expect(await reader.reply(to: 100)?.authenticated.inboxID == identity.inboxID.rawValue)
        #expect(await Self.publish(session, 3, &reader)?.publishAck.seq == 3)
        let limited = await Self.publish(session, 4, &reader)
        #expect(limited?.errorCode == .rateLimited)
        #expect(limited?.error.message == "too many publishes by this identity")
        await session.close()
        await harness.finish()
    }

    @Test("a full key table forgets buckets that are full again, but keeps one a connection holds, however idle")
    func keyTableForgetsOnlyUnheldIdleBuckets() {
        let limiter = KeyedRateLimiter(ratePerSecond: 1, burst: 1, maxKeys: 2)
        let held = limiter.bucket("held", now: .zero)
        #expect(held.take(now: .zero) == .allowed)
        #expect(limiter.take("idle", now: .zero) == .allowed)
        #expect(limiter.keyCount == 2)
        // Both are full again after a second; only the unheld one goes.
        _ = limiter.take("new", now: .seconds(5))
        #expect(limiter.keyCount == 2)
        #expect(limiter.bucket("held", now: .seconds(5)) === held)
        // The held bucket still counts what its holder took.
        #expect(held.take(now: .seconds(5)) == .allowed)
        #expect(limiter.take("held", now: .seconds(5)) == .limited(retryAfterMilliseconds: 1000))
    }

    @Test("a full table is searched for idle keys at most once per refill period, and grows meanwhile")
    func keyTableSearchesOncePerRefill() {
        let limiter = KeyedRateLimiter(ratePerSecond: 1, burst: 1, maxKeys: 2)
        _ = limiter.take("a", now: .zero)
        _ = limiter.take("b", now: .milliseconds(600))
        // Full: searched; "a" is full again and goes, "b" is not yet.
        _ = limiter.take("c", now: .seconds(1))
        #expect(limiter.keyCount == 2)
        // "b" is full again, but the last search was under a refill period
        // ago: no search, and the table grows.
        _ = limiter.take("d", now: .milliseconds(1700))
        #expect(limiter.keyCount == 3)
        // A refill period after the last search: "b" and "c" go.
        _ = limiter.take("e", now: .seconds(2))
        #expect(limiter.keyCount == 2)
    }

    @Test("a connection idle for the timeout gets IDLE_TIMEOUT and is closed; activity resets it")
    func idleTimeout() async throws {
        var limits = RelayLimits.default
        limits.idleTimeout = .seconds(30)
        let clock = ManualRelayClock()
        var harness = try SessionHarness(clock: clock, limits: limits)
        clock.advance(by: .seconds(29))
        #expect(await harness.session.idleCheck() == .keepOpen)
        var ping = WirePing()
        ping.nonce = 1
        #expect(await harness.session.receive(WireClientFrame.make(1, .ping(ping)).bytes) == .keepOpen)
        clock.advance(by: .seconds(29))
        #expect(await harness.session.idleCheck() == .keepOpen)
        clock.advance(by: .seconds(1))
        #expect(await harness.session.idleCheck() == .close)
        let frame = await harness.reader.take { $0.errorCode != nil }
        #expect(frame?.errorCode == .idleTimeout)
        #expect(RelayFailure(.idleTimeout, "").isFatal)
        await harness.finish()
    }

    @Test("storage quotas per inbox and per topic refuse with QUOTA_EXCEEDED; pruning frees them")
    func quotas() async throws {
        var limits = RelayLimits.default
        limits.maxInboxBytes = 10
        limits.maxTopicBytes = 12
        let clock = ManualRelayClock()
        var harness = try SessionHarness(clock: clock, limits: limits)
        let inbox = "inbox/" + Identity(displayName: "Ada").inboxID.rawValue
        var post = publishBody(inbox, "123456", expiresAt: clock.nowMilliseconds + 1000)
        #expect(await harness.call(1, .publish(post))?.publishAck.seq == 1)
        post.payload = Data("abcdef".utf8)
        let full = await harness.call(2, .publish(post))
        #expect(full?.errorCode == .quotaExceeded)
        #expect(full?.error.topic == inbox)
        #expect(await harness.call(3, .publish(publishBody(groupTopic, "123456789012")))?.publishAck.seq == 1)
        #expect(await harness.call(4, .publish(publishBody(groupTopic, "1")))?.errorCode == .quotaExceeded)
        clock.advance(by: .seconds(2))
        await RelayServer.prune(services: harness.services)
        #expect(await harness.call(5, .publish(post))?.publishAck.seq == 2)
        await harness.finish()
    }

    @Test("inbox envelopes older than the retention are deleted; other topics are kept")
    func inboxRetention() async throws {
        var limits = RelayLimits.default
        limits.inboxRetention = .seconds(86_400)
        let clock = ManualRelayClock()
        var harness = try SessionHarness(clock: clock, limits: limits)
        let inbox = "inbox/" + Identity(displayName: "Ada").inboxID.rawValue
        #expect(await harness.call(1, .publish(publishBody(inbox, "old")))?.publishAck.seq == 1)
        #expect(await harness.call(2, .publish(publishBody(groupTopic, "old")))?.publishAck.seq == 1)
        clock.advance(by: .seconds(86_000))
        #expect(await harness.call(3, .publish(publishBody(inbox, "newer")))?.publishAck.seq == 2)
        await RelayServer.prune(services: harness.services)
        #expect(
            try await harness.store.fetch(topic: inbox, after: 0, limit: 10, nowMilliseconds: 0).envelopes.count == 2)
        clock.advance(by: .seconds(401))
        await RelayServer.prune(services: harness.services)
        let left = try await harness.store.fetch(topic: inbox, after: 0, limit: 10, nowMilliseconds: 0)
        #expect(left.envelopes.map(\.seq) == [2])
        #expect(left.headSeq == 2)
        #expect(
            try await harness.store.fetch(topic: groupTopic, after: 0, limit: 10, nowMilliseconds: 0).envelopes.count
                == 1)
        await harness.finish()
    }

    @Test("the write queue is bounded by bytes: past it publishes are refused with RATE_LIMITED")
    func writeQueueBytes() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = GatedStore(try SQLiteRelayStore(url: directory.storeURL))
        var limits = RelayLimits.default
        limits.maxWriteQueueBytes = 3000
        let services = makeServices(store: store, limits: limits)
        let big = String(repeating: "x", count: 1000)
        async let held = services.writer.publish(request(groupTopic, big))
        await store.waitUntilHeld()
        // One after the other: two `async let`s may reach the writer in
        // either order, and the seqs below follow the order of arrival.
        async let queued1 = services.writer.publish(request(groupTopic, big))
        while services.writer.queuedCount < 1 { await Task.yield() }
        async let queued2 = services.writer.publish(request(groupTopic, big))
        while services.writer.queuedCount < 2 { await Task.yield() }
        let refused = await services.writer.publish(request(groupTopic, big))
        #expect(refused.failure?.code == .rateLimited)
        #expect(refused.failure?.retryAfterMilliseconds == PublishWriter.queueFullRetry)
        await store.open()
        #expect(try await [held.get(), queued1.get(), queued2.get()].map(\.envelope.seq) == [1, 2, 3])
        #expect(services.writer.queuedBytes == 0)
        await services.writer.close()
        try await store.close()
    }

    @Test("backlog pages are bounded by bytes, and a subscriber still gets the whole backlog")
    func backlogPageBytes() async throws {
        var limits = RelayLimits.default
        limits.backlogPageBytes = 10
        var harness = try SessionHarness(limits: limits)
        for index in 1...5 {
            _ = try await harness.services.writer.publish(request(groupTopic, "pay\(index)")).get()
        }
        let page = try await harness.store.fetch(
            topic: groupTopic, after: 0, limit: 100, maxBytes: 10, nowMilliseconds: 0)
        #expect(page.envelopes.map(\.seq) == [1, 2])
        let huge = try await harness.store.fetch(
            topic: groupTopic, after: 0, limit: 100, maxBytes: 1, nowMilliseconds: 0)
        #expect(huge.envelopes.map(\.seq) == [1])
        await harness.authenticate(Identity(displayName: "Ada"))
        var subscribe = WireSubscribe()
        subscribe.topic = groupTopic
        #expect(await harness.call(1, .subscribe(subscribe))?.subscribed.caughtUpSeq == 5)
        var seqs: [UInt64] = []
        for _ in 0..<5 { seqs.append(try #require(await harness.reader.envelope()).seq) }
        #expect(seqs == [1, 2, 3, 4, 5])
        await harness.finish()
    }

    @Test("the connection tracker caps connections in all and per address, and frees slots")
    func connectionTracker() {
        let tracker = ConnectionTracker(maxTotal: 3, maxPerIP: 2)
        #expect(tracker.admit(ip: "a") == .admitted)
        #expect(tracker.admit(ip: "a") == .admitted)
        #expect(tracker.admit(ip: "a") == .refused("this address has 2 connections open"))
        #expect(tracker.admit(ip: "b") == .admitted)
        #expect(tracker.admit(ip: "c") == .refused("the relay has 3 connections open"))
        tracker.release(ip: "a")
        #expect(tracker.admit(ip: "c") == .admitted)
        #expect(tracker.openCount == 3)
    }

    @Test("the nonce cache refuses a replay and stays bounded")
    func nonceCache() {
        let cache = NonceCache(capacity: 2, lifetimeMilliseconds: 1000)
        #expect(cache.remember(Data([1]), signedAt: 0, now: 0) == .fresh)
        #expect(cache.remember(Data([1]), signedAt: 0, now: 500) == .replayed)
        #expect(cache.remember(Data([2]), signedAt: 0, now: 500) == .fresh)
        #expect(cache.remember(Data([3]), signedAt: 0, now: 500) == .full)
        #expect(cache.remember(Data([3]), signedAt: 900, now: 1001) == .fresh)
    }
}
