public import Foundation
public import RallyCrypto
public import RallyWire

/// How a joiner becomes a member: at once, or after a moderator's approval
/// (the seed's member admission).
public enum GroupAdmission: String, Sendable, Codable, CaseIterable {
    case auto
    case approval

    public init(wire: WireGroupAdmission) {
        // An admission a newer client added is at least as strict as approval.
        self = wire == .auto ? .auto : .approval
    }

    public var wire: WireGroupAdmission { self == .auto ? .auto : .approval }

    /// Approval wins: a group with approval, or an invite or link with it.
    public static func effective(_ group: GroupAdmission, _ invite: GroupAdmission) -> GroupAdmission {
        group == .approval || invite == .approval ? .approval : .auto
    }
}

/// The group's one link (the seed's section 10): an invite under a tag of
/// its own, with the role and admission new joiners get. Every admin sees
/// the same link, since it lives in the group state.
public struct GroupLink: Sendable, Equatable {
    public let invite: Invite
    public var role: GroupRole
    public var admission: GroupAdmission

    public var tag: Data { invite.tag }
    /// The slug every admin hands out.
    public var slug: String { InviteSlug.encode(invite.signed) }

    var wire: WireGroupLinkRecord {
        var record = WireGroupLinkRecord()
        record.signedInvite = FrameCodec.encode(invite.signed)
        record.role = role.wire
        record.admission = admission.wire
        return record
    }

    /// The link a commit or snapshot names: a signed invite that verifies.
    static func decode(
        signedInvite bytes: Data, role: WireGroupRole, admission: WireGroupAdmission
    ) -> Result<GroupLink, GroupRejection> {
        guard
            let signed = try? FrameCodec.decode(WireSignedInvite.self, from: bytes, limit: InviteSlug.maxInflatedBytes)
        else { return .failure(.invalidLink("the link's invite does not decode")) }
        let invite: Invite
        do {
            invite = try Invite.verify(signed, now: nil)
        } catch {
            return .failure(.invalidLink("the link's invite: \(error)"))
        }
        guard let role = GroupRole(wire: role) else { return .failure(.invalidRole) }
        return .success(GroupLink(invite: invite, role: role, admission: GroupAdmission(wire: admission)))
    }
}

/// A joiner waiting for a moderator's decision.
public struct PendingMember: Sendable, Equatable {
    public let identity: PublicIdentity
    /// The role they get if admitted as asked (a moderator may choose
    /// another, up to their own).
    public let role: GroupRole
    /// The admin whose client put them in the queue.
    public let addedBy: InboxID
    /// The invite tag and join request they asked with.
    public let inviteTag: Data
    public let joinRequestID: Data

    public var inboxID: InboxID { identity.inboxID }

    var wire: WirePendingMemberRecord {
        var record = WirePendingMemberRecord()
        record.identity = identity.wireBundle
        record.role = role.wire
        record.addedBy = addedBy.rawValue
        record.inviteTag = inviteTag
        record.joinRequestID = joinRequestID
        return record
    }
}

/// Someone an admin invited (`rally group add`): `invited` until they accept.
public struct InvitedMember: Sendable, Equatable {
    public let identity: PublicIdentity
    public let role: GroupRole
    public let invitedBy: InboxID

    public var inboxID: InboxID { identity.inboxID }

    var wire: WireInvitedMemberRecord {
        var record = WireInvitedMemberRecord()
        record.identity = identity.wireBundle
        record.role = role.wire
        record.invitedBy = invitedBy.rawValue
        return record
    }
}

/// Where someone stands in a group, in the seed's member lifecycle, as far
/// as the group state knows it (who left or was removed is history, not
/// state).
public enum GroupMemberStatus: String, Sendable, Codable {
    /// Invited by an admin; not yet accepted.
    case invited
    /// Asked to join; waits for a moderator's approval.
    case pendingApproval = "pending_approval"
    /// A member.
    case connected
    /// A member whose messages an admin hid for all.
    case blocked
}

/// One line of a group's roster: members, then joiners waiting for
/// approval, then invitees.
public struct GroupRosterEntry: Sendable, Equatable {
    public let identity: PublicIdentity
    public let role: GroupRole
    public let status: GroupMemberStatus

    public var inboxID: InboxID { identity.inboxID }
}

extension GroupState {
    /// Everyone the group state names, with their status.
    public var roster: [GroupRosterEntry] {
        sortedMembers.map {
            GroupRosterEntry(
                identity: $0.identity, role: $0.role, status: blocked.contains($0.inboxID) ? .blocked : .connected)
        }
            + pending.values.sorted { $0.inboxID < $1.inboxID }.map {
                GroupRosterEntry(identity: $0.identity, role: $0.role, status: .pendingApproval)
            }
            + invited.values.sorted { $0.inboxID < $1.inboxID }.map {
                GroupRosterEntry(identity: $0.identity, role: $0.role, status: .invited)
            }
    }
}
