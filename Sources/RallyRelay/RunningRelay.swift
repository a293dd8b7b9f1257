public import Foundation
public import Logging
import ServiceLifecycle

/// A relay running in this process in a background task, for tests and
/// `rally demo`.
public final class RunningRelay: Sendable {
    public let server: RelayServer
    public let port: Int
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    private init(server: RelayServer, port: Int, group: ServiceGroup, task: Task<Void, any Error>) {
        self.server = server
        self.port = port
        self.group = group
        self.task = task
    }

    /// Base URL of the relay: its public URL if configured, else
    /// `http://<host>:<port>`, an origin the relay accepts signatures for.
    /// The WebSocket endpoint is `/v1/ws` under it (with the `ws` scheme).
    public var url: URL {
        server.configuration.publicURL ?? boundURL
    }

    /// `http://<host>:<port>`: where the relay listens.
    public var boundURL: URL {
        let host = server.configuration.host
        return URL(string: "http://\(host.contains(":") ? "[\(host)]" : host):\(port)")!
    }

    public static func start(
        configuration: RelayConfiguration, logger: Logger = Logger(label: "rally.relay"),
        clock: some RelayClock = SystemRelayClock()
    ) async throws -> RunningRelay {
        let server = try await RelayServer(configuration: configuration, logger: logger, clock: clock)
        // No signal handling: the host process owns its signals.
        let group = ServiceGroup(
            configuration: .init(
                services: [server, server.shutdownNotice], gracefulShutdownSignals: [], logger: logger))
        let task = Task { try await group.run() }
        do {
            let port = try await server.waitUntilListening()
            return RunningRelay(server: server, port: port, group: group, task: task)
        } catch {
            task.cancel()
            _ = try? await task.value
            throw error
        }
    }

    /// Stops accepting, finishes commits in flight, closes the store, and
    /// returns once all of that is done.
    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }
}
