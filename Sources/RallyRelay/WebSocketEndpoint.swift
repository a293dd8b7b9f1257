import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import RallyWire
import ServiceLifecycle

/// `GET /v1/ws`: the transport shell around `RelaySession`. One binary
/// WebSocket message carries one protobuf frame each way.
enum WebSocketEndpoint {
    static func addRoute(to router: Router<RelayRequestContext>, services: RelayServices) {
        router.ws("/v1/ws") { inbound, outbound, context in
            try await serve(
                inbound: inbound, outbound: outbound, remoteIP: context.requestContext.remoteIP, services: services)
        }
    }

    static func serve(
        inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, remoteIP: String,
        services: RelayServices
    ) async throws {
        if case .refused(let reason) = services.connections.admit(ip: remoteIP) {
            // Refused before the challenge: the error frame is the only one.
            let frame = services.errorFrame(RelayFailure(.tooManyConnections, reason), requestID: 0)
            try? await outbound.write(.binary(ByteBuffer(bytes: FrameCodec.encode(frame))))
            return
        }
        defer { services.connections.release(ip: remoteIP) }
        services.metrics.openConnections.increment()
        defer { services.metrics.openConnections.decrement() }
        let session = RelaySession(services: services, remoteIP: remoteIP) { frame in
            try await outbound.write(.binary(ByteBuffer(bytes: FrameCodec.encode(frame))))
        }
        await services.sessions.add(session, authDeadline: .now + services.limits.authTimeout)
        do {
            try await outbound.write(.binary(ByteBuffer(bytes: FrameCodec.encode(session.challengeFrame))))
        } catch {
            await services.sessions.remove(session)
            throw error
        }

        var failure: (any Error)?
        await withGracefulShutdownHandler {
            // Each child returns true when the connection should end. Two
            // tasks per connection, no timer: the relay checks every
            // connection's deadlines from one task (RelayServer.sweepLoop).
            await withTaskGroup(of: Result<Bool, any Error>.self) { group in
                group.addTask {
                    // The ack stream finishes when a deadline ended the
                    // session (or the socket failed): end the connection.
                    await session.pumpAcks()
                    return .success(true)
                }
                group.addTask {
                    do {
                        try await receiveLoop(inbound: inbound, session: session, services: services)
                        return .success(true)
                    } catch {
                        return .failure(error)
                    }
                }
                for await result in group {
                    switch result {
                    case .success(false): continue
                    case .success(true): break
                    case .failure(let error): failure = error
                    }
                    group.cancelAll()
                    break
                }
            }
        } onGracefulShutdown: {
            Task { await session.shuttingDown() }
        }
        // The shutdown may have ended the connection's tasks before the
        // notice above ran: send it now, before the socket closes, so the
        // client reconnects with jitter instead of counting a failure.
        if Task.isShuttingDownGracefully { await session.shuttingDown() }
        await services.sessions.remove(session)
        await session.close()
        // Transport errors (such as a message over the transport limit) go
        // back to the WebSocket handler, which closes with the right code.
        if let failure { throw failure }
    }

    private static func receiveLoop(
        inbound: WebSocketInboundStream, session: RelaySession, services: RelayServices
    ) async throws {
        for try await message in inbound.messages(maxSize: services.limits.transportMaxFrameBytes) {
            let disposition: SessionDisposition
            switch message {
            case .binary(let buffer):
                switch RelaySession.decode(Data(buffer.readableBytesView)) {
                case .success(let frame):
                    if case .publish = frame.body {
                        disposition = await session.receive(frame)
                    } else {
                        // Everything but a publish (authenticate, subscribe,
                        // ping…) is handled on a task of its own: a task
                        // keeps the memory of its deepest call for as long
                        // as it lives, and this loop lives as long as the
                        // connection (ADR 0022). Publishes, the hot path,
                        // stay here.
                        disposition = await Task { await session.receive(frame) }.value
                    }
                case .failure(let error):
                    disposition = await session.receiveUndecodable(error)
                }
            case .text:
                disposition = await session.reject(
                    RelayFailure(.malformedFrame, "frames are binary protobuf messages, not text"))
            }
            if disposition == .close { return }
        }
    }
}
