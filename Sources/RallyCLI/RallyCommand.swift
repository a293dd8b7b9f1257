public import ArgumentParser
import Foundation
import Logging
import RallyCore

/// `rally`: the relay, and every client flow, from a terminal.
public struct RallyCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "rally",
        abstract: "End-to-end encrypted invites, groups and messages over an untrusted relay.",
        subcommands: [
            RelayCommand.self, IDCommand.self, DMCommand.self, GroupCommand.self, InviteCommand.self, VaultCommand.self,
            NomineeCommand.self, CallCommand.self, PushCommand.self,
            JoinCommand.self, OpenCommand.self, WatchCommand.self, StatusCommand.self, DemoCommand.self,
        ])

    public init() {}
}

/// Options every client command takes.
struct ClientOptions: ParsableArguments {
    @Option(help: "Directory of this user's identity and local store (env RALLY_HOME; default ~/.rally).")
    var home: String?

    @Option(help: "Relay base URL (env RALLY_RELAY; default http://127.0.0.1:8080).")
    var relay: String?

    @Option(
        help: ArgumentHelp(
            "How to reach the relay: automatic (WebSocket, falling back to HTTP long-polling when WebSockets fail) or http (HTTP only, for networks that block WebSockets) (env RALLY_TRANSPORT).",
            valueName: "automatic|http"))
    var transport: String?

    @Flag(help: "Print machine-readable JSON.")
    var json = false

    var homeURL: URL {
        if let home { return URL(fileURLWithPath: home) }
        if let env = ProcessInfo.processInfo.environment["RALLY_HOME"], !env.isEmpty {
            return URL(fileURLWithPath: env)
        }
        return FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".rally")
    }

    func relayURL() throws -> URL {
        let text = relay ?? ProcessInfo.processInfo.environment["RALLY_RELAY"] ?? "http://127.0.0.1:8080"
        guard let url = URL(string: text), let scheme = url.scheme, ["http", "https", "ws", "wss"].contains(scheme),
            url.host != nil
        else {
            throw ValidationError("--relay must be a URL like http://127.0.0.1:8080, not \"\(text)\"")
        }
        return url
    }

    var output: Output { Output(json: json) }

    /// How the client keeps its relay connection: the SDK's defaults with
    /// the transport asked for.
    func connectionPolicy() throws -> ConnectionPolicy {
        let text = transport ?? ProcessInfo.processInfo.environment["RALLY_TRANSPORT"] ?? "automatic"
        guard let choice = TransportChoice(rawValue: text.lowercased()) else {
            let names = TransportChoice.allCases.map(\.rawValue).joined(separator: ", ")
            throw ValidationError("--transport must be one of \(names), not \"\(text)\"")
        }
        return ConnectionPolicy(transport: choice)
    }

    /// The SDK logs to stderr; a terminal user sees only errors there unless
    /// RALLY_LOG_LEVEL asks for more (the CLI prints its own warnings).
    var logger: Logger {
        var logger = Logger(label: "rally.client")
        let level = ProcessInfo.processInfo.environment["RALLY_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:))
        logger.logLevel = level ?? .error
        return logger
    }

    func openClient() throws -> RallyClient {
        try RallyClient.open(
            home: homeURL, relayURL: try relayURL(), logger: logger, connection: try connectionPolicy())
    }
}
