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
        await services.sessions.add(session)
        do {
            try await outbound.write(.binary(ByteBuffer(bytes: FrameCodec.encode(session.challengeFrame))))
        } catch {
            await services.sessions.remove(session)
            throw error
        }

        var failure: (any Error)?
        await withGracefulShutdownHandler {
            // Each child returns true when the connection should end.
            await withTaskGroup(of: Result<Bool, any Error>.self) { group in
                group.addTask {
                    await session.pumpAcks()
                    return .success(false)
                }
                group.addTask {
                    // One timer for both deadlines (a task per connection
                    // fewer): the authentication deadline once, then the
                    // idle check. The idle deadline is measured on the
                    // relay's clock; this only decides how often to look.
                    let interval = min(max(services.limits.idleTimeout / 4, .milliseconds(10)), .seconds(5))
                    let clock = ContinuousClock()
                    let authDeadline = clock.now + services.limits.authTimeout
                    var authChecked = false
                    while true {
                        let wait = authChecked ? interval : min(interval, max(authDeadline - clock.now, .zero))
                        do {
                            try await Task.sleep(for: wait)
                        } catch {
                            return .success(false)
                        }
                        if !authChecked, clock.now >= authDeadline {
                            authChecked = true
                            if await session.authTimeoutElapsed() == .close { return .success(true) }
                        }
                        if await session.idleCheck() == .close { return .success(true) }
                    }
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
                disposition = await session.receive(Data(buffer.readableBytesView))
            case .text:
                disposition = await session.reject(
                    RelayFailure(.malformedFrame, "frames are binary protobuf messages, not text"))
            }
            if disposition == .close { return }
        }
    }
}
