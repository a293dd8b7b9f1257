import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// The rules of the group link, the approval queue, invitations and
/// preferences: what every member applies at a commit's position.
@Suite("Group admission rules")
struct GroupAdmissionRulesTests {
    typealias T = GroupTest
    typealias W = InviteGroupWorld

    static func link(
        by issuer: Identity, tag: Data, joinInbox: InboxID, role: GroupRole = .member,
        admission: WireGroupAdmission = .auto, signed: WireSignedInvite? = nil
    ) -> WireGroupCommit.OneOf_Action {
        var payload = WireInvitePayload()
        payload.inviteTag = tag
        payload.issuer = issuer.publicIdentity.wireBundle
        payload.joinInboxID = joinInbox.rawValue
        payload.name = "Hikers"
        var set = WireSetGroupLink()
        set.signedInvite = FrameCodec.encode(signed ?? Invite.sign(payload, by: issuer))
        set.role = role.wire
        set.admission = admission
        return .setGroupLink(set)
    }

    static func outcome(
        _ w: W, _ action: WireGroupCommit.OneOf_Action, by author: Identity, on state: GroupState
    )
        throws -> GroupOutcome
    {
        var next = state
        return try next.apply(T.commit(action, by: author, on: state), signedBy: author)
    }

    @Test(
        "one link per group: set by an admin under a fresh tag to the current join inbox; a second is duplicate_group_link"
    )
    func links() throws {
        let w = try W()
        let joinInbox = w.keys.identity.inboxID
        let linkTag = W.id(0x77)
        #expect(
            try Self.outcome(
                w, Self.link(by: w.moderator, tag: linkTag, joinInbox: joinInbox), by: w.moderator, on: w.state)
                == .rejected(.insufficientRole(needed: .admin, actual: .moderator)))
        #expect(
            try Self.outcome(w, Self.link(by: w.admin, tag: w.tag, joinInbox: joinInbox), by: w.admin, on: w.state)
                == .rejected(.invalidInviteTag))
        #expect(
            try Self.outcome(
                w, Self.link(by: w.admin, tag: linkTag, joinInbox: w.otherKeys.identity.inboxID), by: w.admin,
                on: w.state)
                == .rejected(.invalidLink("the link must send join requests to the group's current invite identity")))
        #expect(
            try Self.outcome(w, Self.link(by: w.owner, tag: linkTag, joinInbox: joinInbox), by: w.admin, on: w.state)
                == .rejected(.invalidLink("the link must be issued by the admin who sets it")))
        #expect(
            try Self.outcome(
                w, Self.link(by: w.admin, tag: linkTag, joinInbox: joinInbox, role: .owner), by: w.admin, on: w.state)
                == .rejected(.insufficientRole(needed: .owner, actual: .admin)))

        let withLink = try w.applying(Self.link(by: w.admin, tag: linkTag, joinInbox: joinInbox), by: w.admin)
        let link = try #require(withLink.groupLink)
        #expect(link.tag == linkTag && link.role == .member && link.admission == .auto)
        // A second link is refused; the same link with another role is a change, by any admin.
        #expect(
            try Self.outcome(
                w, Self.link(by: w.admin, tag: W.id(0x78), joinInbox: joinInbox), by: w.admin, on: withLink)
                == .rejected(.duplicateGroupLink))
        let changed = try w.applying(
            Self.link(
                by: w.admin, tag: linkTag, joinInbox: joinInbox, role: .observer, admission: .approval,
                signed: link.invite.signed), by: w.owner, to: withLink)
        #expect(changed.groupLink?.role == .observer && changed.groupLink?.admission == .approval)
        #expect(changed.groupLink?.invite == link.invite)

        // The link admits like an invite; deleted, its tag is refused for good.
        let admit = W.admit(
            w.joiner.publicIdentity, inviteID: W.id(1), tag: linkTag, maxUses: 0, requestID: W.id(2))
        #expect(try Self.outcome(w, admit, by: w.admin, on: changed).isApplied)
        let deleted = try w.applying(.deleteGroupLink(WireDeleteGroupLink()), by: w.admin2, to: changed)
        #expect(deleted.groupLink == nil && deleted.retiredLinkTags == [linkTag])
        #expect(try Self.outcome(w, admit, by: w.admin, on: deleted) == .rejected(.inviteRevoked))
        #expect(
            try Self.outcome(w, .deleteGroupLink(WireDeleteGroupLink()), by: w.admin, on: deleted)
                == .rejected(.groupLinkNotFound))
        #expect(
            try Self.outcome(w, Self.link(by: w.admin, tag: linkTag, joinInbox: joinInbox), by: w.admin, on: deleted)
                == .rejected(.invalidInviteTag))

        // An admin who loses their rights moves the invite identity: the
        // link, whose requests the old identity reads, goes with it.
        var demote = T.commit(
            T.changeRoles([w.admin.inboxID], wireRole: GroupRole.member.wire), by: w.owner, on: changed)
        demote.rotateInvites = try w.rotation(sealedTo: [w.owner, w.admin2].map(\.publicIdentity), on: changed)
        var rotated = changed
        #expect(try rotated.apply(demote, signedBy: w.owner).isApplied)
        #expect(rotated.groupLink == nil && rotated.retiredLinkTags.contains(linkTag))
    }

    static func pending(
        _ joiner: Identity, tag: Data, request: UInt8, role: GroupRole = .member
    ) -> WireGroupCommit.OneOf_Action {
        var add = WireAddPending()
        add.member = joiner.publicIdentity.wireBundle
        add.role = role.wire
        add.viaInvite.inviteID = W.id(0x10)
        add.viaInvite.inviteTag = tag
        add.viaInvite.joinRequestID = W.id(request)
        return .addPending(add)
    }

    @Test(
        "the approval queue: admins queue joiners through an invite; moderators and above admit (role ≤ theirs) or reject; one decision each"
    )
    func pendingQueue() throws {
        let w = try W()
        let jo = w.joiner
        #expect(
            try Self.outcome(w, Self.pending(jo, tag: w.tag, request: 1), by: w.moderator, on: w.state)
                == .rejected(.insufficientRole(needed: .admin, actual: .moderator)))
        #expect(
            try Self.outcome(w, Self.pending(jo, tag: W.id(0x99), request: 1), by: w.admin, on: w.state)
                == .rejected(.inviteRevoked))
        let queued = try w.applying(Self.pending(jo, tag: w.tag, request: 1), by: w.admin)
        #expect(queued.pending[jo.inboxID]?.joinRequestID == W.id(1) && queued.members[jo.inboxID] == nil)
        #expect(
            try Self.outcome(w, Self.pending(jo, tag: w.tag, request: 2), by: w.admin, on: queued)
                == .rejected(.alreadyPending(jo.inboxID)))
        // The same request never queues (or admits) twice.
        let admitSame = W.admit(jo.publicIdentity, inviteID: W.id(0x10), tag: w.tag, maxUses: 0, requestID: W.id(1))
        #expect(try Self.outcome(w, admitSame, by: w.admin, on: queued) == .rejected(.joinRequestAlreadyAdmitted))

        func admit(_ role: GroupRole) -> WireGroupCommit.OneOf_Action {
            var admit = WireAdmitPending()
            admit.inboxID = jo.inboxID.rawValue
            admit.role = role.wire
            return .admitPending(admit)
        }
        var reject = WireRejectPending()
        reject.inboxID = jo.inboxID.rawValue
        #expect(
            try Self.outcome(w, admit(.member), by: w.member, on: queued)
                == .rejected(.insufficientRole(needed: .moderator, actual: .member)))
        #expect(
            try Self.outcome(w, admit(.admin), by: w.moderator, on: queued)
                == .rejected(.insufficientRole(needed: .admin, actual: .moderator)))
        let admitted = try w.applying(admit(.moderator), by: w.moderator, to: queued)
        #expect(admitted.role(of: jo.inboxID) == .moderator && admitted.pending.isEmpty)
        #expect(admitted.members[jo.inboxID]?.addedBy == w.moderator.inboxID)
        // The second decision finds nobody waiting.
        #expect(
            try Self.outcome(w, .rejectPending(reject), by: w.admin, on: admitted) == .rejected(.notPending(jo.inboxID))
        )
        let turnedAway = try w.applying(.rejectPending(reject), by: w.moderator, to: queued)
        #expect(turnedAway.pending.isEmpty && turnedAway.members[jo.inboxID] == nil)
        #expect(try GroupTest.restored(queued) == queued)
    }

    @Test("invitations: admins invite (role ≤ theirs), once; withdrawn or declined, gone; an admission clears it")
    func invitations() throws {
        let w = try W()
        let jo = w.joiner
        func invite(_ role: GroupRole) -> WireGroupCommit.OneOf_Action {
            var invite = WireInviteMember()
            invite.member = jo.publicIdentity.wireBundle
            invite.role = role.wire
            return .inviteMember(invite)
        }
        #expect(
            try Self.outcome(w, invite(.member), by: w.moderator, on: w.state)
                == .rejected(.insufficientRole(needed: .admin, actual: .moderator)))
        #expect(
            try Self.outcome(w, invite(.owner), by: w.admin, on: w.state)
                == .rejected(.insufficientRole(needed: .owner, actual: .admin)))
        let invited = try w.applying(invite(.moderator), by: w.admin)
        #expect(invited.invited[jo.inboxID]?.role == .moderator)
        #expect(invited.roster.last?.status == .invited)
        #expect(
            try Self.outcome(w, invite(.member), by: w.admin, on: invited) == .rejected(.alreadyInvited(jo.inboxID)))
        var withdraw = WireWithdrawInvitation()
        withdraw.inboxID = jo.inboxID.rawValue
        withdraw.declined = true
        let declined = try w.applying(.withdrawInvitation(withdraw), by: w.admin2, to: invited)
        #expect(declined.invited.isEmpty)
        #expect(
            try Self.outcome(w, .withdrawInvitation(withdraw), by: w.admin, on: declined)
                == .rejected(.notInvited(jo.inboxID)))
        let joined = try w.applying(T.add(jo.publicIdentity, as: .moderator), by: w.admin, to: invited)
        #expect(joined.invited.isEmpty && joined.role(of: jo.inboxID) == .moderator)
        #expect(try GroupTest.restored(invited) == invited)
    }

    static func preferences(_ entries: [(String, Bool, UInt64)]) -> WireGroupCommit.OneOf_Action {
        var set = WireSetPreferences()
        set.preferences = entries.map { key, enabled, ttl in
            GroupPreferences.wire(key, GroupPreference(enabled: enabled, ttlSeconds: ttl))
        }
        return .setPreferences(set)
    }

    @Test(
        "preferences: the owner's, merged by key; a newer client's unknown keys are kept and ignored; bad values refused"
    )
    func preferences() throws {
        let w = try W()
        #expect(
            try Self.outcome(w, Self.preferences([("reactions", false, 0)]), by: w.admin, on: w.state)
                == .rejected(.insufficientRole(needed: .owner, actual: .admin)))
        let set = try w.applying(
            Self.preferences([("reactions", false, 0), ("polls", true, 0), ("timed_messages", true, 300)]), by: w.owner)
        let preferences = set.preferences
        #expect(!preferences[.reactions].enabled && preferences.messageTTLSeconds == 300)
        #expect(preferences.unknownKeys == ["polls"] && preferences[.voice].enabled)
        // Kept through a snapshot (a newcomer's welcome) and by a later change.
        let later = try w.applying(Self.preferences([("voice", false, 0)]), by: w.owner, to: set)
        #expect(later.preferences.unknownKeys == ["polls"] && !later.preferences[.reactions].enabled)
        #expect(try GroupTest.restored(later) == later)
        let refusals: [([(String, Bool, UInt64)], String)] = [
            ([("timed_messages", true, 0)], "timed messages need a time to live"),
            (
                [("timed_messages", true, GroupPreferences.maxTTLSeconds + 1)],
                "a timed message lives at most \(GroupPreferences.maxTTLSeconds) seconds"
            ),
            ([("", true, 0)], "a preference key is 1 to \(GroupPreferences.maxKeyBytes) bytes"),
            ([("voice", true, 0), ("voice", false, 0)], "the preference voice is set twice"),
            (
                (0...GroupPreferences.maxKeys).map { ("k\($0)", true, 0) },
                "a group has at most \(GroupPreferences.maxKeys) preferences"
            ),
        ]
        for (entries, reason) in refusals {
            #expect(
                try Self.outcome(w, Self.preferences(entries), by: w.owner, on: w.state)
                    == .rejected(.invalidPreferences(reason)))
        }
    }
}
