public import Foundation
public import RallyCrypto
public import RallyWire

/// A verified invite: its payload, its issuer, and what it grants.
public struct Invite: Sendable, Equatable {
    public static let signingDomain = Data("rally-invite-v1".utf8)
    public static let tagByteCount = 16

    public let payload: WireInvitePayload
    public let issuer: PublicIdentity
    public let signed: WireSignedInvite

    public var tag: Data { payload.inviteTag }
    public var tagText: String { payload.inviteTag.hexString }
    public var expiresAt: Date? {
        payload.expiresAtMs == 0 ? nil : Date(milliseconds: payload.expiresAtMs)
    }

    public static func sign(_ payload: WireInvitePayload, by issuer: Identity) -> WireSignedInvite {
        let bytes = FrameCodec.encode(payload)
        var signed = WireSignedInvite()
        signed.payload = bytes
        signed.signature = (try? issuer.signingKey.signature(for: signingDomain + bytes)) ?? Data()
        return signed
    }

    /// Checks an invite locally, before anything is sent: structure, the
    /// issuer's signature and expiry at `now` (nil: expiry is judged
    /// elsewhere, as the inviter side does in its own place in the order).
    public static func verify(_ signed: WireSignedInvite, now: Date?) throws(InviteError) -> Invite {
        let payload: WireInvitePayload
        do {
            payload = try FrameCodec.decode(
                WireInvitePayload.self, from: signed.payload, limit: InviteSlug.maxInflatedBytes)
        } catch {
            throw .malformed("invite payload")
        }
        let issuer: PublicIdentity
        do {
            issuer = try PublicIdentity(wire: payload.issuer)
        } catch {
            throw .malformed("issuer keys")
        }
        let cacheKey = VerifiedInviteCache.key(signed)
        if !VerifiedInviteCache.shared.contains(cacheKey) {
            guard issuer.signingKey.verifies(signed.signature, for: signingDomain + signed.payload) else {
                throw .invalidSignature
            }
            VerifiedInviteCache.shared.insert(cacheKey)
        }
        guard payload.inviteTag.count == tagByteCount else { throw .malformed("invite tag") }
        guard (try? InboxID(validating: payload.joinInboxID)) != nil else { throw .malformed("join inbox id") }
        let invite = Invite(payload: payload, issuer: issuer, signed: signed)
        if let now, let expiresAt = invite.expiresAt, expiresAt <= now { throw .expired(expiresAt) }
        return invite
    }

    /// Decodes and verifies a link, a slug or pasted text.
    public static func parse(_ text: String, now: Date) throws(InviteError) -> Invite {
        try verify(InviteSlug.decode(InviteLink.slug(from: text)), now: now)
    }
}
