import Foundation
import Hummingbird
import HummingbirdCore
public import Logging
import NIOCore
import RallyWire
public import ServiceLifecycle

/// The relay as a swift-service-lifecycle `Service`: HTTP and WebSocket on
/// one port, the SQLite store, group commit, live fan-out and pruning.
public final class RelayServer: Service, Sendable, CustomStringConvertible {
    public let configuration: RelayConfiguration
    private let logger: Logger
    let services: RelayServices
    private let listening = ListeningSignal()
    /// The shared store, when this node is one of several.
    private let postgres: PostgresRelayStore?

    /// With `configuration.postgres`, envelopes, key bundles and push
    /// targets live in that PostgreSQL, shared with other nodes, and this
    /// node hears of their commits there; blobs, escrows and call rooms stay
    /// on the node (ADR 0021).
    public init(
        configuration: RelayConfiguration, logger: Logger, clock: some RelayClock = SystemRelayClock()
    ) async throws {
        self.configuration = configuration
        self.logger = logger
        let store: any RelayStore
        let pushTargets: any PushTargetStore
        if let location = configuration.postgres {
            let shared = try await PostgresRelayStore(location: location, logger: logger)
            store = shared
            pushTargets = shared
            postgres = shared
        } else {
            store = try SQLiteRelayStore(url: configuration.storeURL)
            pushTargets = try SQLitePushTargetStore(dataDirectory: configuration.dataDirectory)
            postgres = nil
        }
        let blobs = try FileBlobStore(dataDirectory: configuration.dataDirectory)
        let escrows = try SQLiteEscrowStore(dataDirectory: configuration.dataDirectory)
        services = RelayServices(
            store: store, blobs: blobs, escrows: escrows, pushTargets: pushTargets, clock: clock,
            limits: configuration.limits,
            metrics: RelayMetrics(), logger: logger,
            origins: configuration.origins(boundPort: configuration.port))
    }

    /// The origins authentication and topic proofs are bound to.
    public var origins: [String] { services.origins.current }

    /// The name the service group logs.
    public var description: String { "RelayServer" }

    /// Runs until graceful shutdown or cancellation. On the way out it stops
    /// accepting, lets the commits in flight finish, then closes the store.
    public func run() async throws {
        let services = services
        let router = Router(context: RelayRequestContext.self)
        HTTPEndpoints.addRoutes(to: router, services: services)
        BlobEndpoints.addRoutes(to: router, services: services)
        EscrowEndpoints.addRoutes(to: router, services: services)
        RoomEndpoints.addRoutes(to: router, services: services)
        PushEndpoints.addRoutes(to: router, services: services)
        let listening = listening
        let app = Application(
            router: router,
            server: HTTPServerBuilder { responder in RelayHTTPChannel(responder: responder, services: services) },
            configuration: .init(address: .hostname(configuration.host, port: configuration.port)),
            onServerRunning: { [configuration] channel in
                let port = channel.localAddress?.port ?? 0
                services.origins.current = configuration.origins(boundPort: port)
                await listening.fulfill(port: port)
            },
            logger: logger
        )

        var failure: (any Error)?
        do {
            try await withGracefulShutdownHandler {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await app.run() }
                    group.addTask { await Self.pruneLoop(services: services) }
                    group.addTask { await Self.sweepLoop(services: services) }
                    group.addTask { await Self.roomTickLoop(services: services) }
                    group.addTask { await services.push.run() }
                    if let postgres = self.postgres {
                        group.addTask { await PostgresLiveFeed(store: postgres, services: services).run() }
                    }
                    // The server ends first (shutdown or failure); pruning
                    // then stops with it.
                    try await group.next()
                    group.cancelAll()
                }
            } onGracefulShutdown: {
                // Ends live subscriptions and long-polls, so open requests do
                // not hold the shutdown for their full wait.
                Task {
                    services.hub.shutdown()
                    await services.rooms.shutdown()
                }
            }
        } catch {
            failure = error
        }
        await listening.fail(failure ?? CancellationError())
        services.hub.shutdown()
        await services.writer.close()
        await services.push.shutdown()
        do {
            try await services.store.close()
        } catch {
            logger.error("closing the store failed", metadata: ["error": "\(error)"])
            if failure == nil { failure = error }
        }
        do {
            try await services.blobs.close()
        } catch {
            logger.error("closing the blob store failed", metadata: ["error": "\(error)"])
            if failure == nil { failure = error }
        }
        do {
            try await services.escrows.close()
        } catch {
            logger.error("closing the escrow store failed", metadata: ["error": "\(error)"])
            if failure == nil { failure = error }
        }
        do {
            // The shared store is the push target store too: closed once.
            if postgres == nil { try await services.push.closeStore() }
        } catch {
            logger.error("closing the push target store failed", metadata: ["error": "\(error)"])
            if failure == nil { failure = error }
        }
        if let failure { throw failure }
    }

    /// Returns the bound port once the listener is up; throws if the server
    /// stopped before it got there.
    public func waitUntilListening() async throws -> Int {
        try await listening.wait()
    }

    /// Every connection's authentication and idle deadlines, checked by
    /// one task for all of them instead of a timer task per connection
    /// (ADR 0022). A connection past one gets its error frame and is
    /// closed; each check runs on a task of its own, so one slow socket
    /// holds up no other.
    private static func sweepLoop(services: RelayServices) async {
        let interval = sweepInterval(services.limits)
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
            let due = await services.sessions.due(now: .now, relayNow: services.clock.monotonic)
            for (session, deadline) in due {
                Task {
                    let disposition =
                        switch deadline {
                        case .authentication: await session.authTimeoutElapsed()
                        case .idle: await session.idleCheck()
                        }
                    if disposition == .close { await session.endConnection() }
                    await services.sessions.checked(session)
                }
            }
        }
    }

    /// How often the sweep looks: a tenth of the authentication timeout or
    /// a quarter of the idle timeout, between 10 ms and 1 s. The idle
    /// deadline itself is on the relay's clock; this only sets how often
    /// it is read.
    static func sweepInterval(_ limits: RelayLimits) -> Duration {
        min(max(min(limits.authTimeout / 10, limits.idleTimeout / 4), .milliseconds(10)), .seconds(1))
    }

    private static func pruneLoop(services: RelayServices) async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: services.limits.pruneInterval)
            } catch {
                return
            }
            await prune(services: services)
        }
    }

    /// Room timers (grace periods, idle expiry) are decided on the relay's
    /// clock; this only sets how often the hub looks at it.
    private static func roomTickLoop(services: RelayServices) async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: .milliseconds(250))
            } catch {
                return
            }
            await services.rooms.tick()
        }
    }

    static func prune(services: RelayServices) async {
        do {
            let now = services.clock.nowMilliseconds
            let retention = services.limits.inboxRetention.milliseconds
            let deleted = try await services.store.deleteExpired(
                nowMilliseconds: now, inboxCutoffMilliseconds: retention > 0 ? now - retention : 0)
            services.metrics.prunedEnvelopes.increment(by: Int64(deleted))
        } catch {
            services.logger.error("pruning expired envelopes failed", metadata: ["error": "\(error)"])
        }
        do {
            let cutoff = services.clock.nowMilliseconds - services.limits.unfinishedBlobLifetime.milliseconds
            _ = try await services.blobs.deleteUnfinished(startedBefore: cutoff)
        } catch {
            services.logger.error("pruning unfinished blobs failed", metadata: ["error": "\(error)"])
        }
    }
}

/// A one-shot signal for "the listener is bound", awaited by any number of
/// callers.
actor ListeningSignal {
    private var result: Result<Int, any Error>?
    private var waiters: [CheckedContinuation<Int, any Error>] = []

    func fulfill(port: Int) {
        resolve(.success(port))
    }

    func fail(_ error: any Error) {
        resolve(.failure(error))
    }

    func wait() async throws -> Int {
        if let result { return try result.get() }
        return try await withCheckedThrowingContinuation { waiters.append($0) }
    }

    private func resolve(_ outcome: Result<Int, any Error>) {
        guard result == nil else { return }
        result = outcome
        for waiter in waiters { waiter.resume(with: outcome) }
        waiters.removeAll()
    }
}

/// The routes' request context: Hummingbird's, plus the peer address the
/// per-IP limits key on.
struct RelayRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    var remoteIP: String { remoteAddress?.ipAddress ?? "unknown" }
}

/// Tells every WebSocket client that the relay is stopping before anything
/// closes: run it as the service after ``RelayServer`` in the same
/// `ServiceGroup`, which shuts services down in reverse order, so the
/// notices are written before the server (and the WebSocket library with
/// it) starts closing connections. Clients then reconnect after a random
/// pause instead of all at once.
public struct RelayShutdownNotice: Service, CustomStringConvertible {
    let services: RelayServices

    /// The name the service group logs. Without it the group would print
    /// the whole of the relay's shared state by reflection, walking
    /// objects other tasks are changing.
    public var description: String { "RelayShutdownNotice" }

    public func run() async throws {
        do {
            try await gracefulShutdown()
        } catch {
            // Cancelled, not shut down gracefully: nobody is told.
            return
        }
        await services.sessions.announceShutdown()
    }
}

extension RelayServer {
    /// The service that announces this relay's graceful shutdown to its
    /// clients (see ``RelayShutdownNotice``).
    public var shutdownNotice: RelayShutdownNotice { RelayShutdownNotice(services: services) }
}
