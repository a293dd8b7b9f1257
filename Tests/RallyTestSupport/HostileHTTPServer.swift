public import Foundation
import NIOCore
import NIOPosix

/// A tiny HTTP/1.1 server on a loopback port that answers every request as
/// the test tells it: a stand-in for a hostile or broken relay (or a
/// middlebox in front of one) when testing the SDK's HTTP transport.
///
/// It understands just enough HTTP for URLSession: a request head, and a
/// body announced by `Content-Length`. Connections are kept alive between
/// complete answers; an answer whose end is the connection's close ends
/// it, and a stalled one keeps it until the client hangs up. Bodies are
/// written as fast as the client reads them (each write waits for the
/// socket), so an endless body is only as large as the client lets it get.
///
/// Call ``stop()`` when done: the server owns an event loop thread.
public final class HostileHTTPServer: Sendable {
    /// A request as the server read it.
    public struct Request: Sendable, Equatable {
        public var method: String
        /// The path, without the query.
        public var path: String
        /// The query, without `?` ("" for none).
        public var query: String
        /// Header fields, names lowercased (the last of repeated fields).
        public var headers: [String: String]
        public var body: Data

        /// The value of a query parameter.
        public func query(_ name: String) -> String? {
            for pair in query.split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                if parts.first.map(String.init) == name { return parts.count > 1 ? String(parts[1]) : "" }
            }
            return nil
        }
    }

    /// How an answer's body is delimited.
    public enum Framing: Sendable, Equatable {
        /// A `Content-Length` of this many bytes (whatever is sent).
        case contentLength(Int)
        /// `Transfer-Encoding: chunked`.
        case chunked
        /// Neither: the body ends when the connection closes.
        case untilClose
    }

    /// An answer.
    public enum Reply: Sendable {
        /// A complete answer with its `Content-Length`.
        case complete(status: Int, headers: [String: String] = [:], body: Data = Data())
        /// `bodyBytes` bytes of filler (nil: without end), framed as
        /// `framing` says and written as fast as the client reads them.
        case stream(status: Int, headers: [String: String] = [:], framing: Framing, bodyBytes: Int?)
        /// The head (announcing `contentLength` bytes) and `bodyPrefix`,
        /// then nothing: the answer never ends.
        case stall(status: Int, headers: [String: String] = [:], contentLength: Int, bodyPrefix: Data = Data())
    }

    /// The loopback port the server listens on.
    public let port: Int
    private let group: MultiThreadedEventLoopGroup
    private let serverTask: Task<Void, Never>
    private let state: RequestLog

    private init(port: Int, group: MultiThreadedEventLoopGroup, serverTask: Task<Void, Never>, state: RequestLog) {
        self.port = port
        self.group = group
        self.serverTask = serverTask
        self.state = state
    }

    /// `http://127.0.0.1:<port>`.
    public var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Every request read so far, in order.
    public var requests: [Request] { state.requests }

    /// Body bytes written by ``Reply/stream(status:headers:framing:bodyBytes:)``
    /// answers so far.
    public var streamedBytes: Int { state.streamedBytes }

    /// Listens on a free loopback port and answers each request with
    /// `respond(request)`.
    public static func start(_ respond: @escaping @Sendable (Request) -> Reply) async throws -> HostileHTTPServer {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let state = RequestLog()
        let server: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>
        do {
            server = try await ServerBootstrap(group: group)
                .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .bind(host: "127.0.0.1", port: 0) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        guard let port = server.channel.localAddress?.port else {
            try? await server.channel.close()
            try? await group.shutdownGracefully()
            throw ChannelError.unknownLocalAddress
        }
        let serverTask = Task<Void, Never> {
            _ = try? await server.executeThenClose { connections in
                await withDiscardingTaskGroup { tasks in
                    do {
                        for try await connection in connections {
                            tasks.addTask {
                                try? await Self.serve(connection, state: state, respond: respond)
                            }
                        }
                    } catch {
                        // The listener failed or was cancelled: stop accepting.
                    }
                }
            }
        }
        return HostileHTTPServer(port: port, group: group, serverTask: serverTask, state: state)
    }

    /// Closes the listener and every connection, and shuts the event loop
    /// down.
    public func stop() async {
        serverTask.cancel()
        await serverTask.value
        try? await group.shutdownGracefully()
    }

    // MARK: Connections

    private static let filler = ByteBuffer(repeating: UInt8(ascii: "x"), count: 64 * 1024)

    private static func serve(
        _ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>, state: RequestLog,
        respond: @Sendable (Request) -> Reply
    ) async throws {
        // Written through the channel, each write awaited until it reaches
        // the socket: a close never drops a body's tail, and an endless
        // body goes only as fast as the client reads.
        let channel = connection.channel
        func write(_ buffer: ByteBuffer) async throws {
            try await channel.writeAndFlush(buffer).get()
        }
        try await connection.executeThenClose { inbound, _ in
            var reader = RequestReader(inbound.makeAsyncIterator())
            while let request = try await reader.next() {
                state.record(request)
                switch respond(request) {
                case .complete(let status, let headers, let body):
                    var head = headers
                    head["Content-Length"] = String(body.count)
                    var buffer = Self.head(status: status, headers: head)
                    buffer.writeBytes(body)
                    try await write(buffer)
                case .stream(let status, let headers, let framing, let bodyBytes):
                    var head = headers
                    switch framing {
                    case .contentLength(let length): head["Content-Length"] = String(length)
                    case .chunked: head["Transfer-Encoding"] = "chunked"
                    case .untilClose: head["Connection"] = "close"
                    }
                    try await write(Self.head(status: status, headers: head))
                    var remaining = bodyBytes ?? .max
                    while remaining > 0 {
                        let chunk = Self.filler.getSlice(at: 0, length: min(remaining, Self.filler.readableBytes))!
                        if framing == .chunked {
                            var framed = ByteBuffer(string: String(chunk.readableBytes, radix: 16) + "\r\n")
                            framed.writeImmutableBuffer(chunk)
                            framed.writeString("\r\n")
                            try await write(framed)
                        } else {
                            try await write(chunk)
                        }
                        state.streamed(chunk.readableBytes)
                        remaining -= chunk.readableBytes
                    }
                    if framing == .chunked {
                        try await write(ByteBuffer(string: "0\r\n\r\n"))
                    } else {
                        // The client may not have read it all; hang up.
                        return
                    }
                case .stall(let status, let headers, let contentLength, let bodyPrefix):
                    var head = headers
                    head["Content-Length"] = String(contentLength)
                    var buffer = Self.head(status: status, headers: head)
                    buffer.writeBytes(bodyPrefix)
                    try await write(buffer)
                    // Never answer more: read until the client hangs up.
                    try await reader.drain()
                    return
                }
            }
        }
    }

    private static func head(status: Int, headers: [String: String]) -> ByteBuffer {
        var text = "HTTP/1.1 \(status) Hostile\r\n"
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { text += "\(name): \(value)\r\n" }
        return ByteBuffer(string: text + "\r\n")
    }
}

/// Reads requests off a connection: heads up to 64 KiB, bodies by their
/// `Content-Length` (up to 16 MiB).
private struct RequestReader {
    struct Malformed: Error {}

    private var inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    private var buffer = ByteBuffer()

    init(_ inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator) {
        self.inbound = inbound
    }

    /// The next request, or nil when the client hung up.
    mutating func next() async throws -> HostileHTTPServer.Request? {
        let separator = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        while headEnd == nil {
            headEnd = buffer.readableBytesView.firstRange(of: separator)?.upperBound
            if headEnd != nil { break }
            guard buffer.readableBytes < 64 * 1024, var more = try await inbound.next() else { return nil }
            buffer.writeBuffer(&more)
        }
        let headLength = headEnd! - buffer.readerIndex
        let head = buffer.readString(length: headLength) ?? ""
        var lines = head.components(separatedBy: "\r\n").filter { !$0.isEmpty }
        guard !lines.isEmpty else { throw Malformed() }
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count == 3 else { throw Malformed() }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { throw Malformed() }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...]
                .trimmingCharacters(in: .whitespaces)
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        guard (0...(16 << 20)).contains(length) else { throw Malformed() }
        while buffer.readableBytes < length {
            guard var more = try await inbound.next() else { return nil }
            buffer.writeBuffer(&more)
        }
        let body = Data(buffer.readBytes(length: length) ?? [])
        buffer.discardReadBytes()
        let target = requestLine[1].split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        return HostileHTTPServer.Request(
            method: String(requestLine[0]), path: String(target[0]), query: target.count > 1 ? String(target[1]) : "",
            headers: headers, body: body)
    }

    /// Reads and drops everything until the client hangs up.
    mutating func drain() async throws {
        while try await inbound.next() != nil {}
    }
}

/// What the server saw.
///
/// `@unchecked Sendable`: `requests` and `bytes` are only read and written
/// while `lock` is held.
private final class RequestLog: @unchecked Sendable {
    private let lock = NSLock()
    private var log: [HostileHTTPServer.Request] = []
    private var bytes = 0

    var requests: [HostileHTTPServer.Request] { lock.withLock { log } }
    var streamedBytes: Int { lock.withLock { bytes } }

    func record(_ request: HostileHTTPServer.Request) { lock.withLock { log.append(request) } }
    func streamed(_ count: Int) { lock.withLock { bytes += count } }
}
