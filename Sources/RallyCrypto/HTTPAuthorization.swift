import Crypto
import Foundation

/// Authentication for the HTTP fallback, which has no challenge round trip:
/// the client signs the method, path and a timestamp, and the relay accepts
/// the signature within a window around its own clock.
///
/// Header: `Authorization: Rally <base64url key>.<unix ms>.<base64url signature>`
public enum HTTPAuthorization {
    public static let scheme = "Rally"
    /// How far a signed timestamp may be from the relay's clock.
    public static let window: TimeInterval = 300

    public static func header(identity: Identity, method: String, path: String, now: Date) -> String {
        let millis = Int64((now.timeIntervalSince1970 * 1000).rounded())
        let signature = identity.sign(.httpAuth, signedBytes(method: method, path: path, millis: millis))
        let key = identity.signingKey.publicKey.rawRepresentation
        return "\(scheme) \(key.base64URLEncoded()).\(millis).\(signature.base64URLEncoded())"
    }

    public static func verify(
        header: String, method: String, path: String, now: Date
    ) throws(RallyCryptoError)
        -> InboxID
    {
        let prefix = scheme + " "
        guard header.hasPrefix(prefix), header.utf8.count < 512 else {
            throw .malformed("authorization header")
        }
        let parts = header.dropFirst(prefix.count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let keyBytes = Data(base64URLEncoded: String(parts[0])),
            !parts[1].isEmpty, parts[1].utf8.allSatisfy({ (48...57).contains($0) }), let millis = Int64(parts[1]),
            let signature = Data(base64URLEncoded: String(parts[2]))
        else {
            throw .malformed("authorization header")
        }
        let signedAt = Date(timeIntervalSince1970: Double(millis) / 1000)
        guard abs(signedAt.timeIntervalSince(now)) <= window else { throw .staleTimestamp }
        let key: Curve25519.Signing.PublicKey
        do {
            key = try Curve25519.Signing.PublicKey(rawRepresentation: keyBytes)
        } catch {
            throw .invalidPublicKey("authorization key must be 32 bytes")
        }
        let payload = SigningDomain.httpAuth.bytes(signedBytes(method: method, path: path, millis: millis))
        guard key.isValidSignature(signature, for: payload) else {
            throw .invalidSignature("authorization header")
        }
        return InboxID(signingPublicKey: keyBytes)
    }

    private static func signedBytes(method: String, path: String, millis: Int64) -> Data {
        Data("\(method.uppercased())\n\(path)\n\(millis)".utf8)
    }
}

extension Data {
    public func base64URLEncoded() -> String {
        base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    public init?(base64URLEncoded text: String) {
        guard text.utf8.allSatisfy({ $0 != UInt8(ascii: "=") && $0 != UInt8(ascii: "+") && $0 != UInt8(ascii: "/") })
        else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        let remainder = base64.utf8.count % 4
        if remainder == 1 { return nil }
        if remainder > 0 { base64 += String(repeating: "=", count: 4 - remainder) }
        guard let data = Data(base64Encoded: base64) else { return nil }
        self = data
    }
}
