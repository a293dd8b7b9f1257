import Foundation
import RallyCrypto
import RallyRelay
import RallyTestSupport
import RallyTesting
import RallyWire
import Testing

@testable import RallyCore

/// Values that arrive from another task, and a way to wait for enough of
/// them without sleeping.
actor Arrivals<Value: Sendable> {
    private struct Waiter {
        let id: UInt64
        let condition: @Sendable ([Value]) -> Bool
        let continuation: CheckedContinuation<Void, Never>
    }

    private(set) var values: [Value] = []
    private var waiters: [Waiter] = []
    private var nextID: UInt64 = 0

    func append(_ value: Value) {
        values.append(value)
        let ready = waiters.filter { $0.condition(values) }
        waiters.removeAll { $0.condition(values) }
        for waiter in ready { waiter.continuation.resume() }
    }

    /// Returns once `condition` holds of everything that arrived, or once
    /// the waiting task is cancelled (a suite's time limit), so a state
    /// that never comes fails the test instead of hanging the whole run.
    func wait(until condition: @escaping @Sendable ([Value]) -> Bool) async {
        if condition(values) { return }
        nextID += 1
        let id = nextID
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Cancelled before this ran: the handler found no waiter.
                if Task.isCancelled { return continuation.resume() }
                waiters.append(Waiter(id: id, condition: condition, continuation: continuation))
            }
        } onCancel: {
            Task { await self.release(id) }
        }
    }

    private func release(_ id: UInt64) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        waiters.remove(at: index).continuation.resume()
    }
}

/// A real relay with a fault proxy in front of it: the clients under test
/// reach the relay through the proxy (whose faults they suffer); a
/// "direct" client reaches it past the proxy, to publish while the others
/// are cut off. The connection-status timers run on a manual clock; the
/// transport itself (backoff, heartbeats, sockets) on the real one.
struct FaultyNetwork {
    let relay: TestRelay
    let proxy: FaultProxy
    let homes: TemporaryDirectory
    let statusClock: ManualClock
    /// How long a ping may wait for its pong. Tests that check a healthy
    /// link never leaves `connected` give it long, so a machine busy with
    /// other tests does not pass for a dead link.
    var heartbeatTimeout: Duration = .seconds(2)

    /// Fast recovery: short backoff and heartbeats, so a test sees many
    /// rungs in little time.
    var policy: ConnectionPolicy {
        ConnectionPolicy(
            backoff: Backoff(base: .milliseconds(20), cap: .milliseconds(200)),
            heartbeatInterval: .seconds(1), heartbeatTimeout: heartbeatTimeout, shutdownJitter: .milliseconds(100),
            statusClock: statusClock.clientClock)
    }

    static func start(heartbeatTimeout: Duration = .seconds(2)) async throws -> FaultyNetwork {
        let port = PortBox()
        let proxy = try await FaultProxy.start(upstreamPort: { await port.value })
        let relay = try await TestRelay.start(publicURL: proxy.url, acceptsBindOrigins: true)
        await port.set(relay.relay.port)
        return FaultyNetwork(
            relay: relay, proxy: proxy, homes: TemporaryDirectory("rally-faulty"), statusClock: ManualClock(),
            heartbeatTimeout: heartbeatTimeout)
    }

    /// A client that reaches the relay through the proxy.
    func client(_ name: String, transport: TransportChoice = .automatic) async throws -> RallyClient {
        var policy = self.policy
        policy.transport = transport
        return try await RallyClient.create(
            home: homes.path(name), relayURL: proxy.url, displayName: name, logger: TestLogger.quiet,
            connection: policy)
    }

    /// A client through the proxy whose status is recorded and whose inbox
    /// is followed, returned once it is connected.
    func following(_ name: String) async throws -> (RallyClient, StatusRecorder, InboxFollower) {
        let client = try await client(name)
        let status = await StatusRecorder(client)
        let follower = InboxFollower(client)
        await status.wait { $0.status == .connected }
        return (client, status, follower)
    }

    /// A client on an existing home, through the proxy (a restart).
    func reopen(_ name: String) throws -> RallyClient {
        try RallyClient.open(home: homes.path(name), relayURL: proxy.url, logger: TestLogger.quiet, connection: policy)
    }

    /// A client that reaches the relay directly, past the proxy's faults.
    func directClient(_ name: String) async throws -> RallyClient {
        try await RallyClient.create(
            home: homes.path(name), relayURL: relay.relay.boundURL, displayName: name, logger: TestLogger.quiet)
    }

    func stop() async {
        await proxy.stop()
        await relay.stop()
        homes.remove()
    }
}

/// The relay's port, for a proxy that asks per connection; 0 (nothing
/// listens there) refuses the proxy's upstream connections.
actor PortBox {
    var value = 0
    func set(_ port: Int) { value = port }
}

/// Everything a client's connection status showed, in order.
struct StatusRecorder {
    let arrivals = Arrivals<ConnectionStatusUpdate>()
    let task: Task<Void, Never>

    init(_ client: RallyClient) async {
        let stream = await client.connectionStatusUpdates()
        let arrivals = self.arrivals
        task = Task {
            for await update in stream { await arrivals.append(update) }
        }
    }

    /// Returns once the latest update satisfies `condition`.
    func wait(until condition: @escaping @Sendable (ConnectionStatusPresentation) -> Bool) async {
        await arrivals.wait { updates in updates.last.map { condition($0.presentation) } ?? false }
    }

    var updates: [ConnectionStatusUpdate] { get async { await arrivals.values } }

    func stop() { task.cancel() }
}

/// A live inbox follower and what it received.
struct InboxFollower {
    let received = Arrivals<StoredMessage>()
    /// One value per time the follower caught up: after its backlog, and
    /// after every recovery (by then it has also sent the home's queued
    /// messages).
    let caughtUp = Arrivals<Void>()
    let task: Task<Result<Void, RallyClientError>, Never>

    init(_ client: RallyClient) {
        let received = self.received
        let caughtUp = self.caughtUp
        task = Task {
            do throws(RallyClientError) {
                try await client.followInbox(untilCaughtUp: false) { event in
                    switch event {
                    case .message(let message): await received.append(message)
                    case .caughtUp: await caughtUp.append(())
                    case .rejected: break
                    }
                }
                return .success(())
            } catch {
                return .failure(error)
            }
        }
    }

    func wait(forCount count: Int) async -> [StoredMessage] {
        await received.wait { $0.count >= count }
        return await received.values
    }

    func stop() async {
        task.cancel()
        _ = await task.value
    }
}

extension RallyClient {
    /// Waits until the connection report satisfies `condition`.
    func waitForConnection(_ condition: @escaping @Sendable (ConnectionReport) -> Bool) async {
        await context.monitor.waitUntil(condition)
    }
}

@Suite("Connection recovery through a fault proxy", .timeLimit(.minutes(2)))
struct ConnectionRecoveryTests {
    /// Cuts the network: connections are reset and new ones refused.
    static func cut(_ network: FaultyNetwork) {
        network.proxy.setMode(.refuse)
        network.proxy.resetAll()
    }

    static func texts(_ messages: [StoredMessage]) -> [String] { messages.map(\.displayText) }

    @Test("seed case 1: a healthy connection stays connected and shows nothing")
    func happyPath() async throws {
        let network = try await FaultyNetwork.start(heartbeatTimeout: .seconds(30))
        let alice = try await network.directClient("alice")
        let (bob, status, follower) = try await network.following("bob")

        for index in 0..<20 { _ = try await alice.sendText("m\(index)", to: bob.inboxID) }
        let received = await follower.wait(forCount: 20)
        #expect(Self.texts(received) == (0..<20).map { "m\($0)" })
        let shown = await status.updates.map(\.presentation)
        #expect(shown.map(\.status) == [.idle, .connected])
        #expect(shown.allSatisfy { !$0.indicatorVisible })

        await follower.stop()
        status.stop()
        await network.stop()
    }

    @Test("seed case 2: a 300 ms blip shows nothing; a 3 s outage shows Reconnecting… from 800 ms until it recovers")
    func recovering() async throws {
        let network = try await FaultyNetwork.start()
        let (bob, status, follower) = try await network.following("bob")

        // A blip: recovered before 800 ms of status time pass.
        Self.cut(network)
        await status.wait { $0.status == .recovering }
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .milliseconds(300))
        network.proxy.setMode(.pass)
        await status.wait { $0.status == .connected }
        #expect(await status.updates.allSatisfy { !$0.presentation.indicatorVisible })

        // Three seconds: the indicator at 800 ms, not before, never retrying.
        let before = await status.updates.count
        Self.cut(network)
        await status.wait { $0.status == .recovering }
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .milliseconds(799))
        #expect(await bob.connectionReport().presentation.indicatorVisible == false)
        network.statusClock.advance(by: .milliseconds(1))
        await status.wait { $0.indicatorVisible }
        let shown = await bob.connectionReport().presentation
        #expect(shown.text == "Reconnecting…")
        #expect(shown.subText == nil)
        #expect(shown.showsLeave == false)
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .milliseconds(2200))
        #expect(await bob.connectionReport().presentation.status == .recovering)
        network.proxy.setMode(.pass)
        await status.wait { $0.status == .connected }
        let outage = await status.updates.dropFirst(before).map(\.presentation)
        #expect(outage.map(\.status) == [.recovering, .recovering, .connected])
        #expect(outage.map(\.indicatorVisible) == [false, true, false])

        await follower.stop()
        status.stop()
        await network.stop()
    }

    @Test(
        "seed case 3: past 10 s it is retrying with \"Taking longer than usual…\", Leave and one haptic, and recovers by itself"
    )
    func retrying() async throws {
        let network = try await FaultyNetwork.start()
        let (bob, status, follower) = try await network.following("bob")

        Self.cut(network)
        await status.wait { $0.status == .recovering }
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .seconds(1))
        await status.wait { $0.indicatorVisible }
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .milliseconds(8999))
        #expect(await bob.connectionReport().presentation.status == .recovering)
        network.statusClock.advance(by: .milliseconds(1))
        await status.wait { $0.status == .retrying }
        let shown = await bob.connectionReport().presentation
        #expect(shown.text == "Reconnecting…")
        #expect(shown.subText == "Taking longer than usual…")
        #expect(shown.showsLeave)
        network.statusClock.advance(by: .seconds(5))
        #expect(await bob.connectionReport().presentation.status == .retrying)

        network.proxy.setMode(.pass)
        await status.wait { $0.status == .connected }
        let updates = await status.updates
        #expect(updates.filter(\.haptic).count == 1)
        #expect(updates.last?.presentation.indicatorVisible == false)

        await follower.stop()
        status.stop()
        await network.stop()
    }

    @Test(
        "seed case 4: a two-minute outage resumes by itself; what others sent meanwhile arrives once, in order, and what was typed offline is sent once"
    )
    func longOutage() async throws {
        let network = try await FaultyNetwork.start()
        let alice = try await network.directClient("alice")
        let (bob, status, follower) = try await network.following("bob")
        _ = try await alice.sendText("before", to: bob.inboxID)
        _ = await follower.wait(forCount: 1)
        // Bob has written to Alice before: sealing to her needs no relay.
        _ = try await bob.sendText("hello", to: alice.inboxID)
        _ = try await alice.syncInbox()

        Self.cut(network)
        await status.wait { $0.status == .recovering }
        for index in 0..<30 { _ = try await alice.sendText("during \(index)", to: bob.inboxID) }
        let typed = try await bob.sendText("typed offline", to: alice.inboxID)
        #expect(typed.isQueued)
        #expect(try bob.outboxCounts().queued == 1)
        // Two minutes of status time, and the ladder climbs every rung
        // (the fallback too) more than once.
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .seconds(1))
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .seconds(10))
        await status.wait { $0.status == .retrying }
        network.statusClock.advance(by: .seconds(120))
        // (The ping rung is skipped: the cut closed the link, there is
        // nothing to ping.)
        await bob.waitForConnection { report in
            [.reconnect, .reauthenticate, .httpFallback].allSatisfy { (report.attempts[$0] ?? 0) >= 2 }
        }

        let catchUps = await follower.caughtUp.values.count
        network.proxy.setMode(.pass)
        await status.wait { $0.status == .connected }
        await follower.caughtUp.wait { $0.count > catchUps }
        let received = await follower.wait(forCount: 31)
        #expect(Self.texts(received) == ["before"] + (0..<30).map { "during \($0)" })
        // Exactly once: nothing more than what was sent is stored.
        #expect(try await bob.directMessageHistory().filter { !$0.outgoing }.count == 31)
        // The message typed offline went out on recovery, once.
        let back = try await alice.syncInbox()
        #expect(Self.texts(back.received) == ["typed offline"])
        #expect(try bob.outboxCounts().queued == 0)
        #expect(try await bob.directMessageHistory().first { $0.id == typed.id }?.seq != nil)

        await follower.stop()
        status.stop()
        await network.stop()
    }

    @Test("seed case 5: Leave from retrying: the status becomes idle and the follower ends")
    func leaveFromRetrying() async throws {
        let network = try await FaultyNetwork.start()
        let (bob, status, follower) = try await network.following("bob")

        Self.cut(network)
        await status.wait { $0.status == .recovering }
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .seconds(11))
        await status.wait { $0.status == .retrying }
        await bob.leaveConnection()
        await status.wait { $0.status == .idle }
        let shown = await bob.connectionReport().presentation
        #expect(shown.indicatorVisible == false)
        #expect(shown.showsLeave == false)
        // The follower stops recovering and returns, without an error.
        guard case .success = await follower.task.value else {
            Issue.record("the follower ended with an error after Leave")
            return
        }

        status.stop()
        await network.stop()
    }

    @Test(
        "seed case 6: removed from a group during an outage: the relay's refusal on reconnect ends recovery (idle), no retrying forever"
    )
    func goneDuringOutage() async throws {
        let network = try await FaultyNetwork.start()
        let alice = try await network.directClient("alice")
        let bob = try await network.client("bob")
        let groupID = try await alice.createGroup(name: "Climbing").groupID
        _ = try await alice.addMember(bob.inboxID, to: groupID)
        _ = try await bob.syncInbox()
        _ = try await bob.syncGroup(groupID)
        let status = await StatusRecorder(bob)
        let following = Task { () -> Result<Void, RallyClientError> in
            do throws(RallyClientError) {
                try await bob.followGroup(groupID, untilCaughtUp: false) { _ in }
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        await status.wait { $0.status == .connected }

        Self.cut(network)
        await status.wait { $0.status == .recovering }
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .seconds(11))
        await status.wait { $0.status == .retrying }
        _ = try await alice.removeMember(bob.inboxID, from: groupID)
        network.proxy.setMode(.pass)

        // On its next attempt the follower reads its removal, the relay
        // refuses the old key, and the session is gone: idle, not retrying.
        await status.wait { $0.status == .idle }
        guard case .success = await following.value else {
            Issue.record("following a group one was removed from ended with an error")
            return
        }
        #expect(try await bob.group(groupID).status == .removed)
        #expect(await bob.connectionReport().presentation.showsLeave == false)

        status.stop()
        await network.stop()
    }

    @Test("A silent network (no bytes either way) is noticed by missed pings, and recovery follows")
    func missedPings() async throws {
        let network = try await FaultyNetwork.start()
        let alice = try await network.directClient("alice")
        let (bob, status, follower) = try await network.following("bob")

        network.proxy.setMode(.blackhole)
        await status.wait { $0.status == .recovering }
        _ = try await alice.sendText("while silent", to: bob.inboxID)
        network.proxy.setMode(.pass)
        await status.wait { $0.status == .connected }
        let received = await follower.wait(forCount: 1)
        #expect(Self.texts(received) == ["while silent"])

        await follower.stop()
        status.stop()
        await network.stop()
    }

    @Test("WebSockets blocked: the ladder falls back to HTTP long-polling, and moves back once they work")
    func httpFallbackAndBack() async throws {
        let network = try await FaultyNetwork.start()
        let alice = try await network.directClient("alice")
        let (bob, status, follower) = try await network.following("bob")

        network.proxy.setMode(.refuseWebSocketUpgrades)
        network.proxy.resetAll()
        await bob.waitForConnection { $0.transport == .http }
        await status.wait { $0.status == .connected }
        for index in 0..<5 { _ = try await alice.sendText("over http \(index)", to: bob.inboxID) }
        _ = await follower.wait(forCount: 5)
        // Sending works on the fallback too.
        let reply = try await bob.sendText("reply over http", to: alice.inboxID)
        #expect(reply.isQueued == false)

        network.proxy.setMode(.pass)
        await bob.waitForConnection { $0.transport == .webSocket }
        for index in 0..<5 { _ = try await alice.sendText("back on ws \(index)", to: bob.inboxID) }
        let received = await follower.wait(forCount: 10)
        #expect(
            Self.texts(received) == (0..<5).map { "over http \($0)" } + (0..<5).map { "back on ws \($0)" })
        #expect(try await bob.directMessageHistory().filter { !$0.outgoing }.count == 10)
        #expect(Self.texts(try await alice.syncInbox().received) == ["reply over http"])

        await follower.stop()
        status.stop()
        await network.stop()
    }

    @Test("--transport http: a client that never uses WebSockets creates its identity, sends and follows")
    func httpOnly() async throws {
        let network = try await FaultyNetwork.start()
        network.proxy.setMode(.refuseWebSocketUpgrades)
        let alice = try await network.directClient("alice")
        let bob = try await network.client("bob", transport: .http)
        let follower = InboxFollower(bob)
        for index in 0..<3 { _ = try await alice.sendText("to http \(index)", to: bob.inboxID) }
        let received = await follower.wait(forCount: 3)
        #expect(Self.texts(received) == (0..<3).map { "to http \($0)" })
        let sent = try await bob.sendText("from http", to: alice.inboxID)
        #expect(sent.seq != nil)
        #expect(Self.texts(try await alice.syncInbox().received) == ["from http"])
        #expect(await bob.connectionReport().transport == .http)

        await follower.stop()
        await network.stop()
    }

    @Test("Messages typed offline wait in the home and are sent once after the app restarts")
    func outboxAcrossRestart() async throws {
        let network = try await FaultyNetwork.start()
        let alice = try await network.directClient("alice")
        let bob = try await network.client("bob")
        // Bob has written to Alice before: sealing to her needs no relay.
        _ = try await bob.sendText("hi", to: alice.inboxID)
        _ = try await alice.syncInbox()
        network.proxy.setMode(.refuse)
        network.proxy.resetAll()
        let first = try await bob.sendText("offline one", to: alice.inboxID)
        let second = try await bob.sendText("offline two", to: alice.inboxID)
        #expect(first.isQueued && second.isQueued)
        #expect(try bob.outboxCounts() == OutboxCounts(queued: 2, failed: 0))
        await bob.disconnect()

        // The process restarts: a new client on the same home.
        let restarted = try network.reopen("bob")
        #expect(try restarted.outboxCounts().queued == 2)
        network.proxy.setMode(.pass)
        #expect(try await restarted.sendQueued() == 2)
        #expect(try await restarted.sendQueued() == 0)
        #expect(Self.texts(try await alice.syncInbox().received) == ["offline one", "offline two"])
        #expect(try await alice.syncInbox().received.isEmpty)
        let history = try await restarted.directMessageHistory().filter(\.outgoing).dropFirst()
        #expect(history.map(\.displayText) == ["offline one", "offline two"])
        #expect(history.allSatisfy { $0.seq != nil })

        await network.stop()
    }

    @Test(
        "A queue for several people is sent to them side by side, and each reads their messages once, in the order typed"
    )
    func outboxTopicsSideBySide() async throws {
        let network = try await FaultyNetwork.start()
        let bob = try await network.client("bob")
        var readers: [RallyClient] = []
        for name in ["alice", "carol", "dan", "erin"] {
            let reader = try await network.directClient(name)
            _ = try await bob.sendText("hi \(name)", to: reader.inboxID)
            _ = try await reader.syncInbox()
            readers.append(reader)
        }
        network.proxy.setMode(.refuse)
        network.proxy.resetAll()
        // Typed round-robin: each person's messages interleave with the others'.
        for round in 1...3 {
            for reader in readers {
                #expect(try await bob.sendText("\(round)", to: reader.inboxID).isQueued)
            }
        }
        #expect(try bob.outboxCounts().queued == 12)
        network.proxy.setMode(.pass)
        #expect(try await bob.sendQueued() == 12)
        #expect(try bob.outboxCounts() == OutboxCounts(queued: 0, failed: 0))
        for reader in readers {
            #expect(Self.texts(try await reader.syncInbox().received) == ["1", "2", "3"])
        }
        let history = try await bob.directMessageHistory().filter(\.outgoing)
        #expect(history.allSatisfy { $0.seq != nil })
        await network.stop()
    }

    @Test(
        "A group message typed offline is queued, survives a restart, is sealed under the group's state when the relay is back, and every member reads it once"
    )
    func groupOutbox() async throws {
        let network = try await FaultyNetwork.start()
        let alice = try await network.directClient("alice")
        let bob = try await network.client("bob")
        let carol = try await network.directClient("carol")
        let groupID = try await alice.createGroup(name: "Climbing").groupID
        _ = try await alice.addMember(bob.inboxID, to: groupID)
        _ = try await alice.addMember(carol.inboxID, to: groupID)
        for member in [bob, carol] {
            _ = try await member.syncInbox()
            _ = try await member.syncGroup(groupID)
        }
        let epochBefore = try await bob.group(groupID).state.epoch

        network.proxy.setMode(.refuse)
        network.proxy.resetAll()
        let queued = try await bob.sendGroupText("typed offline", to: groupID)
        #expect(queued.isQueued)
        #expect(try await bob.groupMessages(in: groupID).map(\.displayText) == ["typed offline"])
        // Meanwhile the group moves on: Carol is removed, a new key.
        _ = try await alice.removeMember(carol.inboxID, from: groupID)
        await bob.disconnect()

        let restarted = try network.reopen("bob")
        #expect(try restarted.outboxCounts().queued == 1)
        network.proxy.setMode(.pass)
        #expect(try await restarted.sendQueued() == 1)
        #expect(try await restarted.sendQueued() == 0)
        #expect(try await restarted.group(groupID).state.epoch > epochBefore)

        let read = try await alice.syncGroup(groupID)
        #expect(read.messages.map(\.displayText) == ["typed offline"])
        #expect(try await alice.syncGroup(groupID).messages.isEmpty)
        // Sealed under the key Carol never got.
        #expect(try await carol.syncGroup(groupID).messages.isEmpty)
        let mine = try await restarted.groupMessages(in: groupID)
        #expect(mine.map(\.displayText) == ["typed offline"])
        #expect(mine.first?.seq != nil)

        await network.stop()
    }

    @Test("The relay's SHUTTING_DOWN notice: followers reconnect first (no ping) and miss nothing")
    func shutdownNotice() async throws {
        let homes = TemporaryDirectory("rally-shutdown")
        defer { homes.remove() }
        let data = TemporaryDirectory("rally-shutdown-relay")
        defer { data.remove() }
        let port = PortBox()
        let proxy = try await FaultProxy.start(upstreamPort: { await port.value })
        var relay = try await TestRelay.start(publicURL: proxy.url, acceptsBindOrigins: true, directory: data)
        await port.set(relay.relay.port)
        let clock = ManualClock()
        let policy = ConnectionPolicy(
            backoff: Backoff(base: .milliseconds(20), cap: .milliseconds(200)), shutdownJitter: .milliseconds(50),
            statusClock: clock.clientClock)
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: proxy.url, displayName: "Bob", logger: TestLogger.quiet,
            connection: policy)
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: proxy.url, displayName: "Alice", logger: TestLogger.quiet)
        let status = await StatusRecorder(bob)
        let follower = InboxFollower(bob)
        await status.wait { $0.status == .connected }
        _ = try await alice.sendText("before restart", to: bob.inboxID)
        _ = await follower.wait(forCount: 1)

        await relay.stopKeepingData()
        await status.wait { $0.status == .recovering }
        relay = try await TestRelay.start(publicURL: proxy.url, acceptsBindOrigins: true, directory: data)
        await port.set(relay.relay.port)
        await status.wait { $0.status == .connected }
        // The notice skips the ping: the first attempt is a reconnect.
        let attempts = await bob.connectionReport().recentAttempts
        #expect(attempts.first == .reconnect, "attempts: \(attempts)")
        _ = try await alice.sendText("after restart", to: bob.inboxID)
        let received = await follower.wait(forCount: 2)
        #expect(Self.texts(received) == ["before restart", "after restart"])

        await follower.stop()
        status.stop()
        await proxy.stop()
        await relay.stop()
    }

    @Test("A relay killed with SIGKILL and restarted: followers resume from their cursors, queued messages go out once")
    func relayKilled() async throws {
        let homes = TemporaryDirectory("rally-sigkill")
        defer { homes.remove() }
        let data = homes.path("relay")
        let port = PortBox()
        let proxy = try await FaultProxy.start(upstreamPort: { await port.value })
        let arguments = ["--public-url", proxy.url.absoluteString]
        var relay = try await RelayProcess.start(dataDirectory: data, arguments: arguments)
        await port.set(relay.port)
        let clock = ManualClock()
        let policy = ConnectionPolicy(
            backoff: Backoff(base: .milliseconds(20), cap: .milliseconds(200)), statusClock: clock.clientClock)
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: proxy.url, displayName: "Bob", logger: TestLogger.quiet,
            connection: policy)
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: proxy.url, displayName: "Alice", logger: TestLogger.quiet,
            connection: policy)
        let status = await StatusRecorder(bob)
        let follower = InboxFollower(bob)
        await status.wait { $0.status == .connected }
        for index in 0..<10 { _ = try await alice.sendText("acked \(index)", to: bob.inboxID) }

        // No relay behind the proxy until the restart: its port may be
        // another test's relay by then, whose origin would refuse these
        // clients' signatures.
        await port.set(0)
        await relay.kill(signal: SIGKILL)
        await status.wait { $0.status == .recovering }
        let queued = try await alice.sendText("while dead", to: bob.inboxID)
        #expect(queued.isQueued)

        relay = try await RelayProcess.start(dataDirectory: data, arguments: arguments)
        await port.set(relay.port)
        await status.wait { $0.status == .connected }
        #expect(try await alice.sendQueued() == 1)
        let received = await follower.wait(forCount: 11)
        #expect(Self.texts(received) == (0..<10).map { "acked \($0)" } + ["while dead"])
        #expect(try await bob.directMessageHistory().count == 11)

        await follower.stop()
        status.stop()
        await proxy.stop()
        await relay.kill(signal: SIGTERM)
    }
}
