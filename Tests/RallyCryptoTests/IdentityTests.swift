import Foundation
import RallyCrypto
import RallyWire
import Testing

@Suite("Identity and key bundles")
struct IdentityTests {
    @Test func privateKeysRestoreTheSameIdentity() throws {
        let original = Identity(displayName: "Ada", createdAt: Fixtures.created)
        let restored = try Identity(
            signingKeyBytes: original.signingKey.rawRepresentation,
            agreementKeyBytes: original.agreementKey.rawRepresentation, displayName: "Ada",
            createdAt: Fixtures.created)
        #expect(restored.inboxID == original.inboxID)
        #expect(restored.publicIdentity == original.publicIdentity)
        #expect(restored.agreementKey.publicKey.rawRepresentation == original.agreementKey.publicKey.rawRepresentation)
    }

    @Test(
        "private keys of the wrong size are invalid",
        arguments: [(31, 32), (32, 31), (33, 32), (32, 33), (0, 0), (64, 32)])
    func wrongSizePrivateKeys(signingSize: Int, agreementSize: Int) {
        #expect(throws: RallyCryptoError.invalidPrivateKey) {
            try Identity(
                signingKeyBytes: Data(repeating: 1, count: signingSize),
                agreementKeyBytes: Data(repeating: 2, count: agreementSize), displayName: "x", createdAt: Date())
        }
    }

    // MARK: Signed key bundles

    @Test func aSignedKeyBundleVerifies() throws {
        let identity = Identity(displayName: "Ada 🚀", createdAt: Fixtures.created)
        let verified = try PublicIdentity(verifying: identity.signedKeyBundle())
        #expect(verified == identity.publicIdentity)
        #expect(verified.inboxID == identity.inboxID)
        #expect(verified.displayName == "Ada 🚀")
        #expect(verified.createdAt == identity.createdAt)
        #expect(verified.wireBundle == identity.publicIdentity.wireBundle)
    }

    @Test func aBundleSurvivesTheWireInsideAFrame() throws {
        let identity = Identity(displayName: "Ada", createdAt: Fixtures.created)
        var frame = WireClientFrame()
        frame.putKeyBundle.bundle = identity.signedKeyBundle()
        let decoded = try FrameCodec.decodeClientFrame(FrameCodec.encode(frame))
        #expect(try PublicIdentity(verifying: decoded.putKeyBundle.bundle).inboxID == identity.inboxID)
    }

    @Test func aChangedDisplayNameBreaksTheSignature() throws {
        var signed = Identity(displayName: "Alice").signedKeyBundle()
        var bundle = try FrameCodec.decode(WireKeyBundle.self, from: signed.bundle, limit: .max)
        bundle.displayName = "Mallory"
        signed.bundle = FrameCodec.encode(bundle)
        #expect(throws: RallyCryptoError.invalidSignature("key bundle")) { try PublicIdentity(verifying: signed) }
    }

    @Test func everyTamperedBundleByteIsRejected() {
        let signed = Identity(displayName: "Alice", createdAt: Fixtures.created).signedKeyBundle()
        for index in signed.bundle.indices {
            for mask: UInt8 in [0x01, 0x80, 0xFF] {
                var tampered = signed
                tampered.bundle[index] ^= mask
                let result = outcome { () throws(RallyCryptoError) in try PublicIdentity(verifying: tampered) }
                switch result {
                case .success:
                    Issue.record("byte \(index) ^ \(mask) verified")
                case .failure(.invalidSignature("key bundle")), .failure(.malformed), .failure(.invalidPublicKey):
                    break
                case .failure(let other):
                    Issue.record("byte \(index) ^ \(mask): unexpected \(other)")
                }
            }
        }
    }

    @Test func aTamperedSignatureIsRejected() {
        let signed = Identity(displayName: "Alice").signedKeyBundle()
        for index in [0, 31, 32, 63] {
            var tampered = signed
            tampered.signature[index] ^= 0x01
            #expect(throws: RallyCryptoError.invalidSignature("key bundle")) {
                try PublicIdentity(verifying: tampered)
            }
        }
        for signature in [Data(), Data(repeating: 0, count: 64), signed.signature.dropLast(), signed.signature + [0]] {
            var tampered = signed
            tampered.signature = signature
            #expect(throws: RallyCryptoError.invalidSignature("key bundle")) {
                try PublicIdentity(verifying: tampered)
            }
        }
    }

    @Test func swappingInAnotherSigningKeyIsRejected() throws {
        let victim = Identity(displayName: "Alice")
        let attacker = Identity(displayName: "Mallory")
        var signed = attacker.signedKeyBundle()
        var bundle = try FrameCodec.decode(WireKeyBundle.self, from: signed.bundle, limit: .max)
        bundle.signingPublicKey = victim.signingKey.publicKey.rawRepresentation
        signed.bundle = FrameCodec.encode(bundle)
        #expect(throws: RallyCryptoError.invalidSignature("key bundle")) { try PublicIdentity(verifying: signed) }
    }

    @Test func swappingInAnotherAgreementKeyIsRejected() throws {
        let victim = Identity(displayName: "Alice")
        let attacker = Identity(displayName: "Mallory")
        var signed = victim.signedKeyBundle()
        var bundle = try FrameCodec.decode(WireKeyBundle.self, from: signed.bundle, limit: .max)
        bundle.agreementPublicKey = attacker.agreementKey.publicKey.rawRepresentation
        signed.bundle = FrameCodec.encode(bundle)
        #expect(throws: RallyCryptoError.invalidSignature("key bundle")) { try PublicIdentity(verifying: signed) }
    }

    @Test func aSignatureFromAnotherBundleIsRejected() {
        var signed = Identity(displayName: "Alice").signedKeyBundle()
        signed.signature = Identity(displayName: "Mallory").signedKeyBundle().signature
        #expect(throws: RallyCryptoError.invalidSignature("key bundle")) { try PublicIdentity(verifying: signed) }
    }

    @Test func aSignatureForAnotherPurposeIsRejected() {
        let identity = Identity(displayName: "Alice")
        var signed = identity.signedKeyBundle()
        signed.signature = identity.sign(.message, signed.bundle)
        #expect(throws: RallyCryptoError.invalidSignature("key bundle")) { try PublicIdentity(verifying: signed) }
    }

    @Test func anOversizedBundleIsTooLarge() {
        var signed = Identity(displayName: "Alice").signedKeyBundle()
        signed.bundle = Data(repeating: 0, count: WireLimits.maxKeyBundleBytes + 1)
        #expect(
            throws: RallyCryptoError.tooLarge(
                size: WireLimits.maxKeyBundleBytes + 1, limit: WireLimits.maxKeyBundleBytes)
        ) {
            try PublicIdentity(verifying: signed)
        }
    }

    @Test(
        "garbage bundles are malformed",
        arguments: [Data(), Data([0xFF]), Data(repeating: 0xFF, count: 40), Data([0x0A, 0x20])])
    func garbageBundle(_ bytes: Data) {
        var signed = WireSignedKeyBundle()
        signed.bundle = bytes
        signed.signature = Data(repeating: 0, count: 64)
        #expect(throws: RallyCryptoError.malformed("key bundle")) { try PublicIdentity(verifying: signed) }
    }

    @Test func seededRandomBundlesNeverVerify() {
        var generator = SeededGenerator(seed: 0xB0B)
        for _ in 0..<500 {
            var signed = WireSignedKeyBundle()
            signed.bundle = generator.bytes(Int.random(in: 0...200, using: &generator))
            signed.signature = generator.bytes(64)
            #expect(outcome { () throws(RallyCryptoError) in try PublicIdentity(verifying: signed) }.failure != nil)
        }
    }

    @Test(
        "wrong key sizes in a bundle are invalid public keys",
        arguments: [(31, 32), (32, 31), (0, 32), (32, 0), (33, 32), (32, 64)])
    func wrongKeySizes(signingSize: Int, agreementSize: Int) {
        var bundle = WireKeyBundle()
        bundle.signingPublicKey = Data(repeating: 3, count: signingSize)
        bundle.agreementPublicKey = Data(repeating: 4, count: agreementSize)
        bundle.displayName = "x"
        let expected = RallyCryptoError.invalidPublicKey("key bundle keys must be 32 bytes each")
        #expect(throws: expected) { try PublicIdentity(wire: bundle) }
        var signed = WireSignedKeyBundle()
        signed.bundle = FrameCodec.encode(bundle)
        signed.signature = Data(repeating: 0, count: 64)
        #expect(throws: expected) { try PublicIdentity(verifying: signed) }
    }

    @Test func theKeysMadeOnUseAreTheBundles() throws {
        let bundle = Identity(displayName: "Ada").publicIdentity.wireBundle
        let identity = try PublicIdentity(wire: bundle)
        #expect(identity.signingKey.rawRepresentation == bundle.signingPublicKey)
        #expect(identity.agreementKey.rawRepresentation == bundle.agreementPublicKey)
    }

    /// An identity keeps its keys' bytes and makes the CryptoKit keys on
    /// use, with a `try!` that holds only if every 32 bytes make a key:
    /// bytes no point decodes from (all zero, all ones) included.
    @Test(
        "any 32 bytes in a bundle make keys",
        arguments: [Data(repeating: 0, count: 32), Data(repeating: 0xFF, count: 32), Data((0..<32).map { UInt8($0) })])
    func anyThirtyTwoBytesMakeKeys(bytes: Data) throws {
        var bundle = Identity(displayName: "Ada").publicIdentity.wireBundle
        bundle.signingPublicKey = bytes
        bundle.agreementPublicKey = bytes
        let odd = try PublicIdentity(wire: bundle)
        #expect(odd.signingKeyBytes == bytes && odd.signingKey.rawRepresentation == bytes)
        #expect(odd.agreementKeyBytes == bytes && odd.agreementKey.rawRepresentation == bytes)
        #expect(!odd.isValidSignature(Data(repeating: 1, count: 64), domain: .keyBundle, payload: Data([1])))
    }

    @Test func theDisplayNameLimitIsEnforcedInBytes() throws {
        let atLimit = String(repeating: "é", count: WireLimits.maxDisplayNameBytes / 2)
        #expect(try PublicIdentity(verifying: Identity(displayName: atLimit).signedKeyBundle()).displayName == atLimit)
        let overLimit = atLimit + "a"
        #expect(throws: RallyCryptoError.malformed("key bundle: display name longer than 128 bytes")) {
            try PublicIdentity(verifying: Identity(displayName: overLimit).signedKeyBundle())
        }
    }

    @Test func publicIdentityEqualityIgnoresCreationTimeButNotKeysOrName() {
        let identity = Identity(displayName: "Ada", createdAt: Fixtures.created)
        let key = identity.signingKey.publicKey
        let agreement = identity.agreementKey.publicKey
        let same = PublicIdentity(signingKey: key, agreementKey: agreement, displayName: "Ada", createdAt: Date())
        #expect(same == identity.publicIdentity)
        #expect(same.hashValue == identity.publicIdentity.hashValue)
        let renamed = PublicIdentity(signingKey: key, agreementKey: agreement, displayName: "Bob", createdAt: Date())
        #expect(renamed != identity.publicIdentity)
        let other = Identity(displayName: "Ada").publicIdentity
        #expect(other != identity.publicIdentity)
    }

    // MARK: Signing domains

    @Test func signaturesDoNotCrossDomains() {
        let identity = Identity(displayName: "a")
        let payload = Data("same bytes".utf8)
        for domain in SigningDomain.allCases {
            let signature = identity.sign(domain, payload)
            for other in SigningDomain.allCases {
                let valid = identity.publicIdentity.isValidSignature(signature, domain: other, payload: payload)
                #expect(valid == (domain == other), "\(domain) signature checked as \(other)")
            }
        }
    }

    @Test func domainPrefixesAreDistinctAndNoneIsAPrefixOfAnother() {
        let prefixes = SigningDomain.allCases.map(\.rawValue)
        for a in prefixes {
            for b in prefixes where a != b {
                #expect(!a.hasPrefix(b), "\(b) is a prefix of \(a)")
            }
        }
        #expect(SigningDomain.message.bytes(Data([1, 2])) == Data("rally-message-v1".utf8) + [1, 2])
    }
}

@Suite("RelayAuthentication")
struct RelayAuthenticationTests {
    let identity = Identity(displayName: "a")
    let nonce = Data((0..<32).map { UInt8($0) })
    let origin = "https://relay.example"

    @Test func theRightNonceAuthenticates() throws {
        let auth = identity.authenticate(challengeNonce: nonce, origin: origin)
        #expect(auth.signingPublicKey == identity.signingKey.publicKey.rawRepresentation)
        #expect(try RelayAuthentication.verify(auth, challengeNonce: nonce, origins: [origin]) == identity.inboxID)
    }

    @Test func aWrongNonceFails() {
        let auth = identity.authenticate(challengeNonce: nonce, origin: origin)
        var other = nonce
        other[0] ^= 1
        for wrong in [other, Data(), nonce.dropLast(), nonce + [0]] {
            #expect(throws: RallyCryptoError.invalidSignature("authentication challenge")) {
                try RelayAuthentication.verify(auth, challengeNonce: wrong, origins: [origin])
            }
        }
    }

    @Test func aSignatureForAnotherOriginFails() throws {
        let auth = identity.authenticate(challengeNonce: nonce, origin: "https://relay.evil")
        #expect(throws: RallyCryptoError.invalidSignature("authentication challenge")) {
            try RelayAuthentication.verify(auth, challengeNonce: nonce, origins: [origin, "http://127.0.0.1:8080"])
        }
        #expect(
            try RelayAuthentication.verify(auth, challengeNonce: nonce, origins: [origin, "https://relay.evil"])
                == identity.inboxID)
    }

    @Test func originsAreNormalized() {
        #expect(RelayOrigin.of(URL(string: "wss://Relay.Example/v1/ws")!) == "https://relay.example")
        #expect(RelayOrigin.of(URL(string: "https://relay.example:443")!) == "https://relay.example")
        #expect(RelayOrigin.of(URL(string: "https://relay.example:8443/x")!) == "https://relay.example:8443")
        #expect(RelayOrigin.of(URL(string: "ws://127.0.0.1:9000/v1/ws")!) == "http://127.0.0.1:9000")
        #expect(RelayOrigin.of(URL(string: "http://localhost")!) == "http://localhost:80")
        #expect(RelayOrigin.of(URL(string: "ftp://relay.example")!) == nil)
    }

    @Test func anotherIdentitysKeyFails() {
        var auth = identity.authenticate(challengeNonce: nonce, origin: origin)
        auth.signingPublicKey = Identity(displayName: "b").signingKey.publicKey.rawRepresentation
        #expect(throws: RallyCryptoError.invalidSignature("authentication challenge")) {
            try RelayAuthentication.verify(auth, challengeNonce: nonce, origins: [origin])
        }
    }

    @Test func aSignatureFromAnotherDomainFails() {
        var auth = identity.authenticate(challengeNonce: nonce, origin: origin)
        auth.signature = identity.sign(.httpAuth, nonce)
        #expect(throws: RallyCryptoError.invalidSignature("authentication challenge")) {
            try RelayAuthentication.verify(auth, challengeNonce: nonce, origins: [origin])
        }
    }

    @Test func aTamperedOrMissingSignatureFails() {
        var auth = identity.authenticate(challengeNonce: nonce, origin: origin)
        auth.signature[10] ^= 0x40
        #expect(throws: RallyCryptoError.invalidSignature("authentication challenge")) {
            try RelayAuthentication.verify(auth, challengeNonce: nonce, origins: [origin])
        }
        auth.signature = Data()
        #expect(throws: RallyCryptoError.invalidSignature("authentication challenge")) {
            try RelayAuthentication.verify(auth, challengeNonce: nonce, origins: [origin])
        }
    }

    @Test("keys of the wrong length fail", arguments: [0, 1, 31, 33, 64])
    func shortOrLongKey(length: Int) {
        var auth = identity.authenticate(challengeNonce: nonce, origin: origin)
        auth.signingPublicKey = Data(identity.signingKey.publicKey.rawRepresentation.prefix(length))
        if length > 32 { auth.signingPublicKey += Data(repeating: 0, count: length - 32) }
        #expect(auth.signingPublicKey.count == length)
        #expect(throws: RallyCryptoError.invalidPublicKey("authentication key must be 32 bytes")) {
            try RelayAuthentication.verify(auth, challengeNonce: nonce, origins: [origin])
        }
    }
}
