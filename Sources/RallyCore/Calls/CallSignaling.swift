public import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import RallyWire

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// How a call's signaling reaches the relay.
public enum CallSignalingTransport: String, Sendable, Codable {
    /// JSON frames on one WebSocket (`/v1/rooms/<id>/ws`).
    case webSocket = "websocket"
    /// The same frames over HTTP requests and long polls
    /// (`/v1/rooms/<id>/http`): the ladder's transport fallback.
    case http
}

/// What joining a room gave: this participant's place and who else is
/// there.
struct CallJoined: Sendable, Equatable {
    var participant: String
    var token: String
    var peers: [RoomServerFrame.Peer]
}

/// Why a join did not take place.
enum CallJoinFailure: Error, Sendable, Equatable {
    /// The relay says the room is gone: stop, go home.
    case gone(CallEnd)
    case refused(CallError)
}

/// One signaling connection: frames until it drops (then `frames` ends).
protocol CallSignalingChannel: Sendable {
    var frames: AsyncStream<RoomServerFrame> { get }
    /// Sends a frame; false when the connection is down.
    func send(_ frame: RoomClientFrame) async -> Bool
    func close() async
}

enum CallSignaling {
    /// A sign of life every interval; nothing heard for two of them is a
    /// drop (a stalled path sends no close). Real time: this is the
    /// transport's keepalive, not a status timer.
    static let heartbeat: Duration = .seconds(5)
    static let requestTimeout: TimeInterval = 15

    static func open(
        _ transport: CallSignalingTransport, relayURL: URL, room: String, token: String?, joinTimeout: Duration
    ) async throws(CallJoinFailure) -> (channel: any CallSignalingChannel, joined: CallJoined) {
        switch transport {
        case .webSocket:
            try await WebSocketCallChannel.open(relayURL: relayURL, room: room, token: token, joinTimeout: joinTimeout)
        case .http: try await HTTPCallChannel.open(relayURL: relayURL, room: room, token: token)
        }
    }

    static func failure(for frame: RoomServerFrame) -> CallJoinFailure {
        switch frame {
        case .roomGone(let reason): .gone(CallEnd(rawValue: reason) ?? .ended)
        case .error("room_not_found", _): .refused(.roomNotFound)
        case .error("room_full", _): .refused(.roomFull)
        case .error(let code, let message): .refused(.refused(code: code, message: message))
        default: .refused(.refused(code: "protocol", message: "the relay answered a join with something else"))
        }
    }

    static func joined(_ frame: RoomServerFrame) -> CallJoined? {
        guard case .joined(let participant, let token, let peers) = frame else { return nil }
        return CallJoined(participant: participant, token: token, peers: peers)
    }

    static func endpoint(_ relayURL: URL, _ path: String, webSocket: Bool = false) -> String {
        var components = URLComponents(url: relayURL, resolvingAgainstBaseURL: false) ?? URLComponents()
        if webSocket { components.scheme = components.scheme == "https" ? "wss" : "ws" }
        let base = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        components.path = base + path
        components.fragment = nil
        return components.string ?? path
    }
}

/// Signaling on a WebSocket.
actor WebSocketCallChannel: CallSignalingChannel {
    nonisolated let frames: AsyncStream<RoomServerFrame>
    private let continuation: AsyncStream<RoomServerFrame>.Continuation
    private var writer: WebSocketOutboundWriter?
    private var joinWaiter: CheckedContinuation<RoomServerFrame, any Error>?
    private var joinFrame: RoomServerFrame?
    private var ended = false
    private var runTask: Task<Void, Never>?
    private var heartbeatTask: Task<Void, Never>?
    private var joinTimer: Task<Void, Never>?
    private var lastHeard = ContinuousClock.now

    private init() {
        (frames, continuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    static func open(
        relayURL: URL, room: String, token: String?, joinTimeout: Duration
    ) async throws(CallJoinFailure) -> (channel: any CallSignalingChannel, joined: CallJoined) {
        let channel = WebSocketCallChannel()
        let url = CallSignaling.endpoint(relayURL, "/v1/rooms/\(room)/ws", webSocket: true)
        let first: RoomServerFrame
        do {
            first = try await withCheckedThrowingContinuation { continuation in
                Task {
                    await channel.start(url: url, token: token, joinTimeout: joinTimeout, waiter: continuation)
                }
            }
        } catch {
            await channel.close()
            throw .refused(.unreachable("\(error)"))
        }
        guard let joined = CallSignaling.joined(first) else {
            await channel.close()
            throw CallSignaling.failure(for: first)
        }
        await channel.startHeartbeat()
        return (channel, joined)
    }

    private func start(
        url: String, token: String?, joinTimeout: Duration, waiter: CheckedContinuation<RoomServerFrame, any Error>
    ) {
        joinWaiter = waiter
        // A path that takes the socket but never answers the join (a
        // stalled proxy, a relay that lost it) fails this attempt, so the
        // ladder goes on to its next rung instead of waiting forever.
        joinTimer = Task { [weak self] in
            try? await Task.sleep(for: joinTimeout)
            await self?.joinTimedOut(after: joinTimeout)
        }
        var configuration = WebSocketClientConfiguration()
        configuration.maxFrameSize = RoomWireLimits.maxFrameBytes
        let join = String(decoding: RoomFrameCodec.encode(RoomClientFrame.join(token: token)), as: UTF8.self)
        runTask = Task {
            do {
                try await WebSocketClient.connect(
                    url: url, configuration: configuration, logger: Logger(label: "rally.call")
                ) { inbound, outbound, _ in
                    await self.attach(outbound)
                    try await outbound.write(.text(join))
                    for try await message in inbound.messages(maxSize: RoomWireLimits.maxFrameBytes) {
                        let bytes: Data =
                            switch message {
                            case .text(let text): Data(text.utf8)
                            case .binary(let buffer): Data(buffer.readableBytesView)
                            }
                        guard let frame = try? RoomFrameCodec.decodeServer(bytes) else { continue }
                        await self.received(frame)
                    }
                }
                self.ended(nil)
            } catch {
                self.ended(error)
            }
        }
    }

    private func attach(_ outbound: WebSocketOutboundWriter) {
        writer = outbound
    }

    private func received(_ frame: RoomServerFrame) {
        lastHeard = .now
        if let waiter = joinWaiter {
            joinWaiter = nil
            joinTimer?.cancel()
            waiter.resume(returning: frame)
            return
        }
        if frame != .pong { continuation.yield(frame) }
    }

    private func joinTimedOut(after timeout: Duration) async {
        guard let waiter = joinWaiter else { return }
        joinWaiter = nil
        waiter.resume(throwing: CallSignalingTimedOut(timeout: timeout))
        await close()
    }

    private func ended(_ error: (any Error)?) {
        ended = true
        writer = nil
        joinTimer?.cancel()
        if let waiter = joinWaiter {
            joinWaiter = nil
            waiter.resume(throwing: error ?? CallSignalingDropped())
        }
        heartbeatTask?.cancel()
        continuation.finish()
    }

    private func startHeartbeat() {
        heartbeatTask = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: CallSignaling.heartbeat)
                guard let self, await self.beat() else { return }
            }
        }
    }

    /// Pings; false (and the connection closed) when nothing was heard
    /// for two heartbeats.
    private func beat() async -> Bool {
        guard !ended else { return false }
        if ContinuousClock.now - lastHeard > CallSignaling.heartbeat * 2 {
            await close()
            return false
        }
        _ = await send(.ping)
        return true
    }

    func send(_ frame: RoomClientFrame) async -> Bool {
        guard let writer, !ended else { return false }
        let text = String(decoding: RoomFrameCodec.encode(frame), as: UTF8.self)
        return (try? await writer.write(.text(text))) != nil
    }

    func close() async {
        let writer = self.writer
        self.writer = nil
        try? await writer?.close(.normalClosure, reason: nil)
        runTask?.cancel()
        ended(nil)
    }
}

struct CallSignalingDropped: Error {}

struct CallSignalingTimedOut: Error, CustomStringConvertible {
    let timeout: Duration
    var description: String { "the relay did not answer the join within \(timeout)" }
}

/// Signaling over HTTP: a request per frame sent, long polls for the frames
/// received. Requests run on an ``HTTPExchange``, which (unlike
/// `URLSession.data(for:)` on Linux) may be cancelled at any moment without
/// deadlocking FoundationNetworking and never makes a task on a session
/// already invalidated.
actor HTTPCallChannel: CallSignalingChannel {
    nonisolated let frames: AsyncStream<RoomServerFrame>
    private let continuation: AsyncStream<RoomServerFrame>.Continuation
    private let exchange: HTTPExchange
    private let endpoint: URL
    private let token: String
    private var pollTask: Task<Void, Never>?
    private var ended = false

    /// A poll's body: at most a poll's frames, one per line.
    static let maxPollBytes = RoomWireLimits.maxFramesPerPoll * (RoomWireLimits.maxFrameBytes + 1)

    private init(endpoint: URL, token: String, exchange: HTTPExchange) {
        self.endpoint = endpoint
        self.token = token
        self.exchange = exchange
        (frames, continuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    static func makeExchange() -> HTTPExchange {
        // A long poll and a send at once.
        HTTPExchange(maxConnectionsPerHost: 2)
    }

    static func perform(
        _ request: URLRequest, on exchange: HTTPExchange, limit: Int = RoomWireLimits.maxFrameBytes
    ) async throws(RelayClientError) -> HTTPRelayReply {
        guard let url = request.url else { throw .protocolViolation("a request without a URL") }
        return try await exchange.perform(
            request, limit: limit, deadline: .seconds(CallSignaling.requestTimeout), what: "call signaling",
            url: url)
    }

    static func open(
        relayURL: URL, room: String, token: String?
    ) async throws(CallJoinFailure) -> (channel: any CallSignalingChannel, joined: CallJoined) {
        guard let endpoint = URL(string: CallSignaling.endpoint(relayURL, "/v1/rooms/\(room)/http")) else {
            throw .refused(.unreachable("no signaling URL for \(relayURL)"))
        }
        let exchange = makeExchange()
        var request = URLRequest(url: endpoint)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = RoomFrameCodec.encode(RoomClientFrame.join(token: token))
        let reply: HTTPRelayReply
        do {
            reply = try await perform(request, on: exchange)
        } catch {
            exchange.shutDown(.disconnected("the join failed"))
            throw .refused(.unreachable("\(error)"))
        }
        guard let frame = try? RoomFrameCodec.decodeServer(reply.body) else {
            exchange.shutDown(.disconnected("the join failed"))
            throw .refused(.refused(code: "malformed_frame", message: "the relay's answer is not a room frame"))
        }
        guard let joined = CallSignaling.joined(frame) else {
            exchange.shutDown(.disconnected("the join failed"))
            throw CallSignaling.failure(for: frame)
        }
        let channel = HTTPCallChannel(endpoint: endpoint, token: joined.token, exchange: exchange)
        await channel.startPolling()
        return (channel, joined)
    }

    private func startPolling() {
        pollTask = Task { await self.poll() }
    }

    private func poll() async {
        var after: UInt64 = 0
        while !ended, !Task.isCancelled {
            var components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false)
            components?.queryItems = [URLQueryItem(name: "after", value: String(after))]
            guard let url = components?.url else { break }
            var request = URLRequest(url: url)
            request.setValue(token, forHTTPHeaderField: "Rally-Room-Token")
            guard let reply = try? await Self.perform(request, on: exchange, limit: Self.maxPollBytes) else { break }
            if reply.status != 200 {
                // The place is gone; a room_gone body says why.
                if let frame = try? RoomFrameCodec.decodeServer(reply.body) { continuation.yield(frame) }
                break
            }
            if let last = reply.roomLastSeq.flatMap(UInt64.init) { after = last }
            for line in reply.body.split(separator: UInt8(ascii: "\n")) {
                if let frame = try? RoomFrameCodec.decodeServer(Data(line)), frame != .pong {
                    continuation.yield(frame)
                }
            }
        }
        finish()
    }

    private func finish() {
        ended = true
        continuation.finish()
    }

    func send(_ frame: RoomClientFrame) async -> Bool {
        guard !ended else { return false }
        var request = URLRequest(url: endpoint)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue(token, forHTTPHeaderField: "Rally-Room-Token")
        request.httpBody = RoomFrameCodec.encode(frame)
        guard let reply = try? await Self.perform(request, on: exchange) else {
            await close()
            return false
        }
        if reply.status == 200, let answer = try? RoomFrameCodec.decodeServer(reply.body), answer != .pong {
            continuation.yield(answer)
        }
        return reply.status < 300
    }

    func close() async {
        pollTask?.cancel()
        finish()
        exchange.shutDown(.disconnected("the call's signaling closed"))
    }
}

/// The relay's room API outside a call: create, look up, end.
public enum CallRooms {
    /// A room the relay made: its link (with a fresh secret) and the token
    /// that ends it.
    public struct Created: Sendable, Equatable {
        public var link: CallLink
        public var endToken: String
    }

    private struct CreatedJSON: Decodable {
        var room: String
        var endToken: String

        enum CodingKeys: String, CodingKey {
            case room
            case endToken = "end_token"
        }
    }

    public static func create(relayURL: URL) async throws(CallError) -> Created {
        guard let url = URL(string: CallSignaling.endpoint(relayURL, "/v1/rooms")) else {
            throw .unreachable("no room URL for \(relayURL)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        let (data, status) = try await perform(request)
        guard status == 201 else { throw refusal(data, status: status) }
        guard let created = try? JSONDecoder().decode(CreatedJSON.self, from: data),
            RoomWireLimits.isRoomID(created.room), RoomWireLimits.isToken(created.endToken)
        else { throw .refused(code: "malformed", message: "the relay's answer is not a room") }
        return Created(link: .fresh(relayURL: relayURL, room: created.room), endToken: created.endToken)
    }

    /// Ends a room for everyone, with its creator's end token.
    public static func end(relayURL: URL, room: String, endToken: String) async throws(CallError) {
        guard let url = URL(string: CallSignaling.endpoint(relayURL, "/v1/rooms/\(room)")) else {
            throw .unreachable("no room URL for \(relayURL)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = "DELETE"
        request.setValue(endToken, forHTTPHeaderField: "Rally-Room-Token")
        let (data, status) = try await perform(request)
        guard status == 204 else { throw refusal(data, status: status) }
    }

    private static func perform(_ request: URLRequest) async throws(CallError) -> (Data, Int) {
        let exchange = HTTPCallChannel.makeExchange()
        defer { exchange.shutDown(.disconnected("done")) }
        do {
            let reply = try await HTTPCallChannel.perform(request, on: exchange)
            return (reply.body, reply.status)
        } catch {
            throw .unreachable("\(error)")
        }
    }

    private static func refusal(_ data: Data, status: Int) -> CallError {
        switch try? RoomFrameCodec.decodeServer(data) {
        case .roomGone(let reason)?: .refused(code: "room_gone", message: "the call is over (\(reason))")
        case .error("room_not_found", _)?: .roomNotFound
        case .error(let code, let message)?: .refused(code: code, message: message)
        default: .refused(code: "http_\(status)", message: "the relay answered HTTP \(status)")
        }
    }
}
