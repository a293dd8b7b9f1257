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
public struct PublicIdentity: Sendable, Hashable {
    public let signingKey: Curve25519.Signing.PublicKey
    public let agreementKey: Curve25519.KeyAgreement.PublicKey
    public let displayName: String
    public let createdAt: Date
    public let inboxID: InboxID

    public init(
        signingKey: Curve25519.Signing.PublicKey, agreementKey: Curve25519.KeyAgreement.PublicKey,
        displayName: String, createdAt: Date
    ) {
        self.init(
            signingKey: signingKey, signingKeyBytes: signingKey.rawRepresentation, agreementKey: agreementKey,
            displayName: displayName, createdAt: createdAt)
    }

    /// For keys read from bytes: the inbox id is hashed from those bytes,
    /// without copying them back out of the key (a group's state decodes
    /// one identity per member).
    private init(
        signingKey: Curve25519.Signing.PublicKey, signingKeyBytes: Data,
        agreementKey: Curve25519.KeyAgreement.PublicKey, displayName: String, createdAt: Date
    ) {
        self.signingKey = signingKey
        self.agreementKey = agreementKey
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
        do {
            let signing = try Curve25519.Signing.PublicKey(rawRepresentation: bundle.signingPublicKey)
            let agreement = try Curve25519.KeyAgreement.PublicKey(
                rawRepresentation: bundle.agreementPublicKey)
            self.init(
                signingKey: signing, signingKeyBytes: bundle.signingPublicKey, agreementKey: agreement,
                displayName: bundle.displayName,
                createdAt: Date(timeIntervalSince1970: Double(bundle.createdAtMs) / 1000))
        } catch {
            throw .invalidPublicKey("key bundle keys must be 32 bytes each")
        }
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

    public var wireBundle: WireKeyBundle {
        var bundle = WireKeyBundle()
        bundle.signingPublicKey = signingKey.rawRepresentation
        bundle.agreementPublicKey = agreementKey.rawRepresentation
        bundle.displayName = displayName
        bundle.createdAtMs = Int64((createdAt.timeIntervalSince1970 * 1000).rounded())
        return bundle
    }

    /// Same keys, whatever the display name: what membership checks compare,
    /// so a renamed member is still the same member.
    public func hasSameKeys(as other: PublicIdentity) -> Bool {
        signingKey.rawRepresentation == other.signingKey.rawRepresentation
            && agreementKey.rawRepresentation == other.agreementKey.rawRepresentation
    }

    public func isValidSignature(_ signature: Data, domain: SigningDomain, payload: Data) -> Bool {
        signingKey.verifies(signature, for: domain.bytes(payload))
    }

    public static func == (lhs: PublicIdentity, rhs: PublicIdentity) -> Bool {
        lhs.signingKey.rawRepresentation == rhs.signingKey.rawRepresentation
            && lhs.agreementKey.rawRepresentation == rhs.agreementKey.rawRepresentation
            && lhs.displayName == rhs.displayName
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(signingKey.rawRepresentation)
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
