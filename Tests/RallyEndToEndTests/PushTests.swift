import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore
@testable import RallyRelay

/// Push through a real relay to a real local HTTP receiver, on the relay's
/// manual clock: delivered once with nothing of the message in it, retried
/// with doubling pauses when the receiver fails, dropped when it is gone,
/// and never in the way of publishing.
@Suite("Push through a real relay", .timeLimit(.minutes(2)))
struct PushTests {
    /// What the receiver answers, in order; the last answer repeats.
    final class Script: Sendable {
        private let lock = NSLock()
        // `nonisolated(unsafe)`: read and written only inside `lock`.
        private nonisolated(unsafe) var answers: [HostileHTTPServer.Reply]

        init(_ answers: [HostileHTTPServer.Reply]) { self.answers = answers }

        func next() -> HostileHTTPServer.Reply {
            lock.withLock { answers.count > 1 ? answers.removeFirst() : answers[0] }
        }
    }

    struct World {
        let clock: ManualRelayClock
        let relay: TestRelay
        let homes: TemporaryDirectory
        let receiver: HostileHTTPServer
        var events: AsyncStream<PushEvent>.Iterator

        static let ok = HostileHTTPServer.Reply.complete(status: 200)

        static func start(_ answers: [HostileHTTPServer.Reply] = [ok]) async throws -> World {
            let clock = ManualRelayClock(now: Date())
            var limits = RelayLimits.default
            // Longer than any test: a stalled call stays in flight.
            limits.push.callTimeout = .seconds(600)
            limits.push.allowsInsecureTargets = true
            limits.push.allowsPrivateTargets = true
            limits.push.minInterval = .seconds(2)
            limits.push.firstRetry = .seconds(1)
            let relay = try await TestRelay.start(limits: limits, clock: clock)
            let script = Script(answers)
            let receiver = try await HostileHTTPServer.start { _ in script.next() }
            return World(
                clock: clock, relay: relay, homes: TemporaryDirectory("rally-push"), receiver: receiver,
                events: relay.relay.server.services.push.events.makeAsyncIterator())
        }

        var hook: URL { receiver.url.appendingPathComponent("hook") }

        func user(_ name: String) async throws -> RallyClient {
            try await RallyClient.create(
                home: homes.path(name), relayURL: relay.url, displayName: name, logger: TestLogger.quiet)
        }

        mutating func next() async -> PushEvent? { await events.next() }

        /// Advances the relay's clock to `deadline` (monotonic).
        func advance(to deadline: Duration) {
            let now = clock.monotonic
            if deadline > now { clock.advance(by: deadline - now) }
        }

        func stop(_ clients: [RallyClient]) async {
            for client in clients { await client.disconnect() }
            await relay.stop()
            await receiver.stop()
            homes.remove()
        }
    }

    @Test(
        "a message that asks for a push reaches the receiver once, naming no sender and carrying no content; a retried publish adds no push"
    )
    func deliveredOnceContentHidden() async throws {
        var w = try await World.start()
        let alice = try await w.user("alice")
        let bob = try await w.user("bob")
        #expect(try await bob.registerPush(w.hook) == w.hook)
        #expect(try await bob.pushTarget() == w.hook)

        _ = try await alice.sendText("the secret picnic is at noon", to: bob.inboxID)
        #expect(await w.next() == .scheduled(inbox: bob.inboxID.rawValue))
        guard case .finished(.delivered(let call))? = await w.next() else {
            Issue.record("the push was not delivered")
            return
        }
        let requests = w.receiver.requests
        #expect(requests.count == 1)
        let request = try #require(requests.first)
        #expect(request.method == "POST" && request.path == "/hook")
        #expect(request.body == PushPayload.body)
        #expect(request.headers["rally-push-id"] == call.notificationID)
        #expect(request.headers["apns-push-type"] == "alert")
        let everything = String(decoding: request.body, as: UTF8.self) + "\(request.headers)"
        for secret in ["secret", "picnic", alice.inboxID.rawValue, bob.inboxID.rawValue, "alice", "inbox/"] {
            #expect(!everything.contains(secret))
        }

        // The same publish again (a lost ack, retried): stored once, no push.
        // Then a new message two seconds on: one more push, under a new id.
        let connection = try await alice.connected()
        let topic = try TopicName.inbox(bob.inboxID.rawValue)
        let payload = Data("sealed bytes".utf8)
        let key = Data(repeating: 7, count: 16)
        let first = try await connection.publish(topic: topic, payload: payload, idempotencyKey: key, shouldPush: true)
        let retried = try await connection.publish(
            topic: topic, payload: payload, idempotencyKey: key, shouldPush: true)
        #expect(retried.duplicate && retried.seq == first.seq)
        // The first of the two was scheduled (two seconds after the last
        // push); the retry, had it counted, would show as coalesced next.
        #expect(await w.next() == .scheduled(inbox: bob.inboxID.rawValue))
        while w.clock.sleeperCount == 0 {
            try Task.checkCancellation()
            await Task.yield()
        }
        #expect(w.receiver.requests.count == 1)
        w.advance(to: .seconds(2))
        guard case .finished(.delivered(let second))? = await w.next() else {
            Issue.record("the second push was not delivered")
            return
        }
        #expect(second.notificationID != call.notificationID)
        #expect(w.receiver.requests.count == 2)
        await w.stop([alice, bob])
    }

    @Test("a failing receiver is called again after 1 s, then 2 s, under the same push id, until it answers")
    func retriedWithBackoff() async throws {
        var w = try await World.start([
            .complete(status: 503), .complete(status: 500), .complete(status: 200),
        ])
        let alice = try await w.user("alice")
        let bob = try await w.user("bob")
        _ = try await bob.registerPush(w.hook)
        _ = try await alice.sendText("hello", to: bob.inboxID)
        #expect(await w.next() == .scheduled(inbox: bob.inboxID.rawValue))
        var pauses: [Duration] = []
        for attempt in 2...3 {
            let failedAt = w.clock.monotonic
            guard case .finished(.retryScheduled(let call, let at))? = await w.next() else {
                Issue.record("attempt \(attempt - 1) was not retried")
                return
            }
            #expect(call.attempt == attempt)
            pauses.append(at - failedAt)
            #expect(w.receiver.requests.count == attempt - 1)
            w.advance(to: at)
        }
        #expect(pauses == [.seconds(1), .seconds(2)])
        guard case .finished(.delivered(let call))? = await w.next() else {
            Issue.record("the third call was not delivered")
            return
        }
        #expect(call.attempt == 3)
        let requests = w.receiver.requests
        #expect(requests.map { $0.headers["rally-push-attempt"] } == ["1", "2", "3"])
        #expect(Set(requests.map { $0.headers["rally-push-id"] }) == [call.notificationID])
        await w.stop([alice, bob])
    }

    @Test("a receiver that answers 410 is dropped: the target is gone and later messages call nobody")
    func goneTargetDropped() async throws {
        var w = try await World.start([.complete(status: 410)])
        let alice = try await w.user("alice")
        let bob = try await w.user("bob")
        let carol = try await w.user("carol")
        _ = try await bob.registerPush(w.hook)
        _ = try await alice.sendText("hello", to: bob.inboxID)
        #expect(await w.next() == .scheduled(inbox: bob.inboxID.rawValue))
        #expect(await w.next() == .finished(.targetGone(inbox: bob.inboxID.rawValue)))
        #expect(try await bob.pushTarget() == nil)
        #expect(try await bob.unregisterPush() == false)

        // Bob's next message calls nobody: the next event is Carol's, who
        // registers afterwards (events come in the order messages are stored).
        _ = try await alice.sendText("still there?", to: bob.inboxID)
        let carolHook = w.receiver.url.appendingPathComponent("carol")
        _ = try await carol.registerPush(carolHook)
        _ = try await alice.sendText("hi carol", to: carol.inboxID)
        #expect(await w.next() == .scheduled(inbox: carol.inboxID.rawValue))
        #expect(await w.next() == .finished(.targetGone(inbox: carol.inboxID.rawValue)))
        #expect(w.receiver.requests.map(\.path) == ["/hook", "/carol"])
        await w.stop([alice, bob, carol])
    }

    @Test("a receiver that never answers holds no publish back: every message is stored and acknowledged meanwhile")
    func neverBlocksPublishing() async throws {
        var w = try await World.start([.stall(status: 200, contentLength: 10)])
        let alice = try await w.user("alice")
        let bob = try await w.user("bob")
        _ = try await bob.registerPush(w.hook)
        _ = try await alice.sendText("first", to: bob.inboxID)
        #expect(await w.next() == .scheduled(inbox: bob.inboxID.rawValue))
        while w.receiver.requests.isEmpty {
            try Task.checkCancellation()
            await Task.yield()
        }
        for index in 1...20 {
            let sent = try await alice.sendText("more \(index)", to: bob.inboxID)
            #expect(sent.seq != nil)
        }
        #expect(try await bob.syncInbox().received.count == 21)
        // All twenty were covered by the call in flight.
        for _ in 1...20 { #expect(await w.next() == .coalesced(inbox: bob.inboxID.rawValue)) }
        #expect(w.receiver.requests.count == 1)
        await w.stop([alice, bob])
    }

    @Test("only the inbox's own identity registers, reads or removes its target; a bad URL is refused with why")
    func registrationIsTheOwners() async throws {
        var limits = RelayLimits.default
        limits.push.allowsPrivateTargets = false
        let relay = try await TestRelay.start(limits: limits)
        let homes = TemporaryDirectory("rally-push-registration")
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: relay.url, displayName: "bob", logger: TestLogger.quiet)
        await #expect(
            throws: RallyClientError.relay(.refused(code: .invalidRequest, message: "push target must be an https URL"))
        ) {
            try await bob.registerPush(URL(string: "http://push.example.com/hook")!)
        }
        await #expect(
            throws: RallyClientError.relay(
                .refused(
                    code: .invalidRequest,
                    message: "push target must not point at a loopback, private or link-local address"))
        ) {
            try await bob.registerPush(URL(string: "https://169.254.169.254/latest/meta-data")!)
        }
        #expect(try await bob.pushTarget() == nil)
        let target = URL(string: "https://push.example.com/devices/bob")!
        #expect(try await bob.registerPush(target) == target)
        #expect(try await bob.pushTarget() == target)
        // Another identity reaches only its own (empty) registration.
        let carol = try await RallyClient.create(
            home: homes.path("carol"), relayURL: relay.url, displayName: "carol", logger: TestLogger.quiet)
        #expect(try await carol.pushTarget() == nil)
        #expect(try await carol.unregisterPush() == false)
        #expect(try await bob.pushTarget() == target)
        #expect(try await bob.unregisterPush())
        #expect(try await bob.pushTarget() == nil)
        await bob.disconnect()
        await carol.disconnect()
        await relay.stop()
        homes.remove()
    }
}

@Suite("rally push: register, status and unregister from the command line", .timeLimit(.minutes(2)))
struct PushCLITests {
    struct TargetJSON: Decodable { let url: String? }
    struct IdentityJSON: Decodable { let inboxId: String }

    @Test("register points the relay at a webhook that a message then calls; status shows it; unregister removes it")
    func registerStatusUnregister() async throws {
        var limits = RelayLimits.default
        limits.push.allowsInsecureTargets = true
        limits.push.allowsPrivateTargets = true
        let relay = try await TestRelay.start(limits: limits)
        let receiver = try await HostileHTTPServer.start { _ in .complete(status: 200) }
        let homes = TemporaryDirectory("rally-cli-push")
        var events = relay.relay.server.services.push.events.makeAsyncIterator()
        let common = ["--relay", relay.relay.boundURL.absoluteString, "--json"]
        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(arguments + ["--home", homes.path(home).path] + common)
        }
        let bob = try JSONDecoder().decode(
            IdentityJSON.self, from: Data(try await rally("bob", ["id", "new", "--name", "Bob"]).stdout.utf8))
        _ = try await rally("alice", ["id", "new", "--name", "Alice"])
        let hook = receiver.url.appendingPathComponent("bob").absoluteString

        let none = try await rally("bob", ["push", "status"])
        #expect(none.status == 0, "\(none.stderr)")
        #expect(try JSONDecoder().decode(TargetJSON.self, from: Data(none.stdout.utf8)).url == nil)
        let registered = try await rally("bob", ["push", "register", hook])
        #expect(registered.status == 0, "\(registered.stderr)")
        #expect(try JSONDecoder().decode(TargetJSON.self, from: Data(registered.stdout.utf8)).url == hook)
        let status = try await rally("bob", ["push", "status"])
        #expect(try JSONDecoder().decode(TargetJSON.self, from: Data(status.stdout.utf8)).url == hook)

        let sent = try await rally("alice", ["dm", "send", bob.inboxId, "wake up"])
        #expect(sent.status == 0, "\(sent.stderr)")
        #expect(await events.next() == .scheduled(inbox: bob.inboxId))
        guard case .finished(.delivered)? = await events.next() else {
            Issue.record("the push was not delivered")
            return
        }
        #expect(receiver.requests.map(\.path) == ["/bob"])

        let removed = try await RallyBinary.run(
            ["push", "unregister", "--home", homes.path("bob").path, "--relay", relay.relay.boundURL.absoluteString])
        #expect(removed.stdout.contains("Push target removed."))
        let again = try await RallyBinary.run(
            ["push", "unregister", "--home", homes.path("bob").path, "--relay", relay.relay.boundURL.absoluteString])
        #expect(again.stdout.contains("No push target was registered."))
        let refused = try await rally("bob", ["push", "register", "not a url"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("not an absolute URL"))

        await relay.stop()
        await receiver.stop()
        homes.remove()
    }
}
