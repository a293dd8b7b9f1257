import Foundation
public import Logging
import ServiceLifecycle

/// The `rally relay` command.
public enum RelayMain {
    /// Runs the relay until SIGINT or SIGTERM, then shuts down gracefully.
    /// Prints one line to stdout once the listener is bound.
    public static func run(configuration: RelayConfiguration, logger: Logger) async throws {
        let server = try await RelayServer(configuration: configuration, logger: logger)
        let group = ServiceGroup(
            configuration: .init(
                services: [server, server.shutdownNotice], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        )
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            tasks.addTask {
                guard let port = try? await server.waitUntilListening() else { return }
                let directory = configuration.dataDirectory.standardizedFileURL.path
                print("rally relay listening on http://\(configuration.host):\(port) (data: \(directory))")
                fflush(nil)
            }
            try await tasks.waitForAll()
        }
        print("rally relay stopped: in-flight commits finished, store closed")
        fflush(nil)
    }
}
