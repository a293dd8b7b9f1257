public import RallyCrypto

/// What one member may do in a group at its current state: what an app
/// shows or hides. The rules (``GroupState/apply(_:)``) decide; these
/// answers are tested to agree with them for every pair of roles.
public struct GroupPermissions: Sendable, Equatable {
    /// The member's role; nil when they are not a member.
    public let role: GroupRole?

    public init(role: GroupRole?) { self.role = role }

    public init(of inbox: InboxID, in state: GroupState) { self.init(role: state.role(of: inbox)) }

    private func atLeast(_ needed: GroupRole) -> Bool { (role ?? .observer) >= needed && role != nil }

    public var canSend: Bool { role?.canSend ?? false }
    /// Name, full name, description, image; the welcome message.
    public var canEditProfile: Bool { atLeast(.owner) }
    public var canSetWelcomeMessage: Bool { atLeast(.owner) }
    public var canAddMembers: Bool { atLeast(.admin) }
    /// The roles this member may give: up to its own, if it manages roles.
    public var assignableRoles: [GroupRole] {
        guard atLeast(.admin), let role else { return [] }
        return GroupRole.allCases.filter { $0 <= role }
    }

    /// Whether this member may give `target` (another member) `newRole`.
    public func canChangeRole(of target: GroupRole, to newRole: GroupRole) -> Bool {
        guard let role, atLeast(.admin) else { return false }
        return target <= role && newRole <= role
    }

    /// Whether this member may remove another member with `target`'s role.
    public func canRemove(_ target: GroupRole) -> Bool { atLeast(.admin) && target <= (role ?? .observer) }

    /// Whether this member may block or unblock, for all, another member
    /// with `target`'s role.
    public func canBlock(_ target: GroupRole) -> Bool { atLeast(.moderator) && target <= (role ?? .observer) }

    public var canExplode: Bool { atLeast(.owner) }
    public var canDelete: Bool { atLeast(.owner) }
    /// Whether joiners wait for approval (the group's admission).
    public var canSetAdmission: Bool { atLeast(.owner) }
    public var canSetPreferences: Bool { atLeast(.owner) }
    /// Make, change and delete the group's link.
    public var canManageLink: Bool { atLeast(.admin) }
    /// See the pending queue, admit or reject, talk in the support chat.
    public var canReviewPending: Bool { atLeast(.moderator) }

    /// Whether this member may leave now: the last owner of a group with
    /// other members may not.
    public static func canLeave(_ inbox: InboxID, in state: GroupState) -> Bool {
        guard let role = state.role(of: inbox) else { return false }
        guard role == .owner, state.members.count > 1 else { return true }
        return GroupRules.hasAnotherOwner(besides: inbox, in: state)
    }
}
