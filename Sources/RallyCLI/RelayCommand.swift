import ArgumentParser
import Foundation
import Logging
import RallyRelay

struct RelayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay",
        abstract: "Run a relay: WebSocket + HTTP on one port, stored in a SQLite file.",
        discussion: "Stops gracefully on SIGINT/SIGTERM after finishing in-flight commits.")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 picks a free one).") var port = 8080
    @Option(help: "Directory of the relay's SQLite store.") var data = "rally-data"
    @Option(help: "Log level: trace, debug, info, notice, warning, error.") var logLevel = "info"

    func run() async throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0...65535") }
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        var logger = Logger(label: "rally.relay")
        logger.logLevel = level
        let configuration = RelayConfiguration(
            host: host, port: port, dataDirectory: URL(fileURLWithPath: data))
        try await RelayMain.run(configuration: configuration, logger: logger)
    }
}
