public import Crypto
public import Foundation

/// Everything a group's admins derive from its 32-byte invite seed: the
/// invite identity (its own inbox, where join requests arrive, and the
/// signer of join errors and welcome proofs) and the key that encrypts the
/// group reference inside invites. Only admins hold the seed, so only they
/// can read join requests, make a valid invite or answer one.
public struct InviteKeys: Sendable {
    public static let seedByteCount = 32
    static let signingInfo = Data("rally-invite-identity-signing-v1".utf8)
    static let agreementInfo = Data("rally-invite-identity-agreement-v1".utf8)
    static let referenceInfo = Data("rally-invite-ref-v1".utf8)
    static let welcomeProofDomain = Data("rally-invite-welcome-v1".utf8)
    /// The display name every invite identity publishes.
    public static let displayName = "Group invites"

    public let seed: SymmetricKey
    public let identity: Identity
    let referenceKey: SymmetricKey

    public init(seed: SymmetricKey) throws(RallyCryptoError) {
        guard seed.bitCount == Self.seedByteCount * 8 else { throw .malformed("invite seed") }
        self.seed = seed
        func derive(_ info: Data) -> Data {
            HKDF<SHA256>.deriveKey(inputKeyMaterial: seed, info: info, outputByteCount: 32)
                .withUnsafeBytes { Data($0) }
        }
        identity = try Identity(
            signingKeyBytes: derive(Self.signingInfo), agreementKeyBytes: derive(Self.agreementInfo),
            displayName: Self.displayName, createdAt: Date(timeIntervalSince1970: 0))
        referenceKey = HKDF<SHA256>.deriveKey(inputKeyMaterial: seed, info: Self.referenceInfo, outputByteCount: 32)
    }

    public static func newSeed() -> SymmetricKey { SymmetricKey(size: .bits256) }

    public var seedBytes: Data { seed.withUnsafeBytes { Data($0) } }

    static func referenceAAD(tag: Data, issuer: InboxID) -> Data {
        referenceInfo + tag + Data(issuer.rawValue.utf8)
    }

    /// Encrypts the group id for an invite issued by `issuer` under `tag`.
    public func sealReference(groupID: String, tag: Data, issuer: InboxID) -> Data {
        // ChaChaPoly with a random nonce only fails on a wrong key size,
        // which the initializer rules out.
        let box = try! ChaChaPoly.seal(
            Data(groupID.utf8), using: referenceKey, authenticating: Self.referenceAAD(tag: tag, issuer: issuer))
        return box.combined
    }

    /// The group id inside an invite's reference, or nil when the reference
    /// was not made with this seed for this tag and issuer (forged).
    public func openReference(_ reference: Data, tag: Data, issuer: InboxID) -> String? {
        guard reference.count <= 256,
            let box = try? ChaChaPoly.SealedBox(combined: reference),
            let plain = try? ChaChaPoly.open(
                box, using: referenceKey, authenticating: Self.referenceAAD(tag: tag, issuer: issuer))
        else { return nil }
        return String(data: plain, encoding: .utf8)
    }

    static func welcomeProofPayload(tag: Data, groupID: String, newcomer: InboxID, requestID: Data) -> Data {
        welcomeProofDomain + tag + Data("|\(groupID)|\(newcomer.rawValue)|".utf8) + requestID
    }

    /// Signed by the invite identity: the welcome to `newcomer` into
    /// `groupID` answers the join request `requestID`, made with an invite
    /// of `tag`. A welcome for an older request cannot be replayed.
    public func welcomeProof(tag: Data, groupID: String, newcomer: InboxID, requestID: Data) -> Data {
        (try? identity.signingKey.signature(
            for: Self.welcomeProofPayload(tag: tag, groupID: groupID, newcomer: newcomer, requestID: requestID)))
            ?? Data()
    }

    public static func isValidWelcomeProof(
        _ proof: Data, by inviteIdentity: PublicIdentity, tag: Data, groupID: String, newcomer: InboxID,
        requestID: Data
    ) -> Bool {
        inviteIdentity.signingKey.verifies(
            proof, for: welcomeProofPayload(tag: tag, groupID: groupID, newcomer: newcomer, requestID: requestID))
    }
}
