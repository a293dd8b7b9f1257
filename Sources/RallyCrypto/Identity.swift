public import Crypto
public import Foundation
public import RallyWire

/// A private identity: an Ed25519 signing key and an X25519 key-agreement
/// key. Only ever held by its owner's client.
public struct Identity: Sendable {
    public let signingKey: Curve25519.Signing.PrivateKey
    public let agreementKey: Curve25519.KeyAgreement.PrivateKey
    public let displayName: String
    public let createdAt: Date

    public init(displayName: String, createdAt: Date = Date()) {
        self.signingKey = Curve25519.Signing.PrivateKey()
        self.agreementKey = Curve25519.KeyAgreement.PrivateKey()
        self.displayName = displayName
        self.createdAt = createdAt
    }

    public init(
        signingKeyBytes: Data, agreementKeyBytes: Data, displayName: String, createdAt: Date
    ) throws(RallyCryptoError) {
        do {
            signingKey = try Curve25519.Signing.PrivateKey(rawRepresentation: signingKeyBytes)
            agreementKey = try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: agreementKeyBytes)
        } catch {
            throw .invalidPrivateKey
        }
        self.displayName = displayName
        self.createdAt = createdAt
    }

    public var inboxID: InboxID { InboxID(signingPublicKey: signingKey.publicKey.rawRepresentation) }

    public var publicIdentity: PublicIdentity {
        PublicIdentity(
            signingKey: signingKey.publicKey, agreementKey: agreementKey.publicKey,
            displayName: displayName, createdAt: createdAt)
    }

    public func sign(_ domain: SigningDomain, _ payload: Data) -> Data {
        // Ed25519 signing only fails on a broken key, which the initializers
        // rule out.
        (try? signingKey.signature(for: domain.bytes(payload))) ?? Data()
    }

    /// The relay's `Authenticate` answer to a challenge nonce, bound to the
    /// relay's origin (`RelayOrigin`) so it is worthless on another relay.
    public func authenticate(challengeNonce: Data, origin: String) -> WireAuthenticate {
        var auth = WireAuthenticate()
        auth.signingPublicKey = signingKey.publicKey.rawRepresentation
        auth.signature = sign(
            .relayAuth, RelayAuthentication.signedBytes(origin: origin, challengeNonce: challengeNonce))
        return auth
    }

    /// The signed key bundle this identity publishes on the relay.
    public func signedKeyBundle() -> WireSignedKeyBundle {
        let bundleBytes = FrameCodec.encode(publicIdentity.wireBundle)
        var signed = WireSignedKeyBundle()
        signed.bundle = bundleBytes
        signed.signature = sign(.keyBundle, bundleBytes)
        return signed
    }
}

/// The public half of an identity, as published in its key bundle.
///
/// It keeps the keys' 32 bytes each and makes the CryptoKit keys when they
/// are asked for: a group's state holds one identity per member, and most
/// of them are only compared and re-encoded, never used to verify or seal.
public struct PublicIdentity: Sendable, Hashable {
    public static let keyByteCount = 32

    /// The Ed25519 and X25519 public keys' raw bytes, 32 each.
    public let signingKeyBytes: Data
    public let agreementKeyBytes: Data
    public let displayName: String
    public let createdAt: Date
    public let inboxID: InboxID

    public init(
        signingKey: Curve25519.Signing.PublicKey, agreementKey: Curve25519.KeyAgreement.PublicKey,
        displayName: String, createdAt: Date
    ) {
        self.init(
            signingKeyBytes: signingKey.rawRepresentation, agreementKeyBytes: agreementKey.rawRepresentation,
            displayName: displayName, createdAt: createdAt)
    }

    /// From key bytes whose sizes are checked: the inbox id is hashed from
    /// the signing key's.
    private init(signingKeyBytes: Data, agreementKeyBytes: Data, displayName: String, createdAt: Date) {
        self.signingKeyBytes = signingKeyBytes
        self.agreementKeyBytes = agreementKeyBytes
        self.displayName = displayName
        self.createdAt = createdAt
        self.inboxID = InboxID(signingPublicKey: signingKeyBytes)
    }

    /// Reads a key bundle received from anywhere: checks key sizes and the
    /// name length. It does not check a signature (a bare bundle has none).
    public init(wire bundle: WireKeyBundle) throws(RallyCryptoError) {
        guard bundle.displayName.utf8.count <= WireLimits.maxDisplayNameBytes else {
            throw .malformed("key bundle: display name longer than \(WireLimits.maxDisplayNameBytes) bytes")
        }
        // All CryptoKit asks of a raw Curve25519 public key is its size
        // (any 32 bytes are a key), so checking it here is the whole check.
        guard bundle.signingPublicKey.count == Self.keyByteCount,
            bundle.agreementPublicKey.count == Self.keyByteCount
        else {
            throw .invalidPublicKey("key bundle keys must be 32 bytes each")
        }
        self.init(
            signingKeyBytes: bundle.signingPublicKey, agreementKeyBytes: bundle.agreementPublicKey,
            displayName: bundle.displayName, createdAt: Date(timeIntervalSince1970: Double(bundle.createdAtMs) / 1000))
    }

    /// Verifies a signed key bundle: size, structure, keys and the bundle's
    /// self-signature.
    public init(verifying signed: WireSignedKeyBundle) throws(RallyCryptoError) {
        guard signed.bundle.count <= WireLimits.maxKeyBundleBytes else {
            throw .tooLarge(size: signed.bundle.count, limit: WireLimits.maxKeyBundleBytes)
        }
        let bundle: WireKeyBundle
        do {
            bundle = try FrameCodec.decode(
                WireKeyBundle.self, from: signed.bundle, limit: WireLimits.maxKeyBundleBytes)
        } catch {
            throw .malformed("key bundle")
        }
        try self.init(wire: bundle)
        guard signingKey.verifies(signed.signature, for: SigningDomain.keyBundle.bytes(signed.bundle))
        else {
            throw .invalidSignature("key bundle")
        }
    }

    /// The Ed25519 key, for verifying. Its bytes were checked to be 32 when
    /// this identity was made, the only thing that makes the init throw.
    public var signingKey: Curve25519.Signing.PublicKey {
        try! Curve25519.Signing.PublicKey(rawRepresentation: signingKeyBytes)
    }

    /// The X25519 key, for sealing to this identity (32 bytes, checked).
    public var agreementKey: Curve25519.KeyAgreement.PublicKey {
        try! Curve25519.KeyAgreement.PublicKey(rawRepresentation: agreementKeyBytes)
    }

    public var wireBundle: WireKeyBundle {
        var bundle = WireKeyBundle()
        bundle.signingPublicKey = signingKeyBytes
        bundle.agreementPublicKey = agreementKeyBytes
        bundle.displayName = displayName
        bundle.createdAtMs = Int64((createdAt.timeIntervalSince1970 * 1000).rounded())
        return bundle
    }

    /// Same keys, whatever the display name: what membership checks compare,
    /// so a renamed member is still the same member.
    public func hasSameKeys(as other: PublicIdentity) -> Bool {
        signingKeyBytes == other.signingKeyBytes && agreementKeyBytes == other.agreementKeyBytes
    }

    public func isValidSignature(_ signature: Data, domain: SigningDomain, payload: Data) -> Bool {
        SignatureVerifier.shared.isValidSignature(signature, for: domain.bytes(payload), byKeyBytes: signingKeyBytes) {
            signingKey
        }
    }

    public static func == (lhs: PublicIdentity, rhs: PublicIdentity) -> Bool {
        lhs.signingKeyBytes == rhs.signingKeyBytes && lhs.agreementKeyBytes == rhs.agreementKeyBytes
            && lhs.displayName == rhs.displayName
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(signingKeyBytes)
    }
}

/// The relay side of authentication.
public enum RelayAuthentication {
    /// What an `Authenticate` signature covers (after the domain): the
    /// relay's origin and the challenge nonce, each length-prefixed.
    public static func signedBytes(origin: String, challengeNonce: Data) -> Data {
        lengthPrefixed([Data(origin.utf8), challengeNonce])
    }

    /// Checks an `Authenticate` frame against the nonce the relay sent and
    /// any of the origins the relay answers to, and returns the inbox id it
    /// proves ownership of.
    public static func verify(
        _ auth: WireAuthenticate, challengeNonce: Data, origins: [String]
    ) throws(RallyCryptoError) -> InboxID {
        let key: Curve25519.Signing.PublicKey
        do {
            key = try Curve25519.Signing.PublicKey(rawRepresentation: auth.signingPublicKey)
        } catch {
            throw .invalidPublicKey("authentication key must be 32 bytes")
        }
        let valid = origins.contains { origin in
            key.isValidSignature(
                auth.signature,
                for: SigningDomain.relayAuth.bytes(signedBytes(origin: origin, challengeNonce: challengeNonce)))
        }
        guard valid else {
            throw .invalidSignature("authentication challenge")
        }
        return InboxID(signingPublicKey: auth.signingPublicKey)
    }
}
