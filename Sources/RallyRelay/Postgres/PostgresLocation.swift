import Foundation
import NIOSSL
import PostgresNIO

/// Where a relay node finds its PostgreSQL, parsed from
/// `postgres://user:password@host:port/database?sslmode=…&sslrootcert=…`
/// (ADR 0021, ADR 0023). `sslmode` and `sslrootcert` mean what they mean to
/// libpq, so a URL that works with `psql` works here.
public struct PostgresLocation: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String?
    public var tlsMode: TLSMode
    /// PEM file of the certificate authorities to trust (`sslrootcert`);
    /// nil: the system's.
    public var rootCertificatePath: String?

    /// libpq's `sslmode` values, which the relay honours the same way.
    public enum TLSMode: String, Sendable, CaseIterable {
        /// Never TLS.
        case disable
        /// TLS if the server offers it, unverified; plain text otherwise
        /// (libpq's default, and the relay's).
        case prefer
        /// TLS or no connection; the certificate is checked only against
        /// `sslrootcert` when one is given (as libpq does).
        case require
        /// TLS with a certificate a trusted authority signed, for any host.
        case verifyCA = "verify-ca"
        /// TLS with a certificate a trusted authority signed for this host.
        case verifyFull = "verify-full"
    }

    /// Why a `--postgres` URL was refused.
    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public let reason: String
        public var description: String { reason }
    }

    /// The query parameters a URL may carry; any other is refused, so a
    /// misspelt `sslmode` cannot silently turn TLS off.
    public static let parameters = ["sslmode", "sslrootcert"]

    private init(host: String, port: Int, username: String) {
        self.host = host
        self.port = port
        self.username = username
        self.tlsMode = .prefer
    }

    public static func parse(_ text: String) throws(Invalid) -> PostgresLocation {
        guard let components = URLComponents(string: text),
            ["postgres", "postgresql"].contains(components.scheme?.lowercased() ?? "")
        else { throw Invalid(reason: "not a postgres:// URL") }
        guard let host = components.host, !host.isEmpty else { throw Invalid(reason: "the URL names no host") }
        guard let username = components.user, !username.isEmpty else {
            throw Invalid(reason: "the URL names no user (postgres://USER@host/database)")
        }
        var location = PostgresLocation(
            host: host, port: components.port ?? 5432, username: username.removingPercentEncoding ?? username)
        location.password = components.password.map { $0.removingPercentEncoding ?? $0 }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        location.database = path.isEmpty ? nil : path
        var seen: Set<String> = []
        for item in components.queryItems ?? [] {
            guard Self.parameters.contains(item.name) else {
                throw Invalid(
                    reason:
                        "unsupported parameter \"\(item.name)\" (supported: \(Self.parameters.joined(separator: ", ")))"
                )
            }
            guard seen.insert(item.name).inserted else { throw Invalid(reason: "\"\(item.name)\" is given twice") }
            let value = item.value ?? ""
            switch item.name {
            case "sslmode":
                guard let mode = TLSMode(rawValue: value) else {
                    throw Invalid(
                        reason:
                            "sslmode \"\(value)\" is not one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))"
                    )
                }
                location.tlsMode = mode
            default:
                guard !value.isEmpty else { throw Invalid(reason: "sslrootcert names no file") }
                location.rootCertificatePath = value
            }
        }
        return location
    }

    /// The TLS configuration `sslmode` and `sslrootcert` ask for; nil
    /// for `disable`.
    func tlsConfiguration() throws(Invalid) -> TLSConfiguration? {
        guard tlsMode != .disable else { return nil }
        var tls = TLSConfiguration.makeClientConfiguration()
        if let rootCertificatePath {
            guard FileManager.default.isReadableFile(atPath: rootCertificatePath) else {
                throw Invalid(reason: "sslrootcert \(rootCertificatePath) cannot be read")
            }
            tls.trustRoots = .file(rootCertificatePath)
        }
        tls.certificateVerification =
            switch tlsMode {
            case .disable, .prefer: .none
            case .require: rootCertificatePath == nil ? .none : .noHostnameVerification
            case .verifyCA: .noHostnameVerification
            case .verifyFull: .fullVerification
            }
        return tls
    }

    /// PostgresNIO's pooled client's TLS setting for this location.
    func clientTLS() throws(Invalid) -> PostgresClient.Configuration.TLS {
        guard let tls = try tlsConfiguration() else { return .disable }
        return tlsMode == .prefer ? .prefer(tls) : .require(tls)
    }

    /// The same for one connection (the check at startup).
    func connectionTLS() throws -> PostgresConnection.Configuration.TLS {
        guard let tls = try tlsConfiguration() else { return .disable }
        let context = try NIOSSLContext(configuration: tls)
        return tlsMode == .prefer ? .prefer(context) : .require(context)
    }
}

/// A relay node could not reach, or was not let into, its PostgreSQL: said
/// at startup, with the server's or the TLS layer's reason, instead of a
/// node that waits for a database it will never get.
public struct PostgresUnreachable: Error, CustomStringConvertible {
    public let description: String

    init(_ location: PostgresLocation, _ error: any Error) {
        var reason = "\(error)"
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] {
                reason = message
            } else if let underlying = error.underlying {
                reason = Self.explain(underlying, location)
            } else {
                reason = "\(error.code)"
            }
        }
        description =
            "could not connect to PostgreSQL at \(location.host):\(location.port) as \(location.username) "
            + "(sslmode=\(location.tlsMode.rawValue)): \(reason)"
    }

    /// TLS failures in the words of what to change.
    private static func explain(_ error: any Error, _ location: PostgresLocation) -> String {
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return "the server's certificate does not name \(location.host); connect by a name it holds, "
                + "or use sslmode=verify-ca (\(extra))"
        }
        if case .handshakeFailed? = error as? NIOSSLError {
            let roots = location.rootCertificatePath.map { "sslrootcert \($0)" } ?? "the system's trust roots"
            return
                "the TLS handshake failed; is the server's certificate signed by an authority in \(roots)? (\(error))"
        }
        return "\(error)"
    }
}
