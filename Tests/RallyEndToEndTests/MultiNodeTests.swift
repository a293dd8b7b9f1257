import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore
@testable import RallyRelay

/// Several relay nodes on one PostgreSQL (ADR 0021), with clients on
/// different nodes: one order and gap-free seqs per topic under
/// concurrent publishers, idempotency whichever node a retry reaches, live
/// delivery across nodes, and nothing acknowledged lost when a node is
/// SIGKILLed mid-publish.
@Suite(
    "Relay nodes sharing PostgreSQL", .enabled(if: PostgresTestDatabase.isAvailable, "needs RALLY_TEST_POSTGRES_URL"),
    .timeLimit(.minutes(3)))
struct MultiNodeTests {
    struct Nodes {
        let database: PostgresTestDatabase
        let nodes: [RunningRelay]
        let directory: TemporaryDirectory

        static func start(_ count: Int, limits: RelayLimits = .default) async throws -> Nodes {
            let database = try await PostgresTestDatabase.create()
            let directory = TemporaryDirectory("rally-nodes")
            var nodes: [RunningRelay] = []
            for index in 0..<count {
                nodes.append(
                    try await RunningRelay.start(
                        configuration: RelayConfiguration(
                            port: 0, dataDirectory: directory.path("node\(index)"), limits: limits.onATestMachine,
                            postgres: database.location),
                        logger: TestLogger.quiet))
            }
            return Nodes(database: database, nodes: nodes, directory: directory)
        }

        func connect(_ node: Int, _ identity: Identity) async throws -> RelayConnection {
            try await RelayConnection.connect(to: nodes[node].url, identity: identity, logger: TestLogger.quiet)
        }

        func stop() async {
            for node in nodes { await node.stop() }
            await database.drop()
            directory.remove()
        }
    }

    static func capabilityTopic() throws -> (TopicAccess, TopicName) {
        let access = try TopicAccess(secret: TopicAccess.newSecret())
        return (access, try TopicName(validating: "test/\(access.foundedTopicID)"))
    }

    /// Everything stored on `topic`, read through `connection`.
    static func readAll(
        _ connection: RelayConnection, _ topic: TopicName, access: TopicAccess?
    ) async throws
        -> [WireEnvelope]
    {
        var stored: [WireEnvelope] = []
        for try await event in await connection.subscribe(topic: topic, after: 0, access: access) {
            if case .envelope(let envelope) = event { stored.append(envelope) }
            if case .caughtUp = event { break }
        }
        await connection.unsubscribe(topic: topic)
        return stored
    }

    @Test(
        "publishers on three nodes at once: one gap-free order per topic, and a retry on another node is answered with the first seq"
    )
    func orderAndIdempotencyAcrossNodes() async throws {
        let cluster = try await Nodes.start(3)
        let (access, topic) = try Self.capabilityTopic()
        let identity = Identity(displayName: "writer")
        let perNode = 40
        actor Acks {
            var seqs: [Data: UInt64] = [:]
            func add(_ key: Data, _ seq: UInt64) { seqs[key] = seq }
        }
        let acks = Acks()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for node in 0..<3 {
                group.addTask {
                    let connection = try await cluster.connect(node, identity)
                    for index in 0..<perNode {
                        let key = Data("node \(node) message \(index)".utf8)
                        let ack = try await connection.publish(
                            topic: topic, payload: key, idempotencyKey: key, access: access)
                        #expect(!ack.duplicate)
                        await acks.add(key, ack.seq)
                    }
                    await connection.close()
                }
            }
            try await group.waitForAll()
        }
        let acked = await acks.seqs
        #expect(Set(acked.values) == Set(1...UInt64(3 * perNode)))

        // Each message retried on another node than the one that took it.
        for node in 0..<3 {
            let connection = try await cluster.connect((node + 1) % 3, identity)
            for index in stride(from: 0, to: perNode, by: 7) {
                let key = Data("node \(node) message \(index)".utf8)
                let retry = try await connection.publish(
                    topic: topic, payload: key, idempotencyKey: key, access: access)
                #expect(retry.duplicate && retry.seq == acked[key])
            }
            await connection.close()
        }
        // Every node reads the same order, gap-free from 1, each seq with
        // the payload its publisher was told.
        var orders: [[UInt64]] = []
        for node in 0..<3 {
            let reader = try await cluster.connect(node, Identity(displayName: "reader \(node)"))
            let stored = try await Self.readAll(reader, topic, access: access)
            #expect(stored.map(\.seq) == Array(1...UInt64(3 * perNode)))
            for envelope in stored { #expect(acked[envelope.payload] == envelope.seq) }
            orders.append(stored.map(\.seq))
            await reader.close()
        }
        #expect(orders.allSatisfy { $0 == orders[0] })
        await cluster.stop()
    }

    @Test(
        "subscribing with a topic's founding key on one node while another node founds the topic: never refused, and the first envelope arrives (20 rounds)"
    )
    func foundingRace() async throws {
        let cluster = try await Nodes.start(2)
        let identity = Identity(displayName: "racer")
        let subscriber = try await cluster.connect(1, identity)
        let publisher = try await cluster.connect(0, identity)
        // Round by round, the subscribe and the founding publish at once:
        // the race is between the two, not between rounds (and the suite
        // runs beside everything else on two cores).
        for round in 0..<20 {
            let (access, topic) = try Self.capabilityTopic()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    var events = await subscriber.subscribe(topic: topic, after: 0, access: access)
                        .makeAsyncIterator()
                    while let event = try await events.next() {
                        if case .envelope(let envelope) = event {
                            #expect(envelope.seq == 1)
                            break
                        }
                    }
                    await subscriber.unsubscribe(topic: topic)
                }
                group.addTask {
                    _ = try await publisher.publish(
                        topic: topic, payload: Data("round \(round)".utf8),
                        idempotencyKey: MessageSealing.newMessageID(), access: access)
                }
                try await group.waitForAll()
            }
        }
        await subscriber.close()
        await publisher.close()
        await cluster.stop()
    }

    @Test("a subscriber on one node receives live, in order, what is published on the others")
    func liveAcrossNodes() async throws {
        let cluster = try await Nodes.start(3)
        let bob = Identity(displayName: "bob")
        let inbox = try TopicName.inbox(bob.inboxID.rawValue)
        let reader = try await cluster.connect(1, bob)
        var events = await reader.subscribe(topic: inbox, after: 0, access: nil).makeAsyncIterator()
        #expect(try await events.next() == .caughtUp(seq: 0))

        let alice = try await cluster.connect(0, Identity(displayName: "alice"))
        let carol = try await cluster.connect(2, Identity(displayName: "carol"))
        var expected: [Data] = []
        for round in 1...5 {
            for (sender, name) in [(alice, "alice"), (carol, "carol")] {
                let payload = Data("\(name) \(round)".utf8)
                _ = try await sender.publish(
                    topic: inbox, payload: payload, idempotencyKey: MessageSealing.newMessageID())
                expected.append(payload)
            }
        }
        var received: [WireEnvelope] = []
        while received.count < expected.count, let event = try await events.next() {
            if case .envelope(let envelope) = event { received.append(envelope) }
        }
        #expect(received.map(\.seq) == Array(1...UInt64(expected.count)))
        #expect(received.map(\.payload) == expected)

        // Publishers on two nodes at once, the reader on the third: live
        // delivery stays gap-free and in the store's order.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for sender in [alice, carol] {
                group.addTask {
                    for index in 0..<25 {
                        _ = try await sender.publish(
                            topic: inbox, payload: Data("burst \(index)".utf8),
                            idempotencyKey: MessageSealing.newMessageID())
                    }
                }
            }
            try await group.waitForAll()
        }
        var burst: [UInt64] = []
        while burst.count < 50, let event = try await events.next() {
            if case .envelope(let envelope) = event { burst.append(envelope.seq) }
        }
        #expect(burst == Array(UInt64(expected.count + 1)...UInt64(expected.count + 50)))
        for connection in [reader, alice, carol] { await connection.close() }
        await cluster.stop()
    }

    @Test("a push target registered through one node is called by another node that stores a message for it")
    func pushAcrossNodes() async throws {
        var limits = RelayLimits.default
        limits.push.allowsInsecureTargets = true
        limits.push.allowsPrivateTargets = true
        let cluster = try await Nodes.start(2, limits: limits)
        let receiver = try await HostileHTTPServer.start { _ in .complete(status: 200) }
        let homes = TemporaryDirectory("rally-nodes-push")
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: cluster.nodes[0].url, displayName: "bob", logger: TestLogger.quiet)
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: cluster.nodes[1].url, displayName: "alice", logger: TestLogger.quiet)
        var events = cluster.nodes[1].server.services.push.events.makeAsyncIterator()
        let hook = receiver.url.appendingPathComponent("bob")
        _ = try await bob.registerPush(hook)
        // Node 1 learns of the registration from the shared database.
        let push = cluster.nodes[1].server.services.push
        while await !push.isRegistered(inbox: bob.inboxID.rawValue) {
            try Task.checkCancellation()
            await Task.yield()
        }
        _ = try await alice.sendText("hello from node 1", to: bob.inboxID)
        #expect(await events.next() == .scheduled(inbox: bob.inboxID.rawValue))
        guard case .finished(.delivered)? = await events.next() else {
            Issue.record("node 1 did not deliver Bob's push")
            return
        }
        #expect(receiver.requests.map(\.path).contains("/bob"))
        await bob.disconnect()
        await alice.disconnect()
        await receiver.stop()
        homes.remove()
        await cluster.stop()
    }

    @Test("a node SIGKILLed while publishers write through it loses nothing it acknowledged")
    func sigkillOfANode() async throws {
        let cluster = try await Nodes.start(1)
        let directory = TemporaryDirectory("rally-node-kill")
        let node = try await RelayProcess.start(
            dataDirectory: directory.path("data"), arguments: ["--postgres", cluster.database.url])
        let (access, topic) = try Self.capabilityTopic()
        let identity = Identity(displayName: "publisher")
        let acked = await publishUntilKilled(relayURL: node.url, identity: identity, topic: topic, access: access) {
            await node.kill(signal: SIGKILL)
        }
        #expect(node.terminationStatus != 0)

        // The surviving node reads the shared store.
        let reader = try await cluster.connect(0, identity)
        let stored = try await Self.readAll(reader, topic, access: access)
        expectAcknowledgedStored(acked, stored)
        await reader.close()
        directory.remove()
        await cluster.stop()
    }
}
