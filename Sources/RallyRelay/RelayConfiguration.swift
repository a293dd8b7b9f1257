import Foundation
import RallyWire

/// Where and how a relay runs.
public struct RelayConfiguration: Sendable {
    public var host: String
    /// 0 binds any free port; `RelayServer.waitUntilListening()` tells which.
    public var port: Int
    /// Holds `relay.sqlite`; created when missing.
    public var dataDirectory: URL
    public var limits: RelayLimits

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        dataDirectory: URL = URL(fileURLWithPath: "rally-data"),
        limits: RelayLimits = .default
    ) {
        self.host = host
        self.port = port
        self.dataDirectory = dataDirectory
        self.limits = limits
    }

    var storeURL: URL { dataDirectory.appendingPathComponent("relay.sqlite") }
}

/// Every quota and timeout the relay enforces. The defaults are the
/// production values; tests shrink them to reach the edges quickly.
public struct RelayLimits: Sendable, Equatable {
    /// Sustained publishes per second allowed on one connection.
    public var publishRatePerSecond: Double
    /// Publishes a connection may make in a burst before the rate applies.
    public var publishBurst: Double
    /// How long a WebSocket may stay unauthenticated before it is closed.
    public var authTimeout: Duration
    /// Live envelopes buffered per subscription before it counts as a slow
    /// consumer.
    public var subscriberBufferSize: Int
    /// Topics one connection may subscribe to at once.
    public var maxSubscriptionsPerConnection: Int
    /// Envelopes read from the store per page while replaying a backlog.
    public var backlogPageSize: Int
    /// How often a subscription may fall back to the store while it catches
    /// up before it is treated as a slow consumer.
    public var maxCatchUpResyncs: Int
    /// Envelopes one HTTP fetch returns when the client does not say.
    public var defaultFetchLimit: Int
    /// Envelopes one HTTP fetch returns at most.
    public var maxFetchLimit: Int
    /// Longest HTTP long-poll.
    public var maxLongPollWait: Duration
    /// Publishes committed together in one transaction at most.
    public var maxCommitBatch: Int
    /// How often expired envelopes are deleted.
    public var pruneInterval: Duration
    /// Largest WebSocket frame the transport accepts at all. Frames between
    /// `WireLimits.maxFrameBytes` and this size are answered with a typed
    /// FRAME_TOO_LARGE; anything bigger is refused by the transport itself.
    public var transportMaxFrameBytes: Int

    public init(
        publishRatePerSecond: Double = 200,
        publishBurst: Double = 400,
        authTimeout: Duration = .seconds(10),
        subscriberBufferSize: Int = 1024,
        maxSubscriptionsPerConnection: Int = 256,
        backlogPageSize: Int = 256,
        maxCatchUpResyncs: Int = 4,
        defaultFetchLimit: Int = 100,
        maxFetchLimit: Int = 1000,
        maxLongPollWait: Duration = .seconds(30),
        maxCommitBatch: Int = 512,
        pruneInterval: Duration = .seconds(60),
        transportMaxFrameBytes: Int = 2 * WireLimits.maxFrameBytes
    ) {
        self.publishRatePerSecond = publishRatePerSecond
        self.publishBurst = publishBurst
        self.authTimeout = authTimeout
        self.subscriberBufferSize = subscriberBufferSize
        self.maxSubscriptionsPerConnection = maxSubscriptionsPerConnection
        self.backlogPageSize = backlogPageSize
        self.maxCatchUpResyncs = maxCatchUpResyncs
        self.defaultFetchLimit = defaultFetchLimit
        self.maxFetchLimit = maxFetchLimit
        self.maxLongPollWait = maxLongPollWait
        self.maxCommitBatch = maxCommitBatch
        self.pruneInterval = pruneInterval
        self.transportMaxFrameBytes = transportMaxFrameBytes
    }

    public static let `default` = RelayLimits()

    var authTimeoutMilliseconds: UInt32 { UInt32(clamping: authTimeout.milliseconds) }
}

extension Duration {
    var milliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
