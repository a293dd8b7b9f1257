import Crypto
public import Foundation

/// What an HTTP signature is bound to: the relay's origin, the request
/// (method, path, query, SHA-256 of the body), a timestamp and a random
/// nonce. The relay accepts a binding within `HTTPAuthorization.window` of
/// its clock and only once (it remembers nonces for the window).
public struct HTTPRequestBinding: Sendable, Equatable {
    public var origin: String
    public var method: String
    public var path: String
    /// The raw query string without `?` ("" when there is none).
    public var query: String
    public var bodyDigest: Data
    public var millis: Int64
    public var nonce: Data

    public init(
        origin: String, method: String, path: String, query: String, body: Data, millis: Int64, nonce: Data
    ) {
        self.init(
            origin: origin, method: method, path: path, query: query, bodyDigest: Data(SHA256.hash(data: body)),
            millis: millis, nonce: nonce)
    }

    public init(
        origin: String, method: String, path: String, query: String, bodyDigest: Data, millis: Int64, nonce: Data
    ) {
        self.origin = origin
        self.method = method.uppercased()
        self.path = path
        self.query = query
        self.bodyDigest = bodyDigest
        self.millis = millis
        self.nonce = nonce
    }

    /// A fresh binding for a request about to be sent.
    public static func fresh(
        origin: String, method: String, path: String, query: String, body: Data, now: Date
    ) -> HTTPRequestBinding {
        var nonce = Data(count: HTTPAuthorization.nonceByteCount)
        var generator = SystemRandomNumberGenerator()
        for index in nonce.indices { nonce[index] = UInt8.random(in: .min ... .max, using: &generator) }
        return HTTPRequestBinding(
            origin: origin, method: method, path: path, query: query, body: body,
            millis: Int64((now.timeIntervalSince1970 * 1000).rounded()), nonce: nonce)
    }

    /// The bytes signed after the signature's domain.
    public var signedBytes: Data {
        lengthPrefixed([
            Data(origin.utf8), Data(method.utf8), Data(path.utf8), Data(query.utf8), bodyDigest,
            Data(String(millis).utf8), nonce,
        ])
    }
}

/// Authentication for the HTTP fallback, which has no challenge round trip:
/// the client signs an `HTTPRequestBinding`; the relay checks the window and
/// refuses a nonce it has seen.
///
/// `Authorization: Rally <b64url key>.<unix ms>.<b64url nonce>.<b64url signature>`
/// (identity key, domain `rally-http-auth-v2`), and for capability topics
/// `Rally-Topic-Proof: <b64url access key>.<unix ms>.<b64url nonce>.<b64url signature>`
/// (topic access key, domain `rally-topic-access-v1`).
public enum HTTPAuthorization {
    public static let scheme = "Rally"
    public static let topicProofHeader = "Rally-Topic-Proof"
    public static let nonceByteCount = 16
    /// How far a signed timestamp may be from the relay's clock.
    public static let window: TimeInterval = 300

    /// What a verified header carries; the caller checks `nonce` for replay.
    public struct Verified: Sendable, Equatable {
        public var key: Data
        public var millis: Int64
        public var nonce: Data
    }

    public static func header(identity: Identity, binding: HTTPRequestBinding) -> String {
        let signature = identity.sign(.httpAuth, binding.signedBytes)
        return "\(scheme) " + token(key: identity.signingKey.publicKey.rawRepresentation, binding, signature)
    }

    public static func topicProofHeader(access: TopicAccess, binding: HTTPRequestBinding) -> String {
        let proof = access.proof(over: SigningDomain.topicAccess.bytes(binding.signedBytes))
        return token(key: proof.accessKey, binding, proof.signature)
    }

    /// Verifies an `Authorization` header; returns the signer's inbox. The
    /// binding's `millis` and `nonce` are taken from the header.
    public static func verify(
        header: String, binding: HTTPRequestBinding, now: Date
    ) throws(RallyCryptoError) -> (inbox: InboxID, verified: Verified) {
        let prefix = scheme + " "
        guard header.hasPrefix(prefix) else { throw .malformed("authorization header") }
        let verified = try verifyToken(
            String(header.dropFirst(prefix.count)), domain: .httpAuth, binding: binding, now: now,
            what: "authorization header")
        return (InboxID(signingPublicKey: verified.key), verified)
    }

    /// Verifies a `Rally-Topic-Proof` header; returns the access key it
    /// proves (the caller checks the key against the topic's chain).
    public static func verifyTopicProof(
        header: String, binding: HTTPRequestBinding, now: Date
    ) throws(RallyCryptoError) -> Verified {
        try verifyToken(header, domain: .topicAccess, binding: binding, now: now, what: "topic proof header")
    }

    private static func token(key: Data, _ binding: HTTPRequestBinding, _ signature: Data) -> String {
        "\(key.base64URLEncoded()).\(binding.millis).\(binding.nonce.base64URLEncoded()).\(signature.base64URLEncoded())"
    }

    private static func verifyToken(
        _ token: String, domain: SigningDomain, binding: HTTPRequestBinding, now: Date, what: String
    ) throws(RallyCryptoError) -> Verified {
        guard token.utf8.count < 512 else { throw .malformed(what) }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, let keyBytes = Data(base64URLEncoded: String(parts[0])),
            !parts[1].isEmpty, parts[1].utf8.count <= 18, parts[1].utf8.allSatisfy({ (48...57).contains($0) }),
            let millis = Int64(parts[1]),
            let nonce = Data(base64URLEncoded: String(parts[2])), nonce.count == nonceByteCount,
            let signature = Data(base64URLEncoded: String(parts[3]))
        else {
            throw .malformed(what)
        }
        let signedAt = Date(timeIntervalSince1970: Double(millis) / 1000)
        guard abs(signedAt.timeIntervalSince(now)) <= window else { throw .staleTimestamp }
        let key: Curve25519.Signing.PublicKey
        do {
            key = try Curve25519.Signing.PublicKey(rawRepresentation: keyBytes)
        } catch {
            throw .invalidPublicKey("\(what) key must be 32 bytes")
        }
        var bound = binding
        bound.millis = millis
        bound.nonce = nonce
        guard key.isValidSignature(signature, for: domain.bytes(bound.signedBytes)) else {
            throw .invalidSignature(what)
        }
        return Verified(key: keyBytes, millis: millis, nonce: nonce)
    }
}
