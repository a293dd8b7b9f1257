import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// `InviteGroupWorld` plus real invites and join requests: Ada issues the
/// invites, Abe's client decides, Jo asks to join.
struct JoinPolicyWorld {
    typealias W = InviteGroupWorld

    static let requestID = W.id(0x42)
    static let expiresAtMs = InviteFixtures.nowMs + InviteFixtures.weekMs

    let w: InviteGroupWorld
    /// Ada's invite: role member, no use limit, expires in a week.
    let invite: WireSignedInvite

    init() throws {
        w = try InviteGroupWorld()
        invite = Self.invite(in: w)
    }

    /// A signed invite; every field can be made wrong on purpose.
    static func invite(
        in w: InviteGroupWorld, issuer: Identity? = nil, signer: Identity? = nil, tag: Data? = nil,
        role: WireGroupRole = .member, singleUse: Bool = false, maxUses: UInt32 = 0,
        expiresAtMs: Int64 = expiresAtMs, name: String = "Hikers", referenceKeys: InviteKeys? = nil,
        referenceGroupID: String = GroupTest.groupID, referenceTag: Data? = nil, referenceIssuer: Identity? = nil,
        reference: Data? = nil, joinInbox: String? = nil
    ) -> WireSignedInvite {
        let issuer = issuer ?? w.admin
        let tag = tag ?? w.tag
        var payload = WireInvitePayload()
        payload.inviteTag = tag
        payload.issuer = issuer.publicIdentity.wireBundle
        payload.groupReference =
            reference
            ?? (referenceKeys ?? w.keys).sealReference(
                groupID: referenceGroupID, tag: referenceTag ?? tag, issuer: (referenceIssuer ?? issuer).inboxID)
        payload.joinInboxID = joinInbox ?? w.keys.identity.inboxID.rawValue
        payload.name = name
        payload.expiresAtMs = expiresAtMs
        payload.singleUse = singleUse
        payload.maxUses = maxUses
        payload.role = role
        payload.createdAtMs = InviteFixtures.nowMs - 60_000
        return Invite.sign(payload, by: signer ?? issuer)
    }

    func invite(
        issuer: Identity? = nil, signer: Identity? = nil, tag: Data? = nil, role: WireGroupRole = .member,
        singleUse: Bool = false, maxUses: UInt32 = 0, expiresAtMs: Int64 = expiresAtMs, name: String = "Hikers",
        referenceKeys: InviteKeys? = nil, referenceGroupID: String = GroupTest.groupID, referenceTag: Data? = nil,
        referenceIssuer: Identity? = nil, reference: Data? = nil, joinInbox: String? = nil
    ) -> WireSignedInvite {
        Self.invite(
            in: w, issuer: issuer, signer: signer, tag: tag, role: role, singleUse: singleUse, maxUses: maxUses,
            expiresAtMs: expiresAtMs, name: name, referenceKeys: referenceKeys, referenceGroupID: referenceGroupID,
            referenceTag: referenceTag, referenceIssuer: referenceIssuer, reference: reference, joinInbox: joinInbox)
    }

    static func request(_ invite: WireSignedInvite, id: Data = requestID) -> WireJoinRequest {
        var request = WireJoinRequest()
        request.invite = invite
        request.requestID = id
        return request
    }

    /// The facts for one request. By default: Jo sends `invite` as request
    /// `requestID`, Abe decides on `w.state` at `InviteFixtures.now`.
    func context(
        invite: WireSignedInvite? = nil, request: WireJoinRequest? = nil, notARequest: Bool = false,
        requestID: Data = requestID, sender: Identity? = nil, state: GroupState? = nil,
        status: GroupRecord.Status = .active, groupUnknown: Bool = false, groupID: String = GroupTest.groupID,
        keys: InviteKeys? = nil, me: Identity? = nil, seenBefore: Bool = false, blocked: Bool = false,
        now: Date = InviteFixtures.now
    ) -> JoinRequestPolicy.Context {
        let request = notARequest ? nil : (request ?? Self.request(invite ?? self.invite, id: requestID))
        let group = GroupRecord(
            groupID: GroupTest.groupID, topicID: GroupTest.topicID, state: state ?? w.state, status: status)
        return .init(
            requestID: requestID, sender: (sender ?? w.joiner).publicIdentity, request: request,
            keys: keys ?? w.keys, groupID: groupID, group: groupUnknown ? nil : group, me: (me ?? w.admin2).inboxID,
            seenBefore: seenBefore, senderBlocked: blocked, now: now)
    }

    /// The admission Abe's client should decide on.
    func admit(
        _ invite: WireSignedInvite? = nil, joiner: Identity? = nil, role: GroupRole = .member, maxUses: UInt32 = 0,
        tag: Data? = nil, requestID: Data = requestID
    ) -> JoinRequestDecision {
        .admit(
            .init(
                groupID: GroupTest.groupID, joiner: (joiner ?? w.joiner).publicIdentity, role: role, tag: tag ?? w.tag,
                inviteID: JoinRequestPolicy.inviteID(of: invite ?? self.invite), maxUses: maxUses,
                requestID: requestID))
    }

    /// `state` after `joiner` was admitted through `invite` by Ada.
    func admitted(
        _ joiner: Identity, through invite: WireSignedInvite? = nil, maxUses: UInt32, requestID: Data,
        to state: GroupState? = nil
    ) throws -> GroupState {
        try w.applying(
            W.admit(
                joiner.publicIdentity, inviteID: JoinRequestPolicy.inviteID(of: invite ?? self.invite), tag: w.tag,
                maxUses: maxUses, requestID: requestID),
            by: w.admin, to: state)
    }

    func rotated(_ state: GroupState? = nil) throws -> GroupState {
        try w.applying(W.rotate(w.newTag), by: w.owner, to: state)
    }

    func exploded(_ state: GroupState? = nil) throws -> GroupState {
        try w.applying(W.explode, by: w.owner, to: state)
    }

    /// Jo added by hand, then removed with a ban.
    func joinerBanned(_ state: GroupState? = nil) throws -> GroupState {
        let added = try w.applying(GroupTest.add(w.joiner.publicIdentity, as: .member), by: w.owner, to: state)
        return try w.removing(w.joiner.inboxID, ban: true, by: w.owner, from: added)
    }

    /// Ada demoted to `role`. Invites are set up, so the demotion rotates
    /// the invite identity and tag to the admins who keep their rights.
    func issuerDemoted(to role: GroupRole, _ state: GroupState? = nil) throws -> GroupState {
        try demoted(w.admin, to: role, state)
    }

    /// `admin` demoted to `role` by the owner, rotating the invite identity
    /// to the admins who remain.
    func demoted(_ admin: Identity, to role: GroupRole, _ state: GroupState? = nil) throws -> GroupState {
        let before = state ?? w.state
        var commit = w.commit(GroupTest.changeRole(admin.inboxID, to: role), by: w.owner, on: before)
        let remaining = before.sortedMembers.filter { $0.role >= .admin && $0.inboxID != admin.inboxID }
        commit.rotateInvites = try w.rotation(sealedTo: remaining.map(\.identity), on: before)
        var next = before
        try W.require(next.apply(commit, signedBy: w.owner))
        return next
    }

    /// Ada removed, rotating the invite identity.
    func issuerRemoved(_ state: GroupState? = nil) throws -> GroupState {
        let before = state ?? w.state
        var commit = w.commit(GroupTest.remove(w.admin.inboxID), by: w.owner, on: before)
        try GroupTest.attachFreshKey(
            to: &commit, for: before.sortedMembers.map(\.identity).filter { $0.inboxID != w.admin.inboxID })
        commit.rotateInvites = try w.rotation(sealedTo: [w.owner, w.admin2].map(\.publicIdentity), on: before)
        var next = before
        try W.require(next.apply(commit, signedBy: w.owner))
        return next
    }

    /// Ada left: the invite tag stays until an admin replaces the identity.
    func issuerLeft(_ state: GroupState? = nil) throws -> GroupState {
        try w.applying(GroupTest.leave, by: w.admin, to: state)
    }
}

@Suite("Join request policy")
struct JoinRequestPolicyTests {
    typealias P = JoinPolicyWorld
    typealias W = InviteGroupWorld

    static let forgedReference = "the invite was not made by an admin of this group"
    static let expired = JoinRequestDecision.reject(.genericFailure, reason: "the invite expired")
    static let notFound = JoinRequestDecision.reject(.conversationNotFound, reason: "the group is not known here")
    static let notAdmin = JoinRequestDecision.notForThisClient(reason: "this client is not an admin of the group")
    static let revoked = JoinRequestDecision.reject(.inviteRevoked, reason: "the invite was revoked")
    static let issuerGone = JoinRequestDecision.reject(
        .inviteRevoked, reason: "whoever issued the invite is no longer an admin")
    static let explodedGroup = JoinRequestDecision.reject(.conversationExpired, reason: "the group was exploded")
    static let singleUseUsed = JoinRequestDecision.reject(.singleUseConsumed, reason: "the single-use invite was used")
    static let bannedJoiner = JoinRequestDecision.reject(.genericFailure, reason: "not allowed to join")
    static let badSignature = JoinRequestDecision.reject(
        .genericFailure, reason: "the invite is not valid: \(InviteError.invalidSignature)")

    /// One request and the exact decision it must get.
    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        /// Set when the production code is known to decide otherwise.
        let knownIssue: Comment?
        let build: @Sendable (JoinPolicyWorld) throws -> (JoinRequestPolicy.Context, JoinRequestDecision)
        var testDescription: String { name }

        init(
            _ name: String, knownIssue: Comment? = nil,
            _ build: @escaping @Sendable (JoinPolicyWorld) throws -> (JoinRequestPolicy.Context, JoinRequestDecision)
        ) {
            self.name = name
            self.knownIssue = knownIssue
            self.build = build
        }
    }

    static let cases: [Case] = [
        .init("valid: admitted as the invite's role") { p in (p.context(), p.admit()) },
        .init("valid: the owner's client admits too") { p in (p.context(me: p.w.owner), p.admit()) },
        .init("valid: issued by the owner") { p in
            let invite = p.invite(issuer: p.w.owner)
            return (p.context(invite: invite), p.admit(invite))
        },
        .init("valid: expires one millisecond after now") { p in
            let invite = p.invite(expiresAtMs: InviteFixtures.nowMs + 1)
            return (p.context(invite: invite), p.admit(invite))
        },
        .init("valid: never expires") { p in
            let invite = p.invite(expiresAtMs: 0)
            return (p.context(invite: invite, now: .distantFuture), p.admit(invite))
        },
        .init("valid: issued under the rotated-to tag") { p in
            let state = try p.rotated()
            let invite = p.invite(tag: p.w.newTag)
            return (p.context(invite: invite, state: state), p.admit(invite, tag: p.w.newTag))
        },
        .init("valid: the uses of another invite do not count") { p in
            let other = p.invite(singleUse: true, name: "Other")
            let state = try p.admitted(p.w.joiner2, through: other, maxUses: 1, requestID: W.id(0x77))
            let invite = p.invite(singleUse: true)
            return (p.context(invite: invite, state: state), p.admit(invite, maxUses: 1))
        },
        .init("valid: a ban on someone else does not count") { p in
            let state = try p.w.removing(p.w.member.inboxID, ban: true, by: p.w.owner)
            return (p.context(state: state), p.admit())
        },

        // 1. Duplicates, before anything else.
        .init("duplicate: seen before by this client") { p in (p.context(seenBefore: true), .duplicate) },
        .init("duplicate: seen before beats a forged invite") { p in
            (p.context(invite: p.invite(signer: p.w.outsider), seenBefore: true), .duplicate)
        },
        .init("duplicate: seen before beats a blocked sender") { p in
            (p.context(seenBefore: true, blocked: true), .duplicate)
        },
        .init("duplicate: seen before beats not a join request") { p in
            (p.context(notARequest: true, seenBefore: true), .duplicate)
        },
        .init("duplicate: seen before beats an unknown group") { p in
            (p.context(groupUnknown: true, seenBefore: true), .duplicate)
        },
        .init("duplicate: admitted by another admin") { p in
            let state = try p.admitted(p.w.joiner, maxUses: 0, requestID: P.requestID)
            return (p.context(state: state), .duplicate)
        },
        .init("duplicate: admitted in the group beats a blocked sender and a bad request") { p in
            let state = try p.admitted(p.w.joiner2, maxUses: 0, requestID: P.requestID)
            return (p.context(notARequest: true, state: state, blocked: true), .duplicate)
        },
        .init("duplicate: admitted in the group beats an exploded group") { p in
            let state = try p.exploded(p.admitted(p.w.joiner, maxUses: 0, requestID: P.requestID))
            return (p.context(state: state), .duplicate)
        },

        // Blocked senders.
        .init("blocked sender: a valid request") { p in (p.context(blocked: true), .ignoredBlockedSender) },
        .init("blocked sender: beats a forged invite") { p in
            (p.context(invite: p.invite(signer: p.w.outsider), blocked: true), .ignoredBlockedSender)
        },
        .init("blocked sender: beats not a join request") { p in
            (p.context(notARequest: true, blocked: true), .ignoredBlockedSender)
        },

        // 2. Malformed: its sender blocked. A forged invite: answered, nobody blocked
        // (its holder may be a victim; ADR 0010).
        .init("forged: not a join request") { p in
            (p.context(notARequest: true), .block(reason: "not a join request"))
        },
        .init("forged: request id differs from the message id") { p in
            let request = P.request(p.invite, id: W.id(0x43))
            return (p.context(request: request), .block(reason: "request id does not match"))
        },
        .init("forged: an empty request") { p in
            (p.context(request: WireJoinRequest()), .block(reason: "request id does not match"))
        },
        .init("forged: an empty invite") { p in
            var request = P.request(p.invite)
            request.invite = WireSignedInvite()
            return (
                p.context(request: request),
                .reject(.genericFailure, reason: "the invite is not valid: \(InviteError.malformed("invite payload"))")
            )
        },
        .init("forged: signed by someone else in the issuer's name") { p in
            (p.context(invite: p.invite(signer: p.w.outsider)), Self.badSignature)
        },
        .init("forged: a payload changed after signing") { p in
            var invite = p.invite
            var payload = try FrameCodec.decode(WireInvitePayload.self, from: invite.payload, limit: 8192)
            payload.role = .owner
            invite.payload = FrameCodec.encode(payload)
            return (p.context(invite: invite), Self.badSignature)
        },
        .init("forged: beats expired") { p in
            let invite = p.invite(signer: p.w.outsider, expiresAtMs: InviteFixtures.nowMs - 1)
            return (p.context(invite: invite), Self.badSignature)
        },
        .init("forged: beats an unknown group") { p in
            (p.context(invite: p.invite(signer: p.w.outsider), groupUnknown: true), Self.badSignature)
        },
        .init("forged: a request sent to the join inbox of another group") { p in
            let invite = p.invite(joinInbox: p.w.otherKeys.identity.inboxID.rawValue)
            return (p.context(invite: invite), .reject(.genericFailure, reason: "the invite names another join inbox"))
        },
        .init("forged: another join inbox beats expired") { p in
            let invite = p.invite(
                expiresAtMs: InviteFixtures.nowMs - 1, joinInbox: p.w.otherKeys.identity.inboxID.rawValue)
            return (p.context(invite: invite), .reject(.genericFailure, reason: "the invite names another join inbox"))
        },
        .init("forged: read from the inbox of another group's keys") { p in
            (p.context(keys: p.w.otherKeys), .reject(.genericFailure, reason: "the invite names another join inbox"))
        },
        .init("forged: the reference was made with another seed") { p in
            let invite = p.invite(referenceKeys: p.w.otherKeys)
            return (p.context(invite: invite), .reject(.genericFailure, reason: Self.forgedReference))
        },
        .init("forged: the reference opens to another group id") { p in
            let invite = p.invite(referenceGroupID: GroupTest.otherGroupID)
            return (p.context(invite: invite), .reject(.genericFailure, reason: Self.forgedReference))
        },
        .init("forged: the inbox belongs to another group id") { p in
            (p.context(groupID: GroupTest.otherGroupID), .reject(.genericFailure, reason: Self.forgedReference))
        },
        .init("forged: an admin's reference reused by an outsider as issuer") { p in
            let invite = p.invite(issuer: p.w.outsider, referenceIssuer: p.w.admin)
            return (p.context(invite: invite), .reject(.genericFailure, reason: Self.forgedReference))
        },
        .init("forged: the reference was made under another tag") { p in
            let invite = p.invite(referenceTag: p.w.newTag)
            return (p.context(invite: invite), .reject(.genericFailure, reason: Self.forgedReference))
        },
        .init("forged: a random reference") { p in
            let invite = p.invite(reference: Data(repeating: 0x3C, count: 60))
            return (p.context(invite: invite), .reject(.genericFailure, reason: Self.forgedReference))
        },
        .init("forged: an empty reference") { p in
            (p.context(invite: p.invite(reference: Data())), .reject(.genericFailure, reason: Self.forgedReference))
        },
        .init("forged: a bad reference beats expired") { p in
            let invite = p.invite(expiresAtMs: InviteFixtures.nowMs - 1, referenceKeys: p.w.otherKeys)
            return (p.context(invite: invite), .reject(.genericFailure, reason: Self.forgedReference))
        },

        // 3. Expired.
        .init("expired: exactly now") { p in
            (p.context(invite: p.invite(expiresAtMs: InviteFixtures.nowMs)), Self.expired)
        },
        .init("expired: a year ago") { p in
            (p.context(invite: p.invite(expiresAtMs: InviteFixtures.nowMs - 365 * 86_400_000)), Self.expired)
        },
        .init("expired: before 1970") { p in
            (p.context(invite: p.invite(expiresAtMs: -1)), Self.expired)
        },
        .init("expired: at the earliest representable time") { p in
            (p.context(invite: p.invite(expiresAtMs: .min)), Self.expired)
        },
        .init("expired: beats revoked") { p in
            (p.context(invite: p.invite(expiresAtMs: InviteFixtures.nowMs), state: try p.rotated()), Self.expired)
        },
        .init("expired: beats an unknown group") { p in
            (p.context(invite: p.invite(expiresAtMs: InviteFixtures.nowMs), groupUnknown: true), Self.expired)
        },
        .init("expired: beats this client not being an admin") { p in
            (p.context(invite: p.invite(expiresAtMs: InviteFixtures.nowMs), me: p.w.moderator), Self.expired)
        },
        .init("expired: beats an exploded group") { p in
            (p.context(invite: p.invite(expiresAtMs: InviteFixtures.nowMs), state: try p.exploded()), Self.expired)
        },

        // The group must be on this device.
        .init("unknown group") { p in (p.context(groupUnknown: true), Self.notFound) },
        .init("unknown group: beats this client's role, unknowable anyway") { p in
            (p.context(groupUnknown: true, me: p.w.member), Self.notFound)
        },

        // This client must be an admin of an active group.
        .init("not for this client: a moderator") { p in (p.context(me: p.w.moderator), Self.notAdmin) },
        .init("not for this client: not a member") { p in (p.context(me: p.w.outsider), Self.notAdmin) },
        .init("not for this client: the group was left") { p in (p.context(status: .left), Self.notAdmin) },
        .init("not for this client: removed from the group") { p in (p.context(status: .removed), Self.notAdmin) },
        .init("not for this client: the group is still being created") { p in
            (p.context(status: .creating), Self.notAdmin)
        },
        .init("not for this client: demoted, beats revoked") { p in
            let state = try p.rotated(p.demoted(p.w.admin2, to: .member))
            return (p.context(state: state), Self.notAdmin)
        },
        .init("not for this client: beats an exploded group") { p in
            (p.context(state: try p.exploded(), me: p.w.moderator), Self.notAdmin)
        },

        // 4. Revoked.
        .init("revoked: the tag was rotated") { p in (p.context(state: try p.rotated()), Self.revoked) },
        // Demoting or removing an admin rotates the invite tag (ADR 0008),
        // so the tag is what revokes those invites.
        .init("revoked: the issuer is a member now") { p in
            (p.context(state: try p.issuerDemoted(to: .member)), Self.revoked)
        },
        .init("revoked: the issuer is a moderator now") { p in
            (p.context(state: try p.issuerDemoted(to: .moderator)), Self.revoked)
        },
        .init("revoked: the issuer was removed") { p in
            (p.context(state: try p.issuerRemoved()), Self.revoked)
        },
        .init("revoked: the issuer left") { p in
            (p.context(state: try p.issuerLeft()), Self.issuerGone)
        },
        .init("revoked: another admin's invite while an admin who left still holds the seed") { p in
            let invite = p.invite(issuer: p.w.owner)
            return (
                p.context(invite: invite, state: try p.issuerLeft()),
                .reject(.inviteRevoked, reason: JoinRequestPolicy.adminLeftReason)
            )
        },
        .init("revoked: the issuer never was a member, yet had the seed") { p in
            let invite = p.invite(issuer: p.w.outsider)
            return (p.context(invite: invite), Self.issuerGone)
        },
        .init("revoked: a rotated tag beats a departed issuer") { p in
            let state = try p.rotated(p.issuerLeft())
            return (p.context(state: state), Self.revoked)
        },
        .init("revoked: beats exploded") { p in
            (p.context(state: try p.exploded(p.rotated())), Self.revoked)
        },
        .init("revoked: a departed issuer beats exploded") { p in
            (p.context(state: try p.exploded(p.issuerLeft())), Self.issuerGone)
        },
        .init("revoked: beats consumed") { p in
            let invite = p.invite(singleUse: true)
            let state = try p.rotated(p.admitted(p.w.joiner2, through: invite, maxUses: 1, requestID: W.id(0x77)))
            return (p.context(invite: invite, state: state), Self.revoked)
        },
        .init("revoked: beats already a member") { p in
            (p.context(sender: p.w.member, state: try p.rotated()), Self.revoked)
        },

        // 5. Exploded.
        .init("exploded") { p in (p.context(state: try p.exploded()), Self.explodedGroup) },
        .init("exploded: beats already a member") { p in
            (p.context(sender: p.w.member, state: try p.exploded()), Self.explodedGroup)
        },
        .init("exploded: beats consumed") { p in
            let invite = p.invite(singleUse: true)
            let state = try p.exploded(p.admitted(p.w.joiner2, through: invite, maxUses: 1, requestID: W.id(0x77)))
            return (p.context(invite: invite, state: state), Self.explodedGroup)
        },
        .init("exploded: beats banned") { p in
            (p.context(state: try p.exploded(p.joinerBanned())), Self.explodedGroup)
        },

        // Already a member: welcome again.
        .init("already a member") { p in
            (p.context(sender: p.w.member), .alreadyMember(groupID: GroupTest.groupID, tag: p.w.tag))
        },
        .init("already a member: admitted before, asking again with a new request") { p in
            let state = try p.admitted(p.w.joiner, maxUses: 1, requestID: W.id(0x77))
            return (p.context(state: state), .alreadyMember(groupID: GroupTest.groupID, tag: p.w.tag))
        },
        .init("already a member: beats consumed") { p in
            let invite = p.invite(singleUse: true)
            let state = try p.admitted(p.w.joiner2, through: invite, maxUses: 1, requestID: W.id(0x77))
            return (
                p.context(invite: invite, sender: p.w.joiner2, state: state),
                .alreadyMember(groupID: GroupTest.groupID, tag: p.w.tag)
            )
        },
        .init("already a member: an admin asking") { p in
            (p.context(sender: p.w.admin), .alreadyMember(groupID: GroupTest.groupID, tag: p.w.tag))
        },

        // 6. Used up.
        .init("consumed: a single-use invite was used") { p in
            let invite = p.invite(singleUse: true)
            let state = try p.admitted(p.w.joiner2, through: invite, maxUses: 1, requestID: W.id(0x77))
            return (p.context(invite: invite, state: state), Self.singleUseUsed)
        },
        .init("consumed: a one-use limit is single use") { p in
            let invite = p.invite(maxUses: 1)
            let state = try p.admitted(p.w.joiner2, through: invite, maxUses: 1, requestID: W.id(0x77))
            return (p.context(invite: invite, state: state), Self.singleUseUsed)
        },
        .init("consumed: single use wins over a larger use limit") { p in
            let invite = p.invite(singleUse: true, maxUses: 5)
            let state = try p.admitted(p.w.joiner2, through: invite, maxUses: 1, requestID: W.id(0x77))
            return (p.context(invite: invite, state: state), Self.singleUseUsed)
        },
        .init("consumed: three uses of three") { p in
            let invite = p.invite(maxUses: 3)
            var state = p.w.state
            for (joiner, byte) in [
                (p.w.joiner2, UInt8(0x71)), (p.w.outsider, 0x72), (GroupTest.identity("Quinn"), 0x73),
            ] {
                state = try p.admitted(joiner, through: invite, maxUses: 3, requestID: W.id(byte), to: state)
            }
            return (
                p.context(invite: invite, state: state),
                .reject(.singleUseConsumed, reason: "the invite's 3 uses are used up")
            )
        },
        .init("consumed: beats banned") { p in
            let invite = p.invite(singleUse: true)
            let state = try p.joinerBanned(
                p.admitted(p.w.joiner2, through: invite, maxUses: 1, requestID: W.id(0x77)))
            return (p.context(invite: invite, state: state), Self.singleUseUsed)
        },
        .init("not consumed: two uses of three") { p in
            let invite = p.invite(maxUses: 3)
            var state = p.w.state
            for (joiner, byte) in [(p.w.joiner2, UInt8(0x71)), (p.w.outsider, 0x72)] {
                state = try p.admitted(joiner, through: invite, maxUses: 3, requestID: W.id(byte), to: state)
            }
            return (p.context(invite: invite, state: state), p.admit(invite, maxUses: 3))
        },
        .init("not consumed: unlimited after many uses") { p in
            var state = p.w.state
            for (joiner, byte) in [
                (p.w.joiner2, UInt8(0x71)), (p.w.outsider, 0x72), (GroupTest.identity("Quinn"), 0x73),
            ] {
                state = try p.admitted(joiner, maxUses: 0, requestID: W.id(byte), to: state)
            }
            return (p.context(state: state), p.admit())
        },

        // 7. Banned.
        .init("banned") { p in (p.context(state: try p.joinerBanned()), Self.bannedJoiner) },
        .init("banned: a fresh single-use invite") { p in
            let invite = p.invite(singleUse: true)
            return (p.context(invite: invite, state: try p.joinerBanned()), Self.bannedJoiner)
        },
        .init("banned, then added by hand and removed again: admitted") { p in
            let lifted = try p.w.applying(
                GroupTest.add(p.w.joiner.publicIdentity, as: .member), by: p.w.owner, to: p.joinerBanned())
            let state = try p.w.removing(p.w.joiner.inboxID, ban: false, by: p.w.owner, from: lifted)
            return (p.context(state: state), p.admit())
        },

        // 8. Admitted, the role capped.
        .init("role: observer") { p in
            let invite = p.invite(role: .observer)
            return (p.context(invite: invite), p.admit(invite, role: .observer))
        },
        .init("role: moderator") { p in
            let invite = p.invite(role: .moderator)
            return (p.context(invite: invite), p.admit(invite, role: .moderator))
        },
        .init("role: admin, from an admin, decided by an admin") { p in
            let invite = p.invite(role: .admin)
            return (p.context(invite: invite), p.admit(invite, role: .admin))
        },
        .init("role: owner, from an admin, decided by the owner: capped at the issuer's") { p in
            let invite = p.invite(role: .owner)
            return (p.context(invite: invite, me: p.w.owner), p.admit(invite, role: .admin))
        },
        .init("role: owner, from the owner, decided by an admin: capped at mine") { p in
            let invite = p.invite(issuer: p.w.owner, role: .owner)
            return (p.context(invite: invite), p.admit(invite, role: .admin))
        },
        .init("role: owner, from the owner, decided by the owner") { p in
            let invite = p.invite(issuer: p.w.owner, role: .owner)
            return (p.context(invite: invite, me: p.w.owner), p.admit(invite, role: .owner))
        },
        .init("role: owner, from an admin since promoted to owner") { p in
            let state = try p.w.applying(GroupTest.changeRole(p.w.admin.inboxID, to: .owner), by: p.w.owner)
            let invite = p.invite(role: .owner)
            return (p.context(invite: invite, state: state, me: p.w.owner), p.admit(invite, role: .owner))
        },
        .init("role: unspecified means member") { p in
            let invite = p.invite(role: .unspecified)
            return (p.context(invite: invite), p.admit(invite, role: .member))
        },
        .init("role: unknown to this client means member") { p in
            let invite = p.invite(role: .UNRECOGNIZED(9))
            return (p.context(invite: invite), p.admit(invite, role: .member))
        },

        // The use limit the admission carries.
        .init("admission: single use counts as one use") { p in
            let invite = p.invite(singleUse: true)
            return (p.context(invite: invite), p.admit(invite, maxUses: 1))
        },
        .init("admission: single use with a use limit still counts as one use") { p in
            let invite = p.invite(singleUse: true, maxUses: 7)
            return (p.context(invite: invite), p.admit(invite, maxUses: 1))
        },
        .init("admission: a use limit is carried") { p in
            let invite = p.invite(maxUses: 7)
            return (p.context(invite: invite), p.admit(invite, maxUses: 7))
        },
        .init("admission: another request id is carried") { p in
            (p.context(requestID: W.id(0x99)), p.admit(requestID: W.id(0x99)))
        },
    ]

    @Test(arguments: cases)
    func decides(_ testCase: Case) throws {
        let (context, expected) = try testCase.build(JoinPolicyWorld())
        if let knownIssue = testCase.knownIssue {
            withKnownIssue(knownIssue) { #expect(JoinRequestPolicy.decide(context) == expected) }
        } else {
            #expect(JoinRequestPolicy.decide(context) == expected)
        }
    }

    @Test func theWorldIsWhatTheCasesAssume() throws {
        let p = try JoinPolicyWorld()
        #expect(p.w.state.inviteTag == p.w.tag)
        #expect(p.w.state.inviteIdentity == p.w.keys.identity.publicIdentity)
        #expect(p.w.state.role(of: p.w.admin.inboxID) == .admin)
        #expect(p.w.state.role(of: p.w.admin2.inboxID) == .admin)
        #expect(p.w.state.role(of: p.w.joiner.inboxID) == nil)
        let invite = try Invite.verify(p.invite, now: InviteFixtures.now)
        #expect(invite.issuer == p.w.admin.publicIdentity)
        #expect(invite.payload.joinInboxID == p.w.keys.identity.inboxID.rawValue)
        #expect(
            p.w.keys.openReference(invite.payload.groupReference, tag: p.w.tag, issuer: p.w.admin.inboxID)
                == GroupTest.groupID)
        #expect(p.w.otherKeys.identity.inboxID != p.w.keys.identity.inboxID)
    }

    @Test func theInviteIDIsTheFirst16BytesOfTheSHA256OfThePayload() throws {
        let p = try JoinPolicyWorld()
        let id = JoinRequestPolicy.inviteID(of: p.invite)
        #expect(id.count == 16)
        #expect(id == Data(SHA256.hash(data: p.invite.payload)).prefix(16))
        // The signature is not part of it; the payload is.
        var resigned = p.invite
        resigned.signature = Data(repeating: 0, count: 64)
        #expect(JoinRequestPolicy.inviteID(of: resigned) == id)
        #expect(JoinRequestPolicy.inviteID(of: p.invite(name: "Hikers")) != id)
        guard case .admit(let admission) = JoinRequestPolicy.decide(p.context()) else {
            Issue.record("expected an admission")
            return
        }
        #expect(admission.inviteID == id)
    }

    // MARK: Decisions applied to the log

    /// The AddMember an admin commits for an admission.
    static func commit(_ admission: JoinRequestDecision.Admission) -> WireGroupCommit.OneOf_Action {
        W.admit(
            admission.joiner, as: admission.role, inviteID: admission.inviteID, tag: admission.tag,
            maxUses: admission.maxUses, requestID: admission.requestID)
    }

    @Test func anAdmissionCommittedMakesTheSameRequestADuplicateAndTheJoinerAMember() throws {
        let p = try JoinPolicyWorld()
        let invite = p.invite(singleUse: true)
        guard case .admit(let admission) = JoinRequestPolicy.decide(p.context(invite: invite)) else {
            Issue.record("expected an admission")
            return
        }
        let state = try p.w.applying(Self.commit(admission), by: p.w.admin2)
        #expect(state.role(of: p.w.joiner.inboxID) == .member)
        #expect(state.inviteUses == [JoinRequestPolicy.inviteID(of: invite): 1])
        // Another admin, which never saw the request, stays silent.
        #expect(JoinRequestPolicy.decide(p.context(invite: invite, state: state, me: p.w.admin)) == .duplicate)
        // The joiner asking again with a new request is welcomed again.
        #expect(
            JoinRequestPolicy.decide(p.context(invite: invite, requestID: W.id(0x43), state: state))
                == .alreadyMember(groupID: GroupTest.groupID, tag: p.w.tag))
        // Someone else with the same single-use invite is refused.
        #expect(
            JoinRequestPolicy.decide(
                p.context(invite: invite, requestID: W.id(0x44), sender: p.w.joiner2, state: state))
                == Self.singleUseUsed)
    }

    @Test func twoAdminsRacingOnASingleUseInvite() throws {
        let p = try JoinPolicyWorld()
        let invite = p.invite(singleUse: true)
        let first = JoinRequestPolicy.decide(p.context(invite: invite, me: p.w.admin))
        let second = JoinRequestPolicy.decide(
            p.context(invite: invite, requestID: W.id(0x43), sender: p.w.joiner2, me: p.w.admin2))
        guard case .admit(let one) = first, case .admit(let two) = second else {
            Issue.record("both admins should admit on the same state: \(first), \(second)")
            return
        }
        // Both commits build on the same epoch; the first applied wins.
        let winner = p.w.commit(Self.commit(one), by: p.w.admin)
        let loser = p.w.commit(Self.commit(two), by: p.w.admin2)
        var state = p.w.state
        try W.require(state.apply(winner, signedBy: p.w.admin))
        let afterWin = state
        #expect(
            try state.apply(loser, signedBy: p.w.admin2)
                == .rejected(.staleEpoch(commit: p.w.state.epoch, current: afterWin.epoch)))
        // Rebuilt on the new epoch, the rules refuse the use...
        #expect(
            try state.apply(p.w.commit(Self.commit(two), by: p.w.admin2, on: afterWin), signedBy: p.w.admin2)
                == .rejected(.inviteUsedUp))
        #expect(state == afterWin)
        // ...and the decision made again on the new state says so.
        #expect(
            JoinRequestPolicy.decide(
                p.context(invite: invite, requestID: W.id(0x43), sender: p.w.joiner2, state: afterWin, me: p.w.admin2))
                == Self.singleUseUsed)
    }

    /// `admin` admits the default request and commits it: the admission
    /// and the state after the commit, nil (recorded) if it did not admit.
    static func committed(
        by admin: Identity, in p: JoinPolicyWorld
    ) throws -> (
        JoinRequestDecision.Admission, GroupState
    )? {
        guard case .admit(let admission) = JoinRequestPolicy.decide(p.context(me: admin)) else {
            Issue.record("expected an admission")
            return nil
        }
        return (admission, try p.w.applying(Self.commit(admission), by: admin))
    }

    @Test func anAdmissionCommittedButNeverAnsweredIsFinishedByTheAdminWhoCommittedIt() throws {
        let p = try JoinPolicyWorld()
        guard let (admission, state) = try Self.committed(by: p.w.admin2, in: p) else { return }
        var finish = admission
        finish.committed = true
        // The admin whose commit it is, and who never recorded an answer:
        // the same admission, to answer without a second commit.
        #expect(JoinRequestPolicy.decide(p.context(state: state, me: p.w.admin2)) == .admit(finish))
        // Answered and recorded: a duplicate.
        #expect(JoinRequestPolicy.decide(p.context(state: state, me: p.w.admin2, seenBefore: true)) == .duplicate)
        // Another admin's admission is that admin's to answer.
        #expect(JoinRequestPolicy.decide(p.context(state: state, me: p.w.admin)) == .duplicate)
        // Someone else sending the admitted request's id is not the joiner.
        #expect(
            JoinRequestPolicy.decide(p.context(sender: p.w.joiner2, state: state, me: p.w.admin2)) == .duplicate)
        // A joiner removed since replays the request: nothing to finish.
        var removal = p.w.commit(GroupTest.remove(p.w.joiner.inboxID), by: p.w.owner, on: state)
        try GroupTest.attachFreshKey(
            to: &removal, for: state.sortedMembers.map(\.identity).filter { $0.inboxID != p.w.joiner.inboxID })
        var removed = state
        try W.require(removed.apply(removal, signedBy: p.w.owner))
        #expect(removed.members[p.w.joiner.inboxID] == nil)
        #expect(JoinRequestPolicy.decide(p.context(state: removed, me: p.w.admin2)) == .duplicate)
    }

    @Test func theSameRequestRacedByTwoAdminsEndsAsADuplicate() throws {
        let p = try JoinPolicyWorld()
        guard let (_, state) = try Self.committed(by: p.w.admin, in: p) else { return }
        #expect(JoinRequestPolicy.decide(p.context(state: state, me: p.w.admin2)) == .duplicate)
    }
}
