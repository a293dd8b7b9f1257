import Foundation
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyRelay

/// `--postgres` URLs: what they may say, and what each `sslmode` does
/// against the run's PostgreSQL, which speaks TLS with a certificate for the
/// name localhost (no address in it) from a CA of its own and lets
/// `rally_tls` in over TLS only
/// (scripts/lib/private-postgres.sh).
@Suite("PostgreSQL locations and TLS", .timeLimit(.minutes(2)))
struct PostgresTLSTests {
    // MARK: Parsing

    @Test("a URL without parameters: prefer TLS, as libpq does, with the system's trust roots")
    func defaults() throws {
        let location = try PostgresLocation.parse("postgres://rally:s%40cret@db.example:6543/relay")
        #expect(location.host == "db.example" && location.port == 6543)
        #expect(location.username == "rally" && location.password == "s@cret" && location.database == "relay")
        #expect(location.tlsMode == .prefer && location.rootCertificatePath == nil)
        #expect(try PostgresLocation.parse("postgresql://rally@db.example").port == 5432)
    }

    @Test("every sslmode libpq knows, and sslrootcert", arguments: PostgresLocation.TLSMode.allCases)
    func modes(_ mode: PostgresLocation.TLSMode) throws {
        let location = try PostgresLocation.parse(
            "postgres://rally@db.example/relay?sslmode=\(mode.rawValue)&sslrootcert=/etc/ssl/db-ca.pem")
        #expect(location.tlsMode == mode)
        #expect(location.rootCertificatePath == "/etc/ssl/db-ca.pem")
    }

    @Test(
        "a URL that is not one, or says what the relay cannot honour, is refused with why",
        arguments: [
            ("db.example:5432", "not a postgres:// URL"),
            ("mysql://rally@db.example/relay", "not a postgres:// URL"),
            ("postgres:///relay", "the URL names no host"),
            ("postgres://db.example/relay", "the URL names no user (postgres://USER@host/database)"),
            (
                "postgres://rally@db.example/relay?sslmode=verify",
                "sslmode \"verify\" is not one of disable, prefer, require, verify-ca, verify-full"
            ),
            (
                "postgres://rally@db.example/relay?ssl_mode=require",
                "unsupported parameter \"ssl_mode\" (supported: sslmode, sslrootcert)"
            ),
            (
                "postgres://rally@db.example/relay?sslmode=require&sslmode=disable",
                "\"sslmode\" is given twice"
            ),
            ("postgres://rally@db.example/relay?sslrootcert=", "sslrootcert names no file"),
            (
                "postgres://rally@db.example/relay?sslmode",
                "sslmode \"\" is not one of disable, prefer, require, verify-ca, verify-full"
            ),
        ])
    func refused(_ url: String, _ reason: String) {
        #expect(throws: PostgresLocation.Invalid(reason: reason)) { try PostgresLocation.parse(url) }
    }

    @Test("hostile text never crashes the parser: it parses or is refused")
    func hostile() {
        var generator = SeededGenerator(seed: 0x5053_514c)
        let alphabet = Array("postgres:/@?&=%#[]:.-_ssl modeverify-full\u{0}\u{7f}é𝄞")
        for _ in 0..<2_000 {
            let length = Int.random(in: 0...120, using: &generator)
            let text = String((0..<length).map { _ in alphabet.randomElement(using: &generator)! })
            if let location = try? PostgresLocation.parse(text) {
                #expect(!location.host.isEmpty && !location.username.isEmpty)
            }
        }
        #expect(throws: PostgresLocation.Invalid.self) {
            try PostgresLocation.parse("postgres://rally@db.example/" + String(repeating: "?sslmode=x", count: 10_000))
        }
    }

    @Test("an sslrootcert that cannot be read is refused before any connection")
    func unreadableRoot() throws {
        let location = try PostgresLocation.parse(
            "postgres://rally@db.example/relay?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
        #expect(throws: PostgresLocation.Invalid(reason: "sslrootcert /nonexistent/ca.pem cannot be read")) {
            _ = try location.clientTLS()
        }
    }

    // MARK: Against the run's server

    /// The run's TLS setup, when it has one.
    struct Server {
        let ca: String
        let otherCA: String
        let user: String

        static var current: Server? {
            let environment = ProcessInfo.processInfo.environment
            guard let ca = environment["RALLY_TEST_POSTGRES_CA"], !ca.isEmpty,
                let otherCA = environment["RALLY_TEST_POSTGRES_OTHER_CA"], !otherCA.isEmpty,
                let user = environment["RALLY_TEST_POSTGRES_TLS_USER"], !user.isEmpty
            else { return nil }
            return Server(ca: ca, otherCA: otherCA, user: user)
        }
    }

    @Test("the run's PostgreSQL speaks TLS wherever the suite must run on it (CI)")
    func tlsWhereRequired() {
        let ci = ProcessInfo.processInfo.environment["CI"].map { !$0.isEmpty && $0 != "false" } ?? false
        #expect(!ci || Server.current != nil, "CI runs scripts/test.sh, which starts PostgreSQL with TLS")
    }

    /// Opens a store in a fresh database as the TLS-only user, through
    /// `host`, with `query` appended, and writes and reads one envelope.
    static func roundTrip(host: String = "127.0.0.1", _ query: (Server) -> String) async throws {
        guard let server = Server.current else { return }
        let database = try await PostgresTestDatabase.create()
        defer { Task { await database.drop() } }
        var components = URLComponents(string: database.url)!
        components.user = server.user
        components.host = host
        let url = components.string! + "?" + query(server)
        let store = try await PostgresRelayStore(location: try PostgresLocation.parse(url), logger: .quiet)
        do {
            let stored = try await store.appendAll([request("group/tls", "over TLS")], serverTimeMilliseconds: 1)
            #expect(stored.map(\.envelope.seq) == [1])
            let fetched = try await store.fetch(
                topic: "group/tls", after: 0, limit: 10, maxBytes: 0, nowMilliseconds: 1)
            #expect(fetched.envelopes.map(\.payload) == [Data("over TLS".utf8)])
        } catch {
            try? await store.close()
            throw error
        }
        try await store.close()
    }

    @Test(
        "verify-full with the server's CA, require, verify-ca and prefer all connect over TLS (a user the server admits only over TLS)",
        .enabled(if: Server.current != nil))
    func connectsOverTLS() async throws {
        try await Self.roundTrip(host: "localhost") { "sslmode=verify-full&sslrootcert=\($0.ca)" }
        try await Self.roundTrip { _ in "sslmode=require" }
        try await Self.roundTrip { "sslmode=verify-ca&sslrootcert=\($0.ca)" }
        try await Self.roundTrip { _ in "sslmode=prefer" }
    }

    @Test(
        "without TLS, with a CA that did not sign the server's certificate, or for a host the certificate does not name, the store does not open",
        .enabled(if: Server.current != nil))
    func refusesWhatDoesNotVerify() async throws {
        /// The error a round trip fails with, which must say why.
        func failure(host: String = "127.0.0.1", _ query: @escaping (Server) -> String) async -> String? {
            do {
                try await Self.roundTrip(host: host, query)
                Issue.record("the store opened with \(query(Server.current!))")
                return nil
            } catch let error as PostgresUnreachable {
                return error.description
            } catch {
                Issue.record("\(query(Server.current!)) failed with \(error), not PostgresUnreachable")
                return nil
            }
        }
        let plain = await failure { _ in "sslmode=disable" }
        #expect(plain?.contains("(sslmode=disable): pg_hba.conf rejects connection") == true, "\(plain ?? "")")
        for query in [
            { (server: Server) in "sslmode=verify-full&sslrootcert=\(server.otherCA)" },
            { (server: Server) in "sslmode=verify-ca&sslrootcert=\(server.otherCA)" },
        ] {
            let unknownCA = await failure(query)
            #expect(
                unknownCA?.contains(
                    "the TLS handshake failed; is the server's certificate signed by an authority in sslrootcert")
                    == true, "\(unknownCA ?? "")")
        }
        // The certificate names localhost; reached as 127.0.0.1 it does not
        // prove who answers.
        let otherHost = await failure { "sslmode=verify-full&sslrootcert=\($0.ca)" }
        #expect(
            otherHost?.contains("the server's certificate does not name 127.0.0.1; connect by a name it holds") == true,
            "\(otherHost ?? "")")
    }
}
