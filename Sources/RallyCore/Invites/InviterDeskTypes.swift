public import Foundation
public import RallyCrypto

public enum InviteClientError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidInvite(InviteError)
    case notAdmin(group: String)
    case noInviteKeys(group: String)
    case invitesNotSetUp(group: String)
    case joinInboxUnknown(InboxID)
    case noJoin(String)
    case invalidOptions(String)
    case noInvitation(String)

    public var description: String {
        switch self {
        case .invalidInvite(let error): "\(error); nothing was sent"
        case .notAdmin(let group): "only admins of \(group) can manage its invites"
        case .noInviteKeys(let group):
            "this client does not hold the invite keys of \(group): they come with being made admin after invites were set up; ask an admin who has them to create the invite"
        case .invitesNotSetUp(let group): "\(group) has no invites yet: create one with `rally invite create`"
        case .joinInboxUnknown(let inbox):
            "the relay does not know this invite's join inbox (\(inbox)): the invite belongs to another relay; use --relay"
        case .noJoin(let what): "no join \(what): see `rally join status`"
        case .invalidOptions(let reason): reason
        case .noInvitation(let reference):
            "no invitation \"\(reference)\" here: see `rally group invitations`"
        }
    }
}

/// How an invite is made.
public struct InviteOptions: Sendable, Equatable {
    public var expiresIn: TimeInterval?
    public var singleUse = false
    /// 0 = unlimited.
    public var maxUses: UInt32 = 0
    public var role: GroupRole = .member
    /// Shown to the joiner before joining; defaults to the group's name.
    public var name: String?
    public var description: String?
    /// With `.approval` joiners wait in the group's approval queue (the
    /// group's own setting can ask for approval too).
    public var admission: GroupAdmission = .auto

    public init(
        expiresIn: TimeInterval? = nil, singleUse: Bool = false, maxUses: UInt32 = 0, role: GroupRole = .member,
        name: String? = nil, description: String? = nil, admission: GroupAdmission = .auto
    ) {
        self.admission = admission
        self.expiresIn = expiresIn
        self.singleUse = singleUse
        self.maxUses = maxUses
        self.role = role
        self.name = name
        self.description = description
    }
}

public struct CreatedInvite: Sendable, Equatable {
    public let invite: Invite
    public let slug: String
    public let appLink: String
    public let webLink: String
    public let groupID: String
}

/// What an admin's client did with one envelope of a group's invite inbox.
public struct JoinRequestReport: Sendable, Equatable {
    public let groupID: String
    public let seq: UInt64
    public let requestID: String?
    public let joiner: InboxID?
    public let decision: JoinRequestDecision?
    /// Whether a join error went out (sending one may fail; that is logged
    /// and blocks nothing).
    public let errorSent: Bool
}
