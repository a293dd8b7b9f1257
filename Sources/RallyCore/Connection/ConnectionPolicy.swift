/// Which transport carries a client's traffic to the relay.
public enum TransportChoice: String, Sendable, CaseIterable {
    /// WebSocket, falling back to HTTP long-polling when the recovery
    /// ladder reaches its last rung, and moving back once a WebSocket
    /// works again.
    case automatic
    /// HTTP long-polling only, for networks that block WebSockets.
    case http
}

/// How a client keeps its relay connection alive and how it recovers.
/// The defaults suit apps; tests shorten the pauses and inject a clock for
/// the status timers.
public struct ConnectionPolicy: Sendable {
    /// WebSocket with HTTP fallback, or HTTP only.
    public var transport: TransportChoice
    /// The pause between recovery attempts: exponential with full jitter
    /// (``Backoff/standard``: 200 ms doubling to 30 s).
    public var backoff: Backoff
    /// How long a live subscription may stay quiet before its link is
    /// pinged; a ping unanswered within ``heartbeatTimeout`` is a missed
    /// ping, a degraded signal.
    public var heartbeatInterval: Duration
    public var heartbeatTimeout: Duration
    /// The window a relay's `SHUTTING_DOWN` notice spreads reconnects
    /// over: each client reconnects after a uniformly random pause in it,
    /// so a restarting relay is not hit by every client at once.
    public var shutdownJitter: Duration
    /// The clock the status machine's timers (800 ms indicator, 10 s
    /// retrying) run on; nil: the client's clock.
    public var statusClock: ClientClock?

    public init(
        transport: TransportChoice = .automatic, backoff: Backoff = .standard,
        heartbeatInterval: Duration = .seconds(20), heartbeatTimeout: Duration = .seconds(10),
        shutdownJitter: Duration = .seconds(2), statusClock: ClientClock? = nil
    ) {
        self.transport = transport
        self.backoff = backoff
        self.heartbeatInterval = heartbeatInterval
        self.heartbeatTimeout = heartbeatTimeout
        self.shutdownJitter = shutdownJitter
        self.statusClock = statusClock
    }

    /// The SDK's default.
    public static let standard = ConnectionPolicy()
}
