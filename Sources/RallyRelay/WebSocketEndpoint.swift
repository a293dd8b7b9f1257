import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import RallyWire
import ServiceLifecycle

/// `GET /v1/ws`: the transport shell around `RelaySession`. One binary
/// WebSocket message carries one protobuf frame each way.
enum WebSocketEndpoint {
    static func addRoute(to router: Router<BasicWebSocketRequestContext>, services: RelayServices) {
        router.ws("/v1/ws") { inbound, outbound, _ in
            try await serve(inbound: inbound, outbound: outbound, services: services)
        }
    }

    static func serve(
        inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, services: RelayServices
    ) async throws {
        services.metrics.openConnections.increment()
        defer { services.metrics.openConnections.decrement() }
        let session = RelaySession(services: services) { frame in
            try await outbound.write(.binary(ByteBuffer(bytes: FrameCodec.encode(frame))))
        }
        try await outbound.write(.binary(ByteBuffer(bytes: FrameCodec.encode(session.challengeFrame))))

        var failure: (any Error)?
        await withGracefulShutdownHandler {
            // Each child returns true when the connection should end.
            await withTaskGroup(of: Result<Bool, any Error>.self) { group in
                group.addTask {
                    await session.pumpAcks()
                    return .success(false)
                }
                group.addTask {
                    do {
                        try await Task.sleep(for: services.limits.authTimeout)
                    } catch {
                        return .success(false)
                    }
                    return .success(await session.authTimeoutElapsed() == .close)
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
