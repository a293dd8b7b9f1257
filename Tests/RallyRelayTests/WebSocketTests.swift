import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

/// A protobuf-speaking client over the raw socket.
struct WireClient {
    let socket: RawWebSocket
    let challenge: WireChallenge
    /// The origin the relay answers to on this port.
    let origin: String

    static func connect(_ fixture: RelayFixture) async throws -> WireClient {
        let socket = try await RawWebSocket.connect(port: fixture.relay.port)
        let first = try #require(try await socket.receive())
        let frame = try FrameCodec.decodeServerFrame(first.payload)
        return WireClient(socket: socket, challenge: frame.challenge, origin: "http://127.0.0.1:\(fixture.relay.port)")
    }

    func proof(_ topic: String, _ access: TopicAccess) -> WireTopicProof {
        access.connectionProof(origin: origin, challengeNonce: challenge.nonce, topic: topic)
    }

    func send(_ requestID: UInt64, _ body: WireClientFrame.OneOf_Body) async throws {
        try await socket.sendBinary(WireClientFrame.make(requestID, body).bytes)
    }

    /// The next protobuf frame; nil once the relay closed the connection.
    func next() async throws -> WireServerFrame? {
        while let message = try await socket.receive() {
            switch message.opcode {
            case 0x2: return try FrameCodec.decodeServerFrame(message.payload)
            case 0x8:
                try? await socket.sendClose()
                return nil
            default: continue
            }
        }
        return nil
    }

    func authenticate(_ identity: Identity) async throws {
        try await send(1, .authenticate(identity.authenticate(challengeNonce: challenge.nonce, origin: origin)))
        #expect(try await next()?.authenticated.inboxID == identity.inboxID.rawValue)
    }

    func close() async {
        try? await socket.sendClose()
        while (try? await socket.receive()) ?? nil != nil {}
    }

    func expectStillServing() async throws {
        var ping = WirePing()
        ping.nonce = 5
        try await send(99, .ping(ping))
        #expect(try await next()?.pong.nonce == 5)
    }
}

@Suite("WebSocket endpoint", .timeLimit(.minutes(1)))
struct WebSocketTests {
    @Test("challenge, authenticate, subscribe an inbox, and receive a post from another connection")
    func endToEnd() async throws {
        let fixture = try await RelayFixture()
        let owner = Identity(displayName: "Owner")
        let reader = try await WireClient.connect(fixture)
        #expect(reader.challenge.nonce.count == 32)
        #expect(reader.challenge.protocolVersion == WireLimits.protocolVersion)
        try await reader.authenticate(owner)
        var subscribe = WireSubscribe()
        subscribe.topic = "inbox/" + owner.inboxID.rawValue
        try await reader.send(2, .subscribe(subscribe))
        #expect(try await reader.next()?.subscribed.caughtUpSeq == 0)

        // Posting to an inbox needs a connection but no authentication.
        let poster = try await WireClient.connect(fixture)
        try await poster.send(7, .publish(publishBody(subscribe.topic, "hello", key: "k")))
        let ack = try #require(try await poster.next())
        #expect(ack.requestID == 7)
        #expect(ack.publishAck.seq == 1)
        let envelope = try #require(try await reader.next())
        #expect(envelope.envelope.payload == Data("hello".utf8))
        #expect(envelope.envelope.seq == 1)
        await reader.close()
        await poster.close()
        await fixture.stop()
    }

    @Test(
        "publishes sent in one write with other requests between them are stored in the order sent, whether the socket's loop or the session takes them"
    )
    func publishOrderAcrossPaths() async throws {
        let fixture = try await RelayFixture()
        let owner = Identity(displayName: "Owner")
        let topic = "inbox/" + owner.inboxID.rawValue
        let client = try await WireClient.connect(fixture)
        // The first publish finds nothing waiting and is taken on the
        // socket's event loop; the ping behind it goes to the session, and
        // so does every publish queued behind the ping (ADR 0028).
        var frames: [Data] = []
        for index in 1...20 {
            frames.append(WireClientFrame.make(UInt64(index), .publish(publishBody(topic, "m\(index)"))).bytes)
            if index % 3 == 1 {
                var ping = WirePing()
                ping.nonce = UInt64(index)
                frames.append(WireClientFrame.make(1000 + UInt64(index), .ping(ping)).bytes)
            }
        }
        try await client.socket.sendBinaryBurst(frames)
        var seqByRequest: [UInt64: UInt64] = [:]
        var pongs = 0
        while seqByRequest.count < 20 || pongs < 7, let frame = try await client.next() {
            if case .publishAck(let ack)? = frame.body { seqByRequest[frame.requestID] = ack.seq } else { pongs += 1 }
        }
        #expect(pongs == 7)
        #expect((1...20).map { seqByRequest[UInt64($0)] } == (1...20).map { UInt64($0) })
        await client.close()
        await fixture.stop()
    }

    @Test(
        "while two connections publish bursts, a subscriber gets every envelope once and in order, written by the commit that stored it or by its feed"
    )
    func liveDeliveryKeepsOrder() async throws {
        let fixture = try await RelayFixture()
        let owner = Identity(displayName: "Owner")
        let topic = "inbox/" + owner.inboxID.rawValue
        let reader = try await WireClient.connect(fixture)
        try await reader.authenticate(owner)
        var subscribe = WireSubscribe()
        subscribe.topic = topic
        try await reader.send(2, .subscribe(subscribe))
        #expect(try await reader.next()?.subscribed.caughtUpSeq == 0)

        let perPoster = 150
        var posters: [WireClient] = []
        for poster in 0..<2 {
            let client = try await WireClient.connect(fixture)
            let burst = (1...perPoster).map { index in
                WireClientFrame.make(UInt64(index), .publish(publishBody(topic, "p\(poster)-\(index)"))).bytes
            }
            try await client.socket.sendBinaryBurst(burst)
            posters.append(client)
        }
        var seqs: [UInt64] = []
        var payloads: Set<String> = []
        while seqs.count < 2 * perPoster, let frame = try await reader.next() {
            guard case .envelope(let envelope)? = frame.body else { continue }
            seqs.append(envelope.seq)
            payloads.insert(String(decoding: envelope.payload, as: UTF8.self))
        }
        #expect(seqs == Array(1...UInt64(2 * perPoster)))
        #expect(payloads.count == 2 * perPoster)
        // The first envelope after Subscribed finds the feed caught up and
        // the socket writable, so at least that one took the direct path.
        let metrics = String(decoding: try await fixture.http("GET", "/metrics").body, as: UTF8.self)
        let liveWrites = metrics.split(separator: "\n").first { $0.hasPrefix("rally_relay_live_writes_total ") }
            .flatMap { Double($0.split(separator: " ").last ?? "") }
        #expect((liveWrites ?? 0) >= 1)
        #expect(metrics.contains("rally_relay_deliveries_total \(2 * perPoster)"))
        for poster in posters { await poster.close() }
        await reader.close()
        await fixture.stop()
    }

    @Test(
        "a removed member's live subscription, whose envelopes the commits may write themselves, ends with ACCESS_REVOKED at the rotation and never gets the entry after it"
    )
    func liveSubscriptionEndsAtRotation() async throws {
        let fixture = try await RelayFixture()
        let (first, second) = (testAccess(61), testAccess(62))
        let topic = "group/" + first.foundedTopicID
        let member = try await WireClient.connect(fixture)
        try await member.authenticate(Identity(displayName: "Member"))
        var subscribe = WireSubscribe()
        subscribe.topic = topic
        subscribe.proof = member.proof(topic, first)
        try await member.send(2, .subscribe(subscribe))
        #expect(try await member.next()?.subscribed.caughtUpSeq == 0)

        let admin = try await WireClient.connect(fixture)
        try await admin.authenticate(Identity(displayName: "Admin"))
        func publish(
            _ requestID: UInt64, _ text: String, _ access: TopicAccess, control: Bool = false, expected: UInt64 = 0,
            rotate: TopicAccess? = nil
        ) async throws -> UInt64 {
            var body = publishBody(topic, text)
            body.proof = admin.proof(topic, access)
            body.control = control
            body.expectedControlSeq = expected
            if let rotate { body.rotateAccessKey = rotate.publicKey }
            try await admin.send(requestID, .publish(body))
            return try #require(try await admin.next()).publishAck.seq
        }
        // One at a time, each received before the next: the member's feed
        // is caught up and idle, the state in which commits write to it.
        #expect(try await publish(10, "create", first, control: true) == 1)
        #expect(try await member.next()?.envelope.seq == 1)
        #expect(try await publish(11, "hello", first) == 2)
        #expect(try await member.next()?.envelope.seq == 2)
        #expect(try await publish(12, "rotate", first, control: true, expected: 1, rotate: second) == 3)
        #expect(try await publish(13, "after", second) == 4)

        var seqs: [UInt64] = []
        var revoked: WireServerFrame?
        var ping = WirePing()
        ping.nonce = 9
        try await member.send(20, .ping(ping))
        while let frame = try await member.next() {
            if case .envelope(let envelope)? = frame.body { seqs.append(envelope.seq) }
            if seqs.contains(where: { $0 > 3 }) { break }
            if frame.errorCode != nil { revoked = frame }
            if case .pong? = frame.body, revoked != nil { break }
            if case .pong? = frame.body { try await member.send(20, .ping(ping)) }
        }
        #expect(seqs == [3], "the rotating entry, and nothing after it")
        #expect(revoked?.errorCode == .accessRevoked && revoked?.error.seq == 3)
        await admin.close()
        await member.close()
        await fixture.stop()
    }

    @Test("a garbage frame gets MALFORMED_FRAME and a close; other connections carry on")
    func malformedFrame() async throws {
        let fixture = try await RelayFixture()
        let bystander = try await WireClient.connect(fixture)
        let attacker = try await WireClient.connect(fixture)
        try await attacker.socket.sendBinary(Data([0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]))
        #expect(try await attacker.next()?.errorCode == .malformedFrame)
        #expect(try await attacker.next() == nil)
        try await bystander.expectStillServing()

        let texter = try await WireClient.connect(fixture)
        try await texter.socket.sendText("hello")
        #expect(try await texter.next()?.errorCode == .malformedFrame)
        #expect(try await texter.next() == nil)
        await bystander.close()
        await fixture.stop()
    }

    @Test("an oversized frame gets FRAME_TOO_LARGE; a huge one is refused by the transport")
    func oversizedFrames() async throws {
        let fixture = try await RelayFixture()
        let bystander = try await WireClient.connect(fixture)
        let large = try await WireClient.connect(fixture)
        try await large.socket.sendBinary(Data(count: WireLimits.maxFrameBytes + 1))
        #expect(try await large.next()?.errorCode == .frameTooLarge)
        #expect(try await large.next() == nil)

        let huge = try await WireClient.connect(fixture)
        try await huge.socket.sendHeaderOnly(announcing: 1 << 40)
        #expect(try await huge.next() == nil)
        try await bystander.expectStillServing()
        await bystander.close()
        await fixture.stop()
    }

    @Test("an unauthenticated connection is closed with AUTHENTICATION_TIMEOUT")
    func authenticationTimeout() async throws {
        var limits = RelayLimits.default
        limits.authTimeout = .milliseconds(100)
        let fixture = try await RelayFixture(limits: limits)
        let client = try await WireClient.connect(fixture)
        #expect(client.challenge.authTimeoutMs == 100)
        #expect(try await client.next()?.errorCode == .authenticationTimeout)
        #expect(try await client.next() == nil)
        await fixture.stop()
    }

    @Test("a connection quiet for the idle timeout on the relay's clock gets IDLE_TIMEOUT and is closed")
    func idleTimeoutOverTheSocket() async throws {
        let clock = ManualRelayClock()
        var limits = RelayLimits.default
        limits.idleTimeout = .seconds(60)
        let fixture = try await RelayFixture(limits: limits, clock: clock)
        let client = try await WireClient.connect(fixture)
        try await client.authenticate(Identity(displayName: "quiet"))
        clock.advance(by: .seconds(61))
        #expect(try await client.next()?.errorCode == .idleTimeout)
        #expect(try await client.next() == nil)
        await fixture.stop()
    }

    @Test("graceful stop finishes acknowledged publishes and closes connections")
    func gracefulStop() async throws {
        let fixture = try await RelayFixture()
        let client = try await WireClient.connect(fixture)
        try await client.authenticate(Identity(displayName: "Ada"))
        var publish = publishBody(groupTopic, "x")
        publish.proof = client.proof(groupTopic, groupAccess)
        try await client.send(2, .publish(publish))
        #expect(try await client.next()?.publishAck.seq == 1)
        // Stop while the client still reads, so it can answer the close.
        let stopping = Task { await fixture.relay.stop() }
        // Whatever arrives before the close (SHUTTING_DOWN at most), the
        // connection ends.
        while let frame = try await client.next() {
            #expect(frame.errorCode == .shuttingDown)
        }
        await stopping.value
        let store = try SQLiteRelayStore(url: fixture.directory.storeURL)
        #expect(try await store.headSeq(topic: groupTopic) == 1)
        try await store.close()
        fixture.directory.remove()
    }

    @Test("the connection cap refuses with TOO_MANY_CONNECTIONS and closes; a freed slot is reusable")
    func connectionCap() async throws {
        var limits = RelayLimits.default
        limits.maxConnectionsPerIP = 1
        let fixture = try await RelayFixture(limits: limits)
        let first = try await WireClient.connect(fixture)
        let refused = try await RawWebSocket.connect(port: fixture.relay.port)
        let message = try #require(try await refused.receive())
        #expect(try FrameCodec.decodeServerFrame(message.payload).errorCode == .tooManyConnections)
        var rest: [UInt8] = []
        while let next = try await refused.receive() { rest.append(next.opcode) }
        #expect(rest.allSatisfy { $0 == 0x8 })
        try await first.expectStillServing()
        await first.close()
        while fixture.relay.server.services.connections.openCount > 0 { await Task.yield() }
        let again = try await WireClient.connect(fixture)
        try await again.expectStillServing()
        await again.close()
        await fixture.stop()
    }

    @Test("an authentication signed for another origin is refused over the socket")
    func otherOrigin() async throws {
        let fixture = try await RelayFixture()
        let client = try await WireClient.connect(fixture)
        let identity = Identity(displayName: "Ada")
        try await client.send(
            1,
            .authenticate(
                identity.authenticate(challengeNonce: client.challenge.nonce, origin: "http://relay.evil:8080")))
        #expect(try await client.next()?.errorCode == .authenticationFailed)
        // localhost is the same loopback relay.
        try await client.send(
            2,
            .authenticate(
                identity.authenticate(
                    challengeNonce: client.challenge.nonce, origin: "http://localhost:\(fixture.relay.port)")))
        #expect(try await client.next()?.authenticated.inboxID == identity.inboxID.rawValue)
        await client.close()
        await fixture.stop()
    }
}
