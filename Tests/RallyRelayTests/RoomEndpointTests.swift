import Foundation
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyRelay

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The call rooms on a real relay (docs/adr/0018): create, join over a
/// WebSocket and over HTTP, signals relayed as opaque bytes, the reconnect
/// token, leave, end, `room_gone` with its reason, hostile frames, and the
/// browser client's pages and their headers.
@Suite("Call rooms on the relay", .timeLimit(.minutes(10)))
struct RoomEndpointTests {
    struct Created: Decodable {
        var room: String
        var path: String
        var endToken: String

        enum CodingKeys: String, CodingKey {
            case room, path
            case endToken = "end_token"
        }
    }

    static func http(
        _ relay: TestRelay, _ method: String, _ path: String, body: Data? = nil, headers: [String: String] = [:]
    ) async throws -> (status: Int, body: Data, headers: [String: String]) {
        var request = URLRequest(url: URL(string: relay.url.absoluteString + path)!)
        request.httpMethod = method
        request.httpBody = body
        request.timeoutInterval = 30
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { fields[name.lowercased()] = value }
        }
        return (http.statusCode, data, fields)
    }

    static func create(_ relay: TestRelay) async throws -> Created {
        let (status, body, _) = try await http(relay, "POST", "/v1/rooms")
        #expect(status == 201)
        return try JSONDecoder().decode(Created.self, from: body)
    }

    /// A participant on a raw WebSocket speaking the JSON frames.
    struct Participant {
        let socket: RawWebSocket

        static func join(
            _ relay: TestRelay, room: String, token: String? = nil
        ) async throws -> (Participant, RoomServerFrame) {
            let socket = try await RawWebSocket.connect(port: relay.relay.port, path: "/v1/rooms/\(room)/ws")
            let participant = Participant(socket: socket)
            try await participant.send(.join(token: token))
            return (participant, try await participant.next())
        }

        func send(_ frame: RoomClientFrame) async throws {
            try await socket.sendText(String(decoding: RoomFrameCodec.encode(frame), as: UTF8.self))
        }

        func next() async throws -> RoomServerFrame {
            let message = try #require(try await socket.receive())
            #expect(message.opcode == 0x1, "frames are text")
            return try RoomFrameCodec.decodeServer(message.payload)
        }

        /// The next frame that is not a peer notice.
        func nextSkippingPeers() async throws -> RoomServerFrame {
            while true {
                let frame = try await next()
                if case .peer = frame { continue }
                return frame
            }
        }
    }

    static func joined(
        _ frame: RoomServerFrame
    ) throws -> (participant: String, token: String, peers: [RoomServerFrame.Peer]) {
        guard case .joined(let participant, let token, let peers) = frame else {
            Issue.record("expected joined, got \(frame)")
            throw CancellationError()
        }
        return (participant, token, peers)
    }

    @Test("create, join two, relay a sealed signal untouched, refuse a third, and say who is there")
    func lifecycle() async throws {
        let relay = try await TestRelay.start()
        defer { Task { await relay.stop() } }
        let room = try await Self.create(relay)
        #expect(room.path == "/call/\(room.room)" && RoomWireLimits.isToken(room.endToken))
        let status = try await Self.http(relay, "GET", "/v1/rooms/\(room.room)")
        #expect(status.status == 200 && String(decoding: status.body, as: UTF8.self).contains("\"participants\":0"))

        let (alice, aliceJoined) = try await Participant.join(relay, room: room.room)
        let a = try Self.joined(aliceJoined)
        #expect(a.peers.isEmpty)
        let (bob, bobJoined) = try await Participant.join(relay, room: room.room)
        let b = try Self.joined(bobJoined)
        #expect(b.peers == [.init(participant: a.participant, state: "joined")])
        #expect(try await alice.next() == .peer(.init(participant: b.participant, state: "joined")))

        // The relay passes the sealed bytes on as they are.
        let sealed = "c2VhbGVkLW9mZmVyLWJ5dGVz_-"
        try await alice.send(.signal(to: b.participant, data: sealed))
        #expect(try await bob.next() == .signal(from: a.participant, data: sealed))

        let (_, third) = try await Participant.join(relay, room: room.room)
        #expect(third == .error(code: "room_full", message: "the room is full (2 people)"))

        try await alice.send(.ping)
        #expect(try await alice.next() == .pong)
    }

    @Test("a dropped participant is suspended and takes its place back with its token; a wrong token is refused")
    func reconnectToken() async throws {
        let relay = try await TestRelay.start()
        defer { Task { await relay.stop() } }
        let room = try await Self.create(relay)
        let (alice, aliceJoined) = try await Participant.join(relay, room: room.room)
        let a = try Self.joined(aliceJoined)
        let (bob, _) = try await Participant.join(relay, room: room.room)
        _ = try await alice.next()  // bob joined
        try await bob.socket.sendClose()
        let suspended = try await alice.next()
        guard case .peer(let peer) = suspended else { throw CancellationError() }
        #expect(peer.state == "suspended")

        let (_, refused) = try await Participant.join(relay, room: room.room, token: String(repeating: "0", count: 64))
        #expect(
            refused == .error(code: "bad_reconnect_token", message: "this reconnect token holds no place in the room"))

        // Alice drops too and comes back as herself.
        try await alice.socket.sendClose()
        let (again, rejoined) = try await Participant.join(relay, room: room.room, token: a.token)
        let back = try Self.joined(rejoined)
        #expect(back.participant == a.participant && back.token == a.token)
        #expect(back.peers.map(\.state) == ["suspended"])
        try await again.send(.ping)
        #expect(try await again.nextSkippingPeers() == .pong)
    }

    @Test(
        "leaving a two-person room tells the other it is gone (peer_left), and later joins hear room_gone, not not-found"
    )
    func leaveIsRoomGone() async throws {
        let relay = try await TestRelay.start()
        defer { Task { await relay.stop() } }
        let room = try await Self.create(relay)
        let (alice, _) = try await Participant.join(relay, room: room.room)
        let (bob, bobJoined) = try await Participant.join(relay, room: room.room)
        let b = try Self.joined(bobJoined)
        _ = try await alice.next()
        try await bob.send(.leave)
        #expect(try await alice.next() == .roomGone(reason: "peer_left"))
        // The relay closes the connection after telling.
        #expect(try await alice.socket.receive()?.opcode ?? 0x8 == 0x8)
        let (_, late) = try await Participant.join(relay, room: room.room, token: b.token)
        #expect(late == .roomGone(reason: "peer_left"))
        let status = try await Self.http(relay, "GET", "/v1/rooms/\(room.room)")
        #expect(status.status == 410)
        #expect(try RoomFrameCodec.decodeServer(status.body) == .roomGone(reason: "peer_left"))
    }

    @Test("the creator's end token ends the room for everyone (ended); another token does not")
    func endByToken() async throws {
        let relay = try await TestRelay.start()
        defer { Task { await relay.stop() } }
        let room = try await Self.create(relay)
        let (alice, _) = try await Participant.join(relay, room: room.room)
        let wrong = try await Self.http(
            relay, "DELETE", "/v1/rooms/\(room.room)", headers: ["Rally-Room-Token": String(repeating: "1", count: 64)])
        #expect(wrong.status == 409)
        let ended = try await Self.http(
            relay, "DELETE", "/v1/rooms/\(room.room)", headers: ["Rally-Room-Token": room.endToken])
        #expect(ended.status == 204)
        #expect(try await alice.next() == .roomGone(reason: "ended"))
        let (_, late) = try await Participant.join(relay, room: room.room)
        #expect(late == .roomGone(reason: "ended"))
    }

    @Test("a room nobody joins expires on the relay's clock and then answers room_gone (expired)")
    func idleExpiry() async throws {
        let clock = ManualRelayClock()
        let relay = try await TestRelay.start(clock: clock)
        defer { Task { await relay.stop() } }
        let room = try await Self.create(relay)
        clock.advance(by: .seconds(599))
        #expect(try await Self.http(relay, "GET", "/v1/rooms/\(room.room)").status == 200)
        clock.advance(by: .seconds(1))
        let gone = try await Self.http(relay, "GET", "/v1/rooms/\(room.room)")
        #expect(gone.status == 410)
        #expect(try RoomFrameCodec.decodeServer(gone.body) == .roomGone(reason: "expired"))
    }

    @Test("the HTTP transport: join, send, long-poll the frames, and the same room_gone")
    func httpTransport() async throws {
        let relay = try await TestRelay.start()
        defer { Task { await relay.stop() } }
        let room = try await Self.create(relay)
        let path = "/v1/rooms/\(room.room)/http"
        let joined = try await Self.http(
            relay, "POST", path, body: RoomFrameCodec.encode(RoomClientFrame.join(token: nil)))
        let a = try Self.joined(try RoomFrameCodec.decodeServer(joined.body))
        let (bob, bobJoined) = try await Participant.join(relay, room: room.room)
        let b = try Self.joined(bobJoined)
        #expect(b.peers == [.init(participant: a.participant, state: "joined")])

        try await bob.send(.signal(to: a.participant, data: "b2ZmZXI"))
        // Bob's send returns once written to his socket; the relay may not
        // have queued it for Alice yet, so she long-polls until it comes
        // (each poll waits for news; a lost signal fails by the time limit).
        var frames: [RoomServerFrame] = []
        var last = "0"
        while !frames.contains(.signal(from: b.participant, data: "b2ZmZXI")) {
            let poll = try await Self.http(
                relay, "GET", path + "?after=\(last)", headers: ["Rally-Room-Token": a.token])
            #expect(poll.status == 200)
            guard poll.status == 200 else { return }
            frames += try String(decoding: poll.body, as: UTF8.self).split(separator: "\n").map {
                try RoomFrameCodec.decodeServer(Data($0.utf8))
            }
            last = try #require(poll.headers["rally-last-seq"])
        }

        let sent = try await Self.http(
            relay, "POST", path,
            body: RoomFrameCodec.encode(RoomClientFrame.signal(to: b.participant, data: "YW5zd2Vy")),
            headers: ["Rally-Room-Token": a.token])
        #expect(sent.status == 204)
        #expect(try await bob.nextSkippingPeers() == .signal(from: a.participant, data: "YW5zd2Vy"))

        let noToken = try await Self.http(relay, "POST", path, body: RoomFrameCodec.encode(RoomClientFrame.ping))
        #expect(noToken.status == 409)

        try await bob.send(.leave)
        let after = try await Self.http(relay, "GET", path + "?after=\(last)", headers: ["Rally-Room-Token": a.token])
        #expect(String(decoding: after.body, as: UTF8.self).contains(#""reason":"peer_left""#))
    }

    @Test(
        "hostile frames get a typed error and change nothing: not JSON, unknown type, bad ids, oversized, join twice, no join first"
    )
    func hostileFrames() async throws {
        let relay = try await TestRelay.start()
        defer { Task { await relay.stop() } }
        let room = try await Self.create(relay)

        // The first frame must be join.
        let early = try await RawWebSocket.connect(port: relay.relay.port, path: "/v1/rooms/\(room.room)/ws")
        try await early.sendText(#"{"type":"signal","to":"00000000000000000000000000000000","data":"eA"}"#)
        let notJoined = try RoomFrameCodec.decodeServer(try #require(try await early.receive()).payload)
        #expect(notJoined == .error(code: "not_joined", message: "the first frame must be join"))

        let (alice, _) = try await Participant.join(relay, room: room.room)
        for text in [
            "not json", #"{"type":"dance"}"#, #"{"type":"signal","to":"XYZ","data":"eA"}"#,
            #"{"type":"signal","to":"00000000000000000000000000000000","data":"not base64!"}"#,
            #"{"type":"join","token":"short"}"#, "[]", #"{"type":7}"#,
        ] {
            try await alice.socket.sendText(text)
            guard case .error(let code, _) = try await alice.next() else {
                Issue.record("no error for \(text)")
                continue
            }
            #expect(code == "malformed_frame", "\(text)")
        }
        try await alice.send(.join(token: nil))
        #expect(try await alice.next() == .error(code: "already_joined", message: "this connection has joined already"))
        try await alice.send(.signal(to: String(repeating: "a", count: 32), data: "eA"))
        #expect(
            try await alice.next()
                == .error(code: "peer_unavailable", message: "the other participant is not connected right now"))
        // Still in the room, still answering.
        try await alice.send(.ping)
        #expect(try await alice.next() == .pong)

        // Over the frame limit: refused before parsing, the place kept.
        try await alice.socket.sendText(String(repeating: "x", count: RoomWireLimits.maxFrameBytes + 1))
        #expect(
            try await alice.next()
                == .error(
                    code: "malformed_frame",
                    message: RoomFrameError.tooLarge(
                        size: RoomWireLimits.maxFrameBytes + 1, limit: RoomWireLimits.maxFrameBytes
                    ).description))
        try await alice.send(.ping)
        #expect(try await alice.next() == .pong)
        #expect(try await Self.http(relay, "GET", "/v1/rooms/\(room.room)").status == 200)

        // Ids that are not room ids never reach the hub.
        #expect(try await Self.http(relay, "GET", "/v1/rooms/..%2F..%2Fetc").status == 404)
        let (_, badRoom) = try await Participant.join(relay, room: "nothex")
        #expect(badRoom == .error(code: "room_not_found", message: "no call room has this id"))
        let oversized = try await Self.http(
            relay, "POST", "/v1/rooms/\(room.room)/http",
            body: Data(repeating: 0x20, count: RoomWireLimits.maxFrameBytes + 1))
        #expect(oversized.status == 413)
    }

    @Test("room creation is rate limited per address, with Retry-After")
    func creationRate() async throws {
        var limits = RelayLimits.default
        limits.rooms.createBurstPerIP = 2
        limits.rooms.createRatePerSecondPerIP = 0.001
        let relay = try await TestRelay.start(limits: limits)
        defer { Task { await relay.stop() } }
        _ = try await Self.create(relay)
        _ = try await Self.create(relay)
        let third = try await Self.http(relay, "POST", "/v1/rooms")
        #expect(third.status == 429 && third.headers["retry-after"] != nil)
    }

    @Test("the call pages: same bytes for every room, strict headers, assets as embedded from Web/call")
    func callPages() async throws {
        let relay = try await TestRelay.start()
        defer { Task { await relay.stop() } }
        let room = try await Self.create(relay)
        let page = try await Self.http(relay, "GET", "/call/\(room.room)")
        let other = try await Self.http(relay, "GET", "/call/\(String(repeating: "b", count: 32))")
        #expect(page.status == 200 && page.body == other.body)
        #expect(!String(decoding: page.body, as: UTF8.self).contains(room.room), "the page never echoes the room")
        let csp = try #require(page.headers["content-security-policy"])
        #expect(csp.contains("script-src 'self'") && csp.contains("connect-src 'self'") && !csp.contains("unsafe"))
        #expect(page.headers["referrer-policy"] == "no-referrer")
        #expect(page.headers["x-content-type-options"] == "nosniff")
        #expect(page.headers["permissions-policy"]?.contains("camera=(self)") == true)
        let home = try await Self.http(relay, "GET", "/call")
        #expect(String(decoding: home.body, as: UTF8.self).contains("Start a call"))
        let script = try await Self.http(relay, "GET", "/call/assets/call.js")
        #expect(script.headers["content-type"]?.hasPrefix("text/javascript") == true)
        #expect(try await Self.http(relay, "GET", "/call/assets/../../etc/passwd").status == 404)
        #expect(try await Self.http(relay, "GET", "/call/assets/call.html").status == 404)

        // The embedded copies are the files (scripts/embed-web.py).
        let web = packageRoot().appendingPathComponent("Web/call")
        let names = try FileManager.default.contentsOfDirectory(atPath: web.path).filter {
            [".js", ".html", ".css"].contains(where: $0.hasSuffix)
        }
        #expect(Set(names) == Set(CallPageAssets.files.keys), "run scripts/embed-web.py")
        for name in names {
            let text = try String(contentsOf: web.appendingPathComponent(name), encoding: .utf8)
            #expect(
                CallPageAssets.files[name]?.text == text,
                "\(name) differs from its embedded copy: run scripts/embed-web.py")
        }
    }
}
