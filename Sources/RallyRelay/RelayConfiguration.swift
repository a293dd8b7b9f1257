public import Foundation
import RallyCrypto
public import RallyWire

/// Where and how a relay runs.
public struct RelayConfiguration: Sendable {
    public var host: String
    /// 0 binds any free port; `RelayServer.waitUntilListening()` tells which.
    public var port: Int
    /// Holds `relay.sqlite`; created when missing.
    public var dataDirectory: URL
    public var limits: RelayLimits
    /// The URL clients reach this relay at (behind a proxy or TLS
    /// terminator). Signatures are bound to its origin; nil: the origins of
    /// the bind address (with `localhost` and `127.0.0.1` for a loopback one).
    public var publicURL: URL?
    /// With a public URL, whether signatures bound to the bind address's
    /// origins are accepted too: for clients inside the deployment that
    /// reach the relay directly, past the proxy (and for tests that put a
    /// fault proxy in front of some clients only).
    public var acceptsBindOrigins: Bool
    /// The PostgreSQL several relay nodes share (ADR 0021); nil: the
    /// embedded store (segments and SQLite) in `dataDirectory`.
    public var postgres: PostgresLocation?

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        dataDirectory: URL = URL(fileURLWithPath: "rally-data"),
        limits: RelayLimits = .default,
        publicURL: URL? = nil,
        acceptsBindOrigins: Bool = false,
        postgres: PostgresLocation? = nil
    ) {
        self.postgres = postgres
        self.host = host
        self.port = port
        self.dataDirectory = dataDirectory
        self.limits = limits
        self.publicURL = publicURL
        self.acceptsBindOrigins = acceptsBindOrigins
    }

    var storeURL: URL { dataDirectory.appendingPathComponent("relay.sqlite") }

    /// The origins signatures may be bound to, once the port is known.
    public func origins(boundPort: Int) -> [String] {
        var origins: [String] = []
        if let publicURL, let origin = RelayOrigin.of(publicURL) {
            origins.append(origin)
            guard acceptsBindOrigins else { return origins }
        }
        let host = self.host.lowercased()
        let loopback = ["127.0.0.1", "localhost", "::1", "[::1]"]
        var hosts = [host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host]
        if loopback.contains(host) { hosts += ["127.0.0.1", "localhost", "[::1]"] }
        for candidate in hosts where !origins.contains("http://\(candidate):\(boundPort)") {
            origins.append("http://\(candidate):\(boundPort)")
        }
        return origins
    }
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
    /// Publishes committed together (one segment record or transaction) at most.
    public var maxCommitBatch: Int
    /// How often expired envelopes are deleted.
    public var pruneInterval: Duration
    /// Largest WebSocket frame the transport accepts at all. Frames between
    /// `WireLimits.maxFrameBytes` and this size are answered with a typed
    /// FRAME_TOO_LARGE; anything bigger is refused by the transport itself.
    public var transportMaxFrameBytes: Int
    /// Sustained publishes per second from one IP address, over WebSocket
    /// and HTTP together.
    public var publishRatePerSecondPerIP: Double
    public var publishBurstPerIP: Double
    /// Sustained publishes per second by one authenticated identity, over
    /// all its connections.
    public var publishRatePerSecondPerIdentity: Double
    public var publishBurstPerIdentity: Double
    /// Open WebSocket connections at most, in all and per IP address.
    public var maxConnections: Int
    public var maxConnectionsPerIP: Int
    /// A WebSocket that sends nothing for this long is closed.
    public var idleTimeout: Duration
    /// Payload bytes one inbox may store (0: no limit).
    public var maxInboxBytes: Int64
    /// Payload bytes one capability topic may store (0: no limit).
    public var maxTopicBytes: Int64
    /// Inbox envelopes older than this are deleted (.zero: kept until they
    /// expire).
    public var inboxRetention: Duration
    /// Bytes of publishes waiting for the next commit at most.
    public var maxWriteQueueBytes: Int
    /// Payload bytes per backlog page (past its first envelope).
    public var backlogPageBytes: Int
    /// HTTP signature nonces remembered at most (for the signature window).
    public var maxRememberedNonces: Int
    /// Largest blob (an encrypted vault document) the relay stores.
    public var maxBlobBytes: Int64
    /// Largest chunk one blob upload request carries.
    public var maxBlobChunkBytes: Int
    /// Bytes of blobs one identity may store, counted at their declared
    /// size from the moment an upload starts.
    public var blobQuotaBytesPerIdentity: Int64
    /// Uploads one identity may have started and not finished.
    public var maxUnfinishedBlobsPerIdentity: Int
    /// An upload not finished within this time is deleted.
    public var unfinishedBlobLifetime: Duration
    /// Escrows one identity may have created (and not deleted).
    public var maxEscrowsPerIdentity: Int
    /// Largest sealed grant an escrow keeps.
    public var maxSealedGrantBytes: Int
    /// Shortest and longest wait an escrow may have between a request and
    /// its release.
    public var minEscrowWait: Duration
    public var maxEscrowWait: Duration
    /// Call rooms: how many, how full, how long they and their places live.
    public var rooms = RoomLimits()
    /// Push: retries, rate per inbox, and which targets are accepted.
    public var push = PushLimits()

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
        transportMaxFrameBytes: Int = 2 * WireLimits.maxFrameBytes,
        publishRatePerSecondPerIP: Double = Defaults.publishRatePerSecondPerIP,
        publishBurstPerIP: Double = Defaults.publishBurstPerIP,
        publishRatePerSecondPerIdentity: Double = Defaults.publishRatePerSecondPerIdentity,
        publishBurstPerIdentity: Double = Defaults.publishBurstPerIdentity,
        maxConnections: Int = Defaults.maxConnections,
        maxConnectionsPerIP: Int = Defaults.maxConnectionsPerIP,
        idleTimeout: Duration = Defaults.idleTimeout,
        maxInboxBytes: Int64 = Defaults.maxInboxBytes,
        maxTopicBytes: Int64 = Defaults.maxTopicBytes,
        inboxRetention: Duration = Defaults.inboxRetention,
        maxWriteQueueBytes: Int = Defaults.maxWriteQueueBytes,
        backlogPageBytes: Int = Defaults.backlogPageBytes,
        maxRememberedNonces: Int = Defaults.maxRememberedNonces,
        maxBlobBytes: Int64 = Defaults.maxBlobBytes,
        maxBlobChunkBytes: Int = Defaults.maxBlobChunkBytes,
        blobQuotaBytesPerIdentity: Int64 = Defaults.blobQuotaBytesPerIdentity,
        maxUnfinishedBlobsPerIdentity: Int = Defaults.maxUnfinishedBlobsPerIdentity,
        unfinishedBlobLifetime: Duration = Defaults.unfinishedBlobLifetime,
        maxEscrowsPerIdentity: Int = Defaults.maxEscrowsPerIdentity,
        maxSealedGrantBytes: Int = Defaults.maxSealedGrantBytes,
        minEscrowWait: Duration = Defaults.minEscrowWait,
        maxEscrowWait: Duration = Defaults.maxEscrowWait
    ) {
        self.maxEscrowsPerIdentity = maxEscrowsPerIdentity
        self.maxSealedGrantBytes = maxSealedGrantBytes
        self.minEscrowWait = minEscrowWait
        self.maxEscrowWait = maxEscrowWait
        self.maxBlobBytes = maxBlobBytes
        self.maxBlobChunkBytes = maxBlobChunkBytes
        self.blobQuotaBytesPerIdentity = blobQuotaBytesPerIdentity
        self.maxUnfinishedBlobsPerIdentity = maxUnfinishedBlobsPerIdentity
        self.unfinishedBlobLifetime = unfinishedBlobLifetime
        self.publishRatePerSecondPerIP = publishRatePerSecondPerIP
        self.publishBurstPerIP = publishBurstPerIP
        self.publishRatePerSecondPerIdentity = publishRatePerSecondPerIdentity
        self.publishBurstPerIdentity = publishBurstPerIdentity
        self.maxConnections = maxConnections
        self.maxConnectionsPerIP = maxConnectionsPerIP
        self.idleTimeout = idleTimeout
        self.maxInboxBytes = maxInboxBytes
        self.maxTopicBytes = maxTopicBytes
        self.inboxRetention = inboxRetention
        self.maxWriteQueueBytes = maxWriteQueueBytes
        self.backlogPageBytes = backlogPageBytes
        self.maxRememberedNonces = maxRememberedNonces
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

    /// The production defaults of the limits added with issue 8, named so
    /// the CLI flags and the ADR quote the same numbers.
    public enum Defaults {
        public static let publishRatePerSecondPerIP: Double = 400
        public static let publishBurstPerIP: Double = 800
        public static let publishRatePerSecondPerIdentity: Double = 200
        public static let publishBurstPerIdentity: Double = 400
        public static let maxConnections = 10_000
        public static let maxConnectionsPerIP = 64
        public static let idleTimeout: Duration = .seconds(300)
        public static let maxInboxBytes: Int64 = 64 << 20
        public static let maxTopicBytes: Int64 = 256 << 20
        public static let inboxRetention: Duration = .seconds(30 * 86_400)
        public static let maxWriteQueueBytes = 64 << 20
        public static let backlogPageBytes = 1 << 20
        public static let maxRememberedNonces = 100_000
        public static let maxBlobBytes: Int64 = 1 << 30
        /// Room for a client's 1 MiB segment plus its tag, and then some.
        public static let maxBlobChunkBytes = 4 << 20
        public static let blobQuotaBytesPerIdentity: Int64 = 4 << 30
        public static let maxUnfinishedBlobsPerIdentity = 16
        public static let unfinishedBlobLifetime: Duration = .seconds(86_400)
        public static let maxEscrowsPerIdentity = 1024
        public static let maxSealedGrantBytes = 8 << 10
        public static let minEscrowWait: Duration = .seconds(60)
        public static let maxEscrowWait: Duration = .seconds(90 * 86_400)
    }

    var authTimeoutMilliseconds: UInt32 { UInt32(clamping: authTimeout.milliseconds) }
}

extension Duration {
    /// Whole nanoseconds (saturating): for deadlines kept in atomics.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, scaleOverflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (sum, sumOverflow) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        if scaleOverflow || sumOverflow { return seconds < 0 ? .min : .max }
        return sum
    }
}
