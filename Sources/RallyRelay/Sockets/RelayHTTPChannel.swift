import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket
@_spi(WSInternal) import WSCore

/// Each connection the relay accepts: HTTP/1 for the routes, and the two
/// WebSocket paths upgraded from it (docs/adr/0025).
///
/// `/v1/ws` runs on the relay's own channel handlers (``SessionSocket``),
/// not on a WebSocket library's task per connection: an idle session then
/// holds one task, its ack pump, instead of four. A call room's socket,
/// `/v1/rooms/<id>/ws`, is served by the WebSocket library as before.
struct RelayHTTPChannel: ServerChildChannel, HTTPChannelHandler {
    enum Upgrade: Sendable {
        case session(SessionSocket)
        case room(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, room: String, remoteIP: String)
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, upgradeRefused: Bool)
    }

    struct Value: ServerChildChannelValue {
        let upgrade: EventLoopFuture<Upgrade>
        let channel: any Channel
    }

    /// The WebSocket paths, from a request's target.
    enum SocketRoute: Equatable {
        case session
        case room(String)

        init?(target: String) {
            let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            if path == "/v1/ws" {
                self = .session
                return
            }
            let parts = path.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 5, parts[0].isEmpty, parts[1] == "v1", parts[2] == "rooms", !parts[3].isEmpty,
                parts[4] == "ws"
            else { return nil }
            self = .room(String(parts[3]))
        }
    }

    /// Header fields one request may carry.
    static let maxHeaderFields = 1000

    /// Reads start at 512 bytes rather than NIO's 2,048 and grow when one
    /// fills its buffer. A connection keeps its last read buffer for the
    /// next read, and what an idle client sends (a subscribe, a pong, a
    /// publish of a few hundred bytes) fits in 512: 10,000 subscribed
    /// clients took 262 MiB of the relay's memory instead of 276
    /// (`rally-bench idle`), with no change in publish throughput.
    static let receiveAllocator = AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536)

    let responder: Responder
    let services: RelayServices

    init(responder: @escaping Responder, services: RelayServices) {
        self.services = services
        self.responder = Self.refusingLateUpgrades(responder)
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let services = services
        return channel.eventLoop.makeCompletedFuture {
            try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: Self.receiveAllocator)
            let upgradeAsked = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
            let library = NIOTypedWebSocketServerUpgrader<Upgrade>(
                maxFrameSize: services.limits.transportMaxFrameBytes,
                shouldUpgrade: { channel, head in
                    upgradeAsked.value = true
                    return channel.eventLoop.makeSucceededFuture(SocketRoute(target: head.uri) == nil ? nil : [:])
                },
                upgradePipelineHandler: { channel, head in
                    channel.eventLoop.makeCompletedFuture {
                        // Only a room's socket is upgraded by the library;
                        // shouldUpgrade refused every target without one.
                        guard case .room(let room) = SocketRoute(target: head.uri) else {
                            throw ChannelError.inappropriateOperationForState
                        }
                        return .room(
                            try NIOAsyncChannel(
                                wrappingChannelSynchronously: channel,
                                configuration: .init(isOutboundHalfClosureEnabled: true)),
                            room: room, remoteIP: channel.remoteAddress?.ipAddress ?? "unknown")
                    }
                })
            let upgrader = SessionSocketUpgrader(library: library) { channel in
                let socket = SessionSocket(
                    channel: channel, services: services, remoteIP: channel.remoteAddress?.ipAddress ?? "unknown")
                try channel.syncOptions?.setOption(
                    ChannelOptions.writeBufferWaterMark, value: SessionSocket.writeBufferWaterMark)
                let encoder = WebSocketFrameEncoder()
                try channel.pipeline.syncOperations.addHandlers([
                    encoder,
                    SessionSocketHandler(socket: socket, maxMessageBytes: services.limits.transportMaxFrameBytes),
                ])
                socket.writeBelow(encoder: try channel.pipeline.syncOperations.context(handler: encoder))
                return .session(socket)
            }
            let upgrades = NIOTypedHTTPServerUpgradeConfiguration<Upgrade>(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                        try channel.pipeline.syncOperations.addHandler(
                            HTTPConnectionStateHandler(idleTimeout: nil, logger: logger))
                        return .http(
                            try NIOAsyncChannel(
                                wrappingChannelSynchronously: channel,
                                configuration: .init(isOutboundHalfClosureEnabled: true)),
                            upgradeRefused: upgradeAsked.value)
                    }
                })
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration(upgradeConfiguration: upgrades)
            // Hummingbird answers HTTP requests one at a time, and HTTP
            // types validate the headers. NIO's error handler answers a
            // request that does not parse (400, then close): before it, such
            // a connection was held open with no answer until the client
            // gave up.
            configuration.enablePipelining = false
            configuration.enableErrorHandling = true
            configuration.enableResponseHeaderValidation = false
            // NIO allows 65,534 header fields; Hummingbird's own pipeline
            // (and so the relay before ADR 0025) 1,000.
            configuration.decoderConfiguration.maxHeaderFieldCount = Self.maxHeaderFields
            return Value(
                upgrade: try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(
                    configuration: configuration),
                channel: channel)
        }
    }

    /// A session socket's task runs this for as long as the connection
    /// lives, and keeps its frame: every path is a call to a function of
    /// its own, never inlined (10,000 idle connections took 16 MiB more
    /// with the upgrade and the other paths in this frame).
    func handle(value: Value, logger: Logger) async {
        switch await Self.upgrade(of: value, logger: logger) {
        case .session(let socket)?:
            await socket.run()
        case .room(let channel, let room, let remoteIP)?:
            await serveRoom(channel, room: room, remoteIP: remoteIP, logger: logger)
        case .http(let channel, let upgradeRefused)?:
            await serveHTTP(channel, upgradeRefused: upgradeRefused, logger: logger)
        case nil:
            return
        }
    }

    @inline(never)
    private static func upgrade(of value: Value, logger: Logger) async -> Upgrade? {
        do {
            return try await value.upgrade.get()
        } catch {
            logger.debug("connection ended before its first request", metadata: ["error": "\(error)"])
            try? await value.channel.close()
            return nil
        }
    }

    @inline(never)
    private func serveHTTP(
        _ channel: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, upgradeRefused: Bool, logger: Logger
    ) async {
        if upgradeRefused {
            // A WebSocket upgrade to a path that has none.
            try? await channel.executeThenClose { _, outbound in
                try await outbound.write(
                    contentsOf: [
                        .head(
                            HTTPResponse(
                                status: .badRequest, headerFields: [.connection: "close", .contentLength: "0"])),
                        .end(nil),
                    ])
            }
        } else {
            await handleHTTP(asyncChannel: channel, logger: logger)
        }
    }

    @inline(never)
    private func serveRoom(
        _ channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, room: String, remoteIP: String, logger: Logger
    ) async {
        let services = services
        _ = try? await WebSocketHandler.handle(
            type: .server,
            configuration: .init(
                extensions: [], autoPing: .enabled(timePeriod: .seconds(30)), closeTimeout: .seconds(5),
                validateUTF8: false, maxFrameSize: services.limits.transportMaxFrameBytes),
            asyncChannel: channel, context: RoomSocketContext(logger: logger)
        ) { inbound, outbound, _ in
            try await RoomEndpoints.serve(
                room: room, inbound: inbound, outbound: outbound, remoteIP: remoteIP, services: services)
        }
    }

    /// An upgrade can only be taken as a connection's first request (the
    /// upgrade handler leaves the pipeline after it): one asked later on a
    /// kept-alive connection is sent to the same path on a new connection.
    private static func refusingLateUpgrades(_ responder: @escaping Responder) -> Responder {
        struct LateUpgrade: Error {}
        return { request, writer, channel in
            guard request.headers[.upgrade]?.lowercased() == "websocket" else {
                try await responder(request, writer, channel)
                return
            }
            var target = request.uri.path
            if let query = request.uri.query { target += "?\(query)" }
            try await writer.writeResponse(
                HTTPResponse(status: .temporaryRedirect, headerFields: [.connection: "close", .location: target]))
            // Thrown so the connection closes after the redirect.
            throw LateUpgrade()
        }
    }
}

private struct RoomSocketContext: WebSocketContext {
    let logger: Logger
}

/// The WebSocket upgrade of both socket paths. The library's upgrader
/// checks every request and builds every 101 response, and sets up a
/// room's socket; a session's socket gets the relay's own frame reader
/// instead of the library's decoder, protocol error handler and aggregator
/// (docs/adr/0039).
private struct SessionSocketUpgrader: NIOTypedHTTPServerProtocolUpgrader {
    typealias UpgradeResult = RelayHTTPChannel.Upgrade

    let library: NIOTypedWebSocketServerUpgrader<UpgradeResult>
    /// Adds a session socket's handlers, on its loop.
    let session: @Sendable (any Channel) throws -> UpgradeResult

    var supportedProtocol: String { library.supportedProtocol }
    var requiredUpgradeHeaders: [String] { library.requiredUpgradeHeaders }

    func buildUpgradeResponse(
        channel: any Channel, upgradeRequest: HTTPRequestHead, initialResponseHeaders: HTTPHeaders
    ) -> EventLoopFuture<HTTPHeaders> {
        library.buildUpgradeResponse(
            channel: channel, upgradeRequest: upgradeRequest, initialResponseHeaders: initialResponseHeaders)
    }

    func upgrade(channel: any Channel, upgradeRequest: HTTPRequestHead) -> EventLoopFuture<UpgradeResult> {
        guard RelayHTTPChannel.SocketRoute(target: upgradeRequest.uri) == .session else {
            return library.upgrade(channel: channel, upgradeRequest: upgradeRequest)
        }
        return channel.eventLoop.makeCompletedFuture { try session(channel) }
    }
}
