import Foundation
import NIOCore
import NIOEmbedded
import NIOWebSocket
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

@Suite("A socket's received messages: order, start and flow")
struct SocketInboxTests {
    /// Hands on everything queued, as a drain does.
    private func drain(_ inbox: inout SocketInbox<Int>) -> [Int] {
        var taken: [Int] = []
        while let message = inbox.next().message { taken.append(message) }
        return taken
    }

    @Test("nothing is handed on before start; what came before drains in order after it")
    func waitsForStart() {
        var inbox = SocketInbox<Int>(pauseAt: 4, resumeAt: 1)
        let beforeStart = [inbox.receive(1), inbox.receive(2)]
        #expect(beforeStart.allSatisfy { !$0.startDrain && !$0.pauseReading })
        let started = inbox.start()
        #expect(started)
        #expect(drain(&inbox) == [1, 2])
        #expect(!inbox.isDraining)
        // A start with nothing queued starts no drain, and the next
        // message does.
        var empty = SocketInbox<Int>(pauseAt: 4, resumeAt: 1)
        let emptyStarted = empty.start()
        #expect(!emptyStarted)
        let first = empty.receive(7)
        #expect(first.startDrain)
    }

    @Test("one drain at a time: a message arriving during a drain joins it; one after it starts the next")
    func oneDrainAtATime() {
        var inbox = SocketInbox<Int>(pauseAt: 10, resumeAt: 2)
        _ = inbox.start()
        let first = inbox.receive(1)
        let second = inbox.receive(2)
        #expect(first.startDrain && !second.startDrain)
        let one = inbox.next().message
        let third = inbox.receive(3)
        #expect(one == 1 && !third.startDrain)
        #expect(drain(&inbox) == [2, 3])
        let fourth = inbox.receive(4)
        #expect(fourth.startDrain)
    }

    @Test("reading stops once when pauseAt wait and resumes once when the drain is down to resumeAt")
    func pausesAndResumes() {
        var inbox = SocketInbox<Int>(pauseAt: 4, resumeAt: 1)
        _ = inbox.start()
        var pauses = 0
        for message in 1...6 where inbox.receive(message).pauseReading { pauses += 1 }
        #expect(pauses == 1)
        #expect(inbox.isReadingPaused)
        var taken: [Int] = []
        var resumedAfter: [Int] = []
        while true {
            let (message, resume) = inbox.next()
            guard let message else { break }
            taken.append(message)
            if resume { resumedAfter.append(message) }
        }
        #expect(taken == [1, 2, 3, 4, 5, 6])
        // Six waited; after handing on the fifth, one is left (resumeAt).
        #expect(resumedAfter == [5])
        #expect(!inbox.isReadingPaused)
    }

    @Test("a closed inbox drops what waits and takes nothing more")
    func closed() {
        var inbox = SocketInbox<Int>(pauseAt: 4, resumeAt: 1)
        _ = inbox.start()
        _ = inbox.receive(1)
        _ = inbox.receive(2)
        inbox.close()
        #expect(drain(&inbox).isEmpty)
        let late = inbox.receive(3)
        #expect(!late.startDrain && !late.pauseReading)
        #expect(inbox.count == 0)
    }
}

@Suite("The relay's WebSocket paths")
struct SocketRouteTests {
    @Test("the session and room socket paths, with or without a query")
    func routes() {
        typealias Route = RelayHTTPChannel.SocketRoute
        #expect(Route(target: "/v1/ws") == .session)
        #expect(Route(target: "/v1/ws?client=1") == .session)
        #expect(Route(target: "/v1/rooms/abc123/ws") == .room("abc123"))
        #expect(Route(target: "/v1/rooms/abc123/ws?x") == .room("abc123"))
    }

    @Test("everything else has no socket")
    func notRoutes() {
        for target in [
            "", "/", "/v1/ws/", "/v1/wss", "/v2/ws", "v1/ws", "/v1/rooms//ws", "/v1/rooms/a/b/ws", "/v1/rooms/a",
            "/v1/rooms/a/ws/", "/v1/topics/group/x", "//v1/ws",
        ] {
            #expect(RelayHTTPChannel.SocketRoute(target: target) == nil, "\(target)")
        }
    }
}

@Suite("The relay's own WebSocket handling", .timeLimit(.minutes(1)))
struct SessionSocketTests {
    @Test("a WebSocket ping is answered with a pong carrying its payload")
    func pingPong() async throws {
        let fixture = try await RelayFixture()
        let client = try await WireClient.connect(fixture)
        try await client.socket.sendPing(Data("are you there".utf8))
        let pong = try #require(try await client.socket.receive())
        #expect(pong == RawWebSocket.Message(opcode: 0xA, payload: Data("are you there".utf8)))
        try await client.expectStillServing()
        await client.close()
        await fixture.stop()
    }

    @Test("a message sent in fragments reaches the session whole")
    func fragments() async throws {
        let fixture = try await RelayFixture()
        let client = try await WireClient.connect(fixture)
        var ping = WirePing()
        ping.nonce = 42
        let bytes = WireClientFrame.make(3, .ping(ping)).bytes
        let cut = bytes.count / 2
        let parts = [Data(bytes.prefix(1)), Data(bytes[1..<cut]), Data(bytes[cut...])]
        try await client.socket.sendBinary(inFragments: parts)
        let reply = try #require(try await client.next())
        #expect(reply.requestID == 3)
        #expect(reply.pong.nonce == 42)
        await client.close()
        await fixture.stop()
    }

    @Test("fragments adding up to more than the transport limit close the socket with 1009; others carry on")
    func fragmentsOverTheLimit() async throws {
        var limits = RelayLimits.default
        limits.transportMaxFrameBytes = 8192
        let fixture = try await RelayFixture(limits: limits)
        let bystander = try await WireClient.connect(fixture)
        let client = try await WireClient.connect(fixture)
        try await client.socket.sendBinary(inFragments: Array(repeating: Data(count: 4000), count: 3))
        let close = try #require(try await client.socket.receive())
        #expect(close.opcode == 0x8)
        #expect(close.payload.prefix(2) == Data([0x03, 0xF1]))  // 1009, message too big
        #expect(try await client.socket.receive() == nil)
        try await bystander.expectStillServing()
        await bystander.close()
        await fixture.stop()
    }

    @Test(
        "a frame RFC 6455 says fails the connection closes the socket with 1002; others carry on",
        arguments: [
            ("unmasked", Data([0x82, 0x01, 0x00])),
            ("reserved opcode", Data([0x83, 0x81, 1, 2, 3, 4, 0x00])),
            ("reserved bit", Data([0xC2, 0x81, 1, 2, 3, 4, 0x00])),
            ("continuation without a message", Data([0x80, 0x81, 1, 2, 3, 4, 0x00])),
        ])
    func protocolViolationCloses(name: String, frame: Data) async throws {
        let fixture = try await RelayFixture()
        let bystander = try await WireClient.connect(fixture)
        let client = try await WireClient.connect(fixture)
        try await client.socket.sendRaw(frame)
        let close = try #require(try await client.socket.receive(), "\(name)")
        #expect(close.opcode == 0x8, "\(name)")
        #expect(close.payload.prefix(2) == Data([0x03, 0xEA]), "\(name)")  // 1002, protocol error
        #expect(try await client.socket.receive() == nil, "\(name)")
        try await bystander.expectStillServing()
        await bystander.close()
        await fixture.stop()
    }

    @Test("three hundred requests sent without reading are all answered, in the order sent")
    func floodIsAnsweredInOrder() async throws {
        let fixture = try await RelayFixture()
        let client = try await WireClient.connect(fixture)
        // Far past the 64 queued messages at which the relay stops reading
        // the socket until its queue drains.
        let count = 300
        let burst = (0..<UInt64(count)).map { nonce in
            var ping = WirePing()
            ping.nonce = nonce
            return WireClientFrame.make(100 + nonce, .ping(ping)).bytes
        }
        try await client.socket.sendBinaryBurst(burst)
        var nonces: [UInt64] = []
        while nonces.count < count, let frame = try await client.next() { nonces.append(frame.pong.nonce) }
        #expect(nonces == Array(0..<UInt64(count)))
        await client.close()
        await fixture.stop()
    }

    @Test("three hundred publishes sent without reading are all acknowledged, in the order sent, with gap-free seqs")
    func publishFloodIsAnsweredInOrder() async throws {
        let fixture = try await RelayFixture()
        let client = try await WireClient.connect(fixture)
        let topic = "inbox/" + Identity(displayName: "Owner").inboxID.rawValue
        // Under the per-connection burst (400); the socket's event loop
        // takes them while the socket can take writes, the session after.
        let count = 300
        let burst = (1...UInt64(count)).map { index in
            WireClientFrame.make(index, .publish(publishBody(topic, "m\(index)"))).bytes
        }
        try await client.socket.sendBinaryBurst(burst)
        var acks: [(request: UInt64, seq: UInt64)] = []
        while acks.count < count, let frame = try await client.next() {
            if case .publishAck(let ack)? = frame.body { acks.append((frame.requestID, ack.seq)) }
        }
        #expect(acks.map(\.request) == Array(1...UInt64(count)))
        #expect(acks.map(\.seq) == Array(1...UInt64(count)))
        await client.close()
        await fixture.stop()
    }

    @Test("a subscriber that stops reading is cut off with SLOW_CONSUMER, not buffered without end")
    func stalledSubscriberIsCutOff() async throws {
        var limits = RelayLimits.default
        limits.subscriberBufferSize = 4
        limits.publishBurst = 10_000
        limits.publishBurstPerIP = 10_000
        limits.publishBurstPerIdentity = 10_000
        let fixture = try await RelayFixture(limits: limits)
        let hub = fixture.relay.server.services.hub
        let reader = Identity(displayName: "reader")
        // A small receive window, so the relay's socket fills after little.
        let socket = try await RawWebSocket.connect(port: fixture.relay.port, receiveBufferBytes: 4096)
        let first = try #require(try await socket.receive())
        let challenge = try FrameCodec.decodeServerFrame(first.payload).challenge
        let stalled = WireClient(socket: socket, challenge: challenge, origin: fixture.origin)
        try await stalled.authenticate(reader)
        var subscribe = WireSubscribe()
        subscribe.topic = groupTopic
        subscribe.proof = stalled.proof(groupTopic, groupAccess)
        try await stalled.send(2, .subscribe(subscribe))
        #expect(try await stalled.next()?.subscribed.caughtUpSeq == 0)

        // It stops reading. Another connection publishes large envelopes
        // until the relay has cut the subscription off: the socket fills,
        // the feed waits for it, the hub's buffer of 4 overflows.
        let publisher = try await WireClient.connect(fixture)
        let payload = Data(repeating: 0x5A, count: WireLimits.maxPayloadBytes)
        var published: UInt64 = 0
        while hub.subscriberCount(topic: groupTopic) > 0 {
            try #require(published < 400, "the relay kept buffering for a subscriber that does not read")
            published += 1
            var publish = WirePublish()
            publish.topic = groupTopic
            publish.payload = payload
            publish.proof = publisher.proof(groupTopic, groupAccess)
            try await publisher.send(published, .publish(publish))
            #expect(try await publisher.next()?.publishAck.seq == published)
        }

        // Reading again: a gap-free run from seq 1, then SLOW_CONSUMER for
        // the topic, pushed (request id 0); nothing of the topic after it.
        var seqs: [UInt64] = []
        var cutOff: WireServerFrame?
        while cutOff == nil, let frame = try await stalled.next() {
            if case .envelope(let envelope)? = frame.body { seqs.append(envelope.seq) } else { cutOff = frame }
        }
        let error = try #require(cutOff)
        #expect(error.errorCode == .slowConsumer)
        #expect(error.error.topic == groupTopic)
        #expect(error.requestID == 0)
        #expect(seqs == Array(1...UInt64(seqs.count)))
        #expect(UInt64(seqs.count) < published)
        try await stalled.expectStillServing()
        await stalled.close()
        await publisher.close()
        await fixture.stop()
    }

    @Test("an upgrade to a path with no WebSocket is refused with 400, and the relay serves on")
    func upgradeElsewhere() async throws {
        let fixture = try await RelayFixture()
        await #expect(throws: POSIXError.self) {
            _ = try await RawWebSocket.connect(port: fixture.relay.port, path: "/v1/nowhere")
        }
        let client = try await WireClient.connect(fixture)
        try await client.expectStillServing()
        await client.close()
        await fixture.stop()
    }

    @Test("an upgrade asked after a plain request on the same connection is sent to a new one (307)")
    func lateUpgrade() async throws {
        let fixture = try await RelayFixture()
        let connection = try RawWebSocket.open(port: fixture.relay.port)
        let host = "Host: 127.0.0.1:\(fixture.relay.port)\r\n"
        let health = try #require(try await connection.exchangeHTTP("GET /healthz HTTP/1.1\r\n\(host)\r\n"))
        #expect(health.hasPrefix("HTTP/1.1 200"))
        let length = health.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
        _ = try await connection.readBody(length: try #require(length))
        let upgrade = try #require(
            try await connection.exchangeHTTP(
                "GET /v1/ws HTTP/1.1\r\n\(host)Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"))
        #expect(upgrade.hasPrefix("HTTP/1.1 307"))
        #expect(upgrade.lowercased().contains("location: /v1/ws\r\n"))
        await fixture.stop()
    }

    @Test("a request with more header fields than the limit gets 400 and a close; one at the limit is served")
    func headerFieldLimit() async throws {
        let fixture = try await RelayFixture()
        func get(withFields count: Int) async throws -> String? {
            let connection = try RawWebSocket.open(port: fixture.relay.port)
            let fields = (0..<count - 1).map { "X-Filler-\($0): x\r\n" }.joined()
            return try await connection.exchangeHTTP(
                "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(fixture.relay.port)\r\n\(fields)\r\n")
        }
        let atLimit = try await get(withFields: RelayHTTPChannel.maxHeaderFields)
        #expect(atLimit?.hasPrefix("HTTP/1.1 200") == true)
        let over = try await get(withFields: RelayHTTPChannel.maxHeaderFields + 1)
        #expect(over?.hasPrefix("HTTP/1.1 400") == true)
        #expect(over?.lowercased().contains("connection: close") == true)
        await fixture.stop()
    }
}

/// Which path a publish takes, on an embedded channel whose writability
/// the test sets (ADR 0028, threat model row 54).
@Suite("Publishes on the socket's event loop", .timeLimit(.minutes(1)))
struct LoopPublishTests {
    static let topic = "inbox/" + Identity(displayName: "Owner").inboxID.rawValue

    static func publishFrame(_ requestID: UInt64) -> Data {
        Data(WireClientFrame.make(requestID, .publish(publishBody(topic, "hello"))).bytes)
    }

    static func acks(_ channel: EmbeddedChannel) throws -> [WireServerFrame] {
        var frames: [WireServerFrame] = []
        while let frame = try channel.readOutbound(as: WebSocketFrame.self) {
            frames.append(try FrameCodec.decodeServerFrame(Data(frame.unmaskedData.readableBytesView)))
        }
        return frames
    }

    /// A socket on an embedded channel, taking messages, over a real store.
    struct Fixture {
        let directory: TemporaryDirectory
        let store: SQLiteRelayStore
        let services: RelayServices
        let channel = EmbeddedChannel()
        let socket: SessionSocket

        init(writable: Bool) throws {
            directory = try TemporaryDirectory()
            store = try SQLiteRelayStore(url: directory.storeURL)
            services = makeServices(store: store)
            channel.isWritable = writable
            socket = SessionSocket(channel: channel, services: services, remoteIP: "127.0.0.1")
            socket.startTakingMessagesForTesting()
        }

        func close() async throws {
            await services.writer.close()
            _ = try? channel.finish()
            try await store.close()
            directory.remove()
        }
    }

    @Test("a writable socket's publish is committed and acknowledged on its event loop")
    func writableTakesTheLoop() async throws {
        let fixture = try Fixture(writable: true)
        fixture.socket.receivedOnLoop(Self.publishFrame(7))
        #expect(fixture.services.writer.queuedCount == 1, "queued at once, on the loop")
        fixture.channel.embeddedEventLoop.run()
        let frames = try Self.acks(fixture.channel)
        #expect(frames.map(\.requestID) == [7])
        #expect(frames.first?.publishAck.seq == 1)
        try await fixture.close()
    }

    @Test(
        "a socket that cannot take writes sends its publish through the session's queue, answered only by the ack pump")
    func unwritableGoesToTheSession() async throws {
        let fixture = try Fixture(writable: false)
        fixture.socket.receivedOnLoop(Self.publishFrame(8))
        // The session commits it; nothing is written without the pump
        // (which waits for the socket to take writes).
        while try await fixture.store.headSeq(topic: Self.topic) == 0 {
            await Task.yield()
        }
        await fixture.services.writer.close()
        fixture.channel.embeddedEventLoop.run()
        #expect(try Self.acks(fixture.channel).isEmpty)
        try await fixture.close()
    }
}
