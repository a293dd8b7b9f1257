public import Foundation
import Hummingbird
import HummingbirdWSClient
import HummingbirdWebSocket
import Logging
public import RallyWire

/// A relay that lies by omission: a WebSocket proxy in front of a real
/// relay that passes every frame through, except envelopes its filter
/// withholds from the connections that came through it. Clients that use
/// the proxy's URL see a log with holes the real relay does not have; the
/// real relay keeps its own guarantees. For tests of what members notice
/// when the relay shows them different histories.
public final class WithholdingProxy: Sendable {
    public let url: URL
    private let filter: Filter
    private let task: Task<Void, any Error>

    /// Decides, per envelope and per connection (known by the signing key
    /// it authenticated with), whether the proxy drops it.
    public actor Filter {
        var withhold: @Sendable (_ signingKey: Data?, WireEnvelope) -> Bool = { _, _ in false }
        var replay: @Sendable (_ signingKey: Data?, WireEnvelope) -> Bool = { _, _ in false }
        public private(set) var withheld: [WireEnvelope] = []
        public private(set) var replayed: [WireEnvelope] = []

        func judge(_ envelope: WireEnvelope, for signingKey: Data?) -> Bool {
            guard withhold(signingKey, envelope) else { return false }
            withheld.append(envelope)
            return true
        }

        /// Whether the envelope goes out a second time, right after itself.
        func repeats(_ envelope: WireEnvelope, for signingKey: Data?) -> Bool {
            guard replay(signingKey, envelope) else { return false }
            replayed.append(envelope)
            return true
        }

        public func set(_ withhold: @escaping @Sendable (Data?, WireEnvelope) -> Bool) { self.withhold = withhold }
        func setReplay(_ replay: @escaping @Sendable (Data?, WireEnvelope) -> Bool) { self.replay = replay }
    }

    /// The signing key a connection authenticated with, as it went past.
    actor Connection {
        var signingKey: Data?
        func saw(_ key: Data) { signingKey = key }
    }

    private init(url: URL, filter: Filter, task: Task<Void, any Error>) {
        self.url = url
        self.filter = filter
        self.task = task
    }

    /// Withholds, from now on, every envelope `withhold` picks for a
    /// connection authenticated with the given signing key.
    public func withhold(_ withhold: @escaping @Sendable (_ signingKey: Data?, WireEnvelope) -> Bool) async {
        await filter.set(withhold)
    }

    public var withheld: [WireEnvelope] { get async { await filter.withheld } }

    /// Sends, from now on, every envelope `replay` picks twice in a row to
    /// a connection authenticated with the given signing key (a relay
    /// replaying its log).
    public func replay(_ replay: @escaping @Sendable (_ signingKey: Data?, WireEnvelope) -> Bool) async {
        await filter.setReplay(replay)
    }

    public var replayed: [WireEnvelope] { get async { await filter.replayed } }

    /// Starts the proxy on a free loopback port. `upstream` is read when a
    /// connection arrives, so the relay may start after the proxy (it has
    /// to name the proxy's origin as its own).
    public static func start(upstream: @escaping @Sendable () async -> URL) async throws -> WithholdingProxy {
        let filter = Filter()
        let router = Router(context: BasicWebSocketRequestContext.self)
        let logger = Logger(label: "rally.test.proxy")
        router.ws("/v1/ws") { inbound, outbound, _ in
            let upstreamURL = await upstream()
            var components = URLComponents(url: upstreamURL, resolvingAgainstBaseURL: false) ?? URLComponents()
            components.scheme = "ws"
            components.path = "/v1/ws"
            var configuration = WebSocketClientConfiguration()
            configuration.maxFrameSize = WireLimits.maxFrameBytes
            try await WebSocketClient.connect(
                url: components.string ?? "", configuration: configuration, logger: logger
            ) { upstreamInbound, upstreamOutbound, _ in
                let connection = Connection()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for try await message in inbound.messages(maxSize: WireLimits.maxFrameBytes) {
                            guard case .binary(let buffer) = message else { continue }
                            if let frame = try? FrameCodec.decodeClientFrame(Data(buffer.readableBytesView)),
                                case .authenticate(let auth)? = frame.body
                            {
                                await connection.saw(auth.signingPublicKey)
                            }
                            try await upstreamOutbound.write(.binary(buffer))
                        }
                    }
                    group.addTask {
                        for try await message in upstreamInbound.messages(maxSize: WireLimits.maxFrameBytes) {
                            guard case .binary(let buffer) = message else { continue }
                            var copies = 1
                            if let frame = try? FrameCodec.decode(
                                WireServerFrame.self, from: Data(buffer.readableBytesView),
                                limit: WireLimits.maxFrameBytes),
                                case .envelope(let envelope)? = frame.body
                            {
                                let key = await connection.signingKey
                                if await filter.judge(envelope, for: key) { continue }
                                if await filter.repeats(envelope, for: key) { copies = 2 }
                            }
                            for _ in 0..<copies { try await outbound.write(.binary(buffer)) }
                        }
                    }
                    // Either side ending ends the other.
                    try await group.next()
                    group.cancelAll()
                }
            }
        }
        let (url, task) = await runLoopbackWebSocketServer(router, logger: logger)
        return WithholdingProxy(url: url, filter: filter, task: task)
    }

    public func stop() async {
        task.cancel()
        _ = try? await task.value
    }
}

/// Runs a WebSocket-only server on a free loopback port until its task is
/// cancelled; returns once it listens.
func runLoopbackWebSocketServer(
    _ router: Router<BasicWebSocketRequestContext>, logger: Logger
) async -> (url: URL, task: Task<Void, any Error>) {
    let ready = PortBox()
    let app = Application(
        router: Router(context: BasicWebSocketRequestContext.self),
        server: .http1WebSocketUpgrade(webSocketRouter: router),
        configuration: .init(address: .hostname("127.0.0.1", port: 0)),
        onServerRunning: { channel in await ready.set(channel.localAddress?.port ?? 0) },
        logger: logger)
    let task = Task { try await app.runService() }
    return (URL(string: "http://127.0.0.1:\(await ready.value())")!, task)
}

/// The port a test server bound, once it runs.
actor PortBox {
    private var port: Int?
    private var waiters: [CheckedContinuation<Int, Never>] = []

    func set(_ port: Int) {
        self.port = port
        for waiter in waiters { waiter.resume(returning: port) }
        waiters = []
    }

    func value() async -> Int {
        if let port { return port }
        return await withCheckedContinuation { waiters.append($0) }
    }
}
