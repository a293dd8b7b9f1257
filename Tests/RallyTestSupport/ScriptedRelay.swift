public import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
public import RallyWire

/// A WebSocket server that speaks the relay's framing but follows a test's
/// script instead of the relay's rules: it sends a challenge, then hands
/// every client frame to `answer`, and writes the frames it returns back to
/// back. For tests of how the SDK reads frame orders and timings a real
/// relay produces only by chance.
public final class ScriptedRelay: Sendable {
    public let url: URL
    private let task: Task<Void, any Error>

    private init(url: URL, task: Task<Void, any Error>) {
        self.url = url
        self.task = task
    }

    public static func start(
        answer: @escaping @Sendable (WireClientFrame) async -> [WireServerFrame]
    ) async throws -> ScriptedRelay {
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.ws("/v1/ws") { inbound, outbound, _ in
            var challenge = WireServerFrame()
            challenge.challenge.nonce = Data(repeating: 7, count: 32)
            challenge.challenge.maxPayloadBytes = UInt32(WireLimits.maxPayloadBytes)
            try await outbound.write(.binary(ByteBuffer(bytes: FrameCodec.encode(challenge))))
            for try await message in inbound.messages(maxSize: WireLimits.maxFrameBytes) {
                guard case .binary(let buffer) = message,
                    let frame = try? FrameCodec.decodeClientFrame(Data(buffer.readableBytesView))
                else { continue }
                for reply in await answer(frame) {
                    try await outbound.write(.binary(ByteBuffer(bytes: FrameCodec.encode(reply))))
                }
            }
        }
        // Its own shutdown is not news.
        var logger = Logger(label: "rally.test.scripted")
        logger.logLevel = .critical
        let (url, task) = await runLoopbackWebSocketServer(router, logger: logger)
        return ScriptedRelay(url: url, task: task)
    }

    public func stop() async {
        task.cancel()
        _ = try? await task.value
    }
}
