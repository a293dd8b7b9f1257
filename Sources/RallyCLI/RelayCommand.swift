import ArgumentParser
import Foundation
import Logging
import RallyCrypto
import RallyRelay

struct RelayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay",
        abstract: "Run a relay: WebSocket + HTTP on one port, stored in a SQLite file.",
        discussion: "Stops gracefully on SIGINT/SIGTERM after finishing in-flight commits.")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 picks a free one).") var port = 8080
    @Option(help: "Directory of the relay's SQLite store (and, with --postgres, of its blobs and escrows).")
    var data = "rally-data"
    @Option(
        help: ArgumentHelp(
            "Keep envelopes, key bundles and push targets in this PostgreSQL, shared with other relay nodes (postgres://user:password@host:port/database[?sslmode=…&sslrootcert=FILE], as libpq reads them; env RALLY_POSTGRES). Without it: SQLite in --data, no configuration.",
            valueName: "url"))
    var postgres: String?
    @Option(help: "Log level: trace, debug, info, notice, warning, error.") var logLevel = "info"
    @Option(
        help: ArgumentHelp(
            "The URL clients use to reach this relay (e.g. https://relay.example); signatures are bound to its origin.",
            discussion:
                "Without it the relay accepts the origins of its bind address (and localhost/127.0.0.1 on loopback)."))
    var publicURL: String?

    typealias D = RelayLimits.Defaults
    @Option(help: "Publishes per second allowed from one IP address (WebSocket and HTTP).")
    var publishRatePerIp = D.publishRatePerSecondPerIP
    @Option(help: "Publish burst allowed from one IP address.") var publishBurstPerIp = D.publishBurstPerIP
    @Option(help: "Publishes per second allowed by one identity.")
    var publishRatePerIdentity = D.publishRatePerSecondPerIdentity
    @Option(help: "Publish burst allowed by one identity.") var publishBurstPerIdentity = D.publishBurstPerIdentity
    @Option(help: "Open WebSocket connections allowed in all.") var maxConnections = D.maxConnections
    @Option(help: "Open WebSocket connections allowed per IP address.") var maxConnectionsPerIp = D.maxConnectionsPerIP
    @Option(help: "Seconds a WebSocket may stay silent before it is closed.")
    var idleTimeoutSeconds = Int(D.idleTimeout.components.seconds)
    @Option(help: "Seconds a new WebSocket has to authenticate before it is closed (AUTHENTICATION_TIMEOUT).")
    var authTimeoutSeconds = Int(RelayLimits.default.authTimeout.components.seconds)
    @Option(help: "Payload bytes one inbox may store (0: no limit).") var maxInboxBytes = D.maxInboxBytes
    @Option(help: "Payload bytes one group or other topic may store (0: no limit).") var maxTopicBytes = D.maxTopicBytes
    @Option(help: "Days inbox envelopes are kept (0: until they expire).")
    var inboxRetentionDays = Int(D.inboxRetention.components.seconds / 86_400)
    @Option(help: "Bytes of publishes waiting for a commit at most.") var maxWriteQueueBytes = D.maxWriteQueueBytes
    @Option(help: "Payload bytes per backlog page sent to a subscriber.") var backlogPageBytes = D.backlogPageBytes
    @Option(help: "Largest blob (an encrypted vault document) in bytes.") var maxBlobBytes = D.maxBlobBytes
    @Option(help: "Largest chunk of one blob upload request, in bytes.") var maxBlobChunkBytes = D.maxBlobChunkBytes
    @Option(help: "Bytes of blobs one identity may store.") var blobQuotaBytes = D.blobQuotaBytesPerIdentity
    @Option(help: "Blob uploads one identity may have unfinished.")
    var maxUnfinishedBlobs = D.maxUnfinishedBlobsPerIdentity
    @Option(help: "Hours an unfinished blob upload is kept.") var unfinishedBlobHours = 24
    @Option(help: "Emergency-access escrows one identity may keep.") var maxEscrows = D.maxEscrowsPerIdentity
    @Option(help: "Largest sealed grant an escrow keeps, in bytes.") var maxSealedGrantBytes = D.maxSealedGrantBytes
    @Option(help: "Shortest wait of an escrow, in seconds.")
    var minEscrowWaitSeconds = D.minEscrowWait.components.seconds
    @Option(help: "Longest wait of an escrow, in days.")
    var maxEscrowWaitDays = D.maxEscrowWait.components.seconds / 86_400
    @Option(help: "Publishes per second allowed on one connection.")
    var publishRatePerConnection = RelayLimits.default.publishRatePerSecond
    @Option(help: "Publish burst allowed on one connection.") var publishBurstPerConnection = RelayLimits.default
        .publishBurst
    @Option(help: "Least seconds between two pushes to one inbox (more messages meanwhile share the next push).")
    var pushIntervalSeconds = RelayLimits.default.push.minInterval.components.seconds
    @Flag(help: "Accept plain http push targets (local development; production targets are https).")
    var pushAllowHttp = false
    @Flag(
        help:
            "Accept push targets on loopback, private and link-local IP literals (local development: a receiver on this machine)."
    )
    var pushAllowPrivate = false

    func run() async throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0...65535") }
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        var logger = Logger(label: "rally.relay")
        logger.logLevel = level
        var publicURLValue: URL?
        if let publicURL {
            guard let url = URL(string: publicURL), RelayOrigin.of(url) != nil else {
                throw ValidationError("--public-url must be an http(s) URL such as https://relay.example")
            }
            publicURLValue = url
        }
        guard idleTimeoutSeconds > 0, authTimeoutSeconds > 0, maxConnections > 0, maxConnectionsPerIp > 0,
            inboxRetentionDays >= 0,
            maxInboxBytes >= 0, maxTopicBytes >= 0, maxWriteQueueBytes > 0, backlogPageBytes > 0, maxBlobBytes > 0,
            maxBlobChunkBytes > 0, blobQuotaBytes > 0, maxUnfinishedBlobs > 0, unfinishedBlobHours > 0,
            maxEscrows > 0, maxSealedGrantBytes > 0, minEscrowWaitSeconds > 0,
            maxEscrowWaitDays * 86_400 >= minEscrowWaitSeconds
        else { throw ValidationError("limits must be positive (byte quotas and retention may be 0: none)") }
        var limits = RelayLimits.default
        limits.publishRatePerSecondPerIP = publishRatePerIp
        limits.publishBurstPerIP = publishBurstPerIp
        limits.publishRatePerSecondPerIdentity = publishRatePerIdentity
        limits.publishBurstPerIdentity = publishBurstPerIdentity
        limits.publishRatePerSecond = publishRatePerConnection
        limits.publishBurst = publishBurstPerConnection
        limits.maxConnections = maxConnections
        limits.maxConnectionsPerIP = maxConnectionsPerIp
        limits.idleTimeout = .seconds(idleTimeoutSeconds)
        limits.authTimeout = .seconds(authTimeoutSeconds)
        limits.maxInboxBytes = maxInboxBytes
        limits.maxTopicBytes = maxTopicBytes
        limits.inboxRetention = .seconds(inboxRetentionDays * 86_400)
        limits.maxWriteQueueBytes = maxWriteQueueBytes
        limits.backlogPageBytes = backlogPageBytes
        limits.maxBlobBytes = maxBlobBytes
        limits.maxBlobChunkBytes = maxBlobChunkBytes
        limits.blobQuotaBytesPerIdentity = blobQuotaBytes
        limits.maxUnfinishedBlobsPerIdentity = maxUnfinishedBlobs
        limits.unfinishedBlobLifetime = .seconds(unfinishedBlobHours * 3600)
        limits.maxEscrowsPerIdentity = maxEscrows
        limits.maxSealedGrantBytes = maxSealedGrantBytes
        limits.minEscrowWait = .seconds(minEscrowWaitSeconds)
        limits.maxEscrowWait = .seconds(maxEscrowWaitDays * 86_400)
        guard pushIntervalSeconds >= 0 else { throw ValidationError("--push-interval-seconds must not be negative") }
        limits.push.minInterval = .seconds(pushIntervalSeconds)
        limits.push.allowsInsecureTargets = pushAllowHttp
        limits.push.allowsPrivateTargets = pushAllowPrivate
        var postgresLocation: PostgresLocation?
        if let text = postgres
            ?? ProcessInfo.processInfo.environment["RALLY_POSTGRES"].flatMap({ $0.isEmpty ? nil : $0 })
        {
            do {
                postgresLocation = try PostgresLocation.parse(text)
            } catch {
                throw ValidationError(
                    "--postgres: \(error.reason); expected a URL such as "
                        + "postgres://rally:secret@db.example:5432/rally?sslmode=verify-full")
            }
        }
        let configuration = RelayConfiguration(
            host: host, port: port, dataDirectory: URL(fileURLWithPath: data), limits: limits,
            publicURL: publicURLValue, postgres: postgresLocation)
        try await RelayMain.run(configuration: configuration, logger: logger)
    }
}
