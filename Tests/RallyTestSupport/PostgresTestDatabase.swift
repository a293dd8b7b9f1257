import Foundation
import Logging
import PostgresNIO
public import RallyRelay

/// A database of its own for one test, in the PostgreSQL server that
/// `scripts/test.sh` starts for the run (`RALLY_TEST_POSTGRES_URL`).
public struct PostgresTestDatabase: Sendable {
    /// The server's URL, when the run has one.
    public static var serverURL: String? {
        ProcessInfo.processInfo.environment["RALLY_TEST_POSTGRES_URL"].flatMap { $0.isEmpty ? nil : $0 }
    }

    public static var isAvailable: Bool { serverURL != nil }

    public let name: String
    public let url: String
    public var location: PostgresLocation { try! PostgresLocation.parse(url) }

    public struct Unavailable: Error {}

    /// Creates an empty database with a fresh name.
    public static func create() async throws -> PostgresTestDatabase {
        guard let serverURL, let server = try? PostgresLocation.parse(serverURL) else { throw Unavailable() }
        let name = "rally_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        try await admin(server) { connection in
            try await connection.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: Self.logger)
        }
        var components = URLComponents(string: serverURL)!
        components.path = "/" + name
        return PostgresTestDatabase(name: name, url: components.string!)
    }

    /// Drops the database, closing what is still connected to it.
    public func drop() async {
        guard let serverURL = Self.serverURL, let server = try? PostgresLocation.parse(serverURL) else { return }
        try? await Self.admin(server) { connection in
            try await connection.query(
                PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: Self.logger)
        }
    }

    static let logger: Logger = {
        var logger = Logger(label: "rally.test.postgres")
        logger.logLevel = .error
        return logger
    }()

    private static func admin(
        _ server: PostgresLocation, _ body: (PostgresConnection) async throws -> Void
    ) async throws {
        let connection = try await PostgresConnection.connect(
            configuration: .init(
                host: server.host, port: server.port, username: server.username, password: server.password,
                database: server.database, tls: .disable),
            id: 1, logger: logger)
        do {
            try await body(connection)
        } catch {
            try? await connection.close()
            throw error
        }
        try await connection.close()
    }
}
