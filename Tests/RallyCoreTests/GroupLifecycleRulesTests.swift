import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// The lifecycle commits (batch roles and removals, block for all, the
/// welcome message, the profile) against the rules: a table of every action
/// × actor role × target role, and the edges of each.
@Suite("Group lifecycle rules")
struct GroupLifecycleRulesTests {
    typealias T = GroupTest

    enum Action: Sendable, CustomStringConvertible {
        case roles(GroupRole)
        case remove
        case block
        case unblock
        case welcome
        case profile
        case delete
        case admission
        case preferences
        /// Invite an outsider with the target's role.
        case invite
        /// Set the group link with the target's role.
        case link
        /// Admit the waiting joiner with the target's role.
        case admit
        case reject

        /// Whether the world needs invites set up and a joiner waiting.
        var needsQueue: Bool {
            switch self {
            case .invite, .link, .admit, .reject: true
            default: false
            }
        }

        static let all: [Action] =
            GroupRole.allCases.map(Action.roles) + [
                .remove, .block, .unblock, .welcome, .profile, .delete, .admission, .preferences, .invite, .link,
                .admit, .reject,
            ]

        var description: String {
            switch self {
            case .roles(let role): "role → \(role)"
            case .remove: "remove"
            case .block: "block"
            case .unblock: "unblock"
            case .welcome: "welcome"
            case .profile: "profile"
            case .delete: "delete"
            case .admission: "admission"
            case .preferences: "preferences"
            case .invite: "invite"
            case .link: "link"
            case .admit: "admit pending"
            case .reject: "reject pending"
            }
        }
    }

    /// What the seed's role rules say, written out independently of
    /// `GroupRules`: nil when allowed, else the refusal.
    static func expected(_ action: Action, actor: GroupRole, target: GroupRole) -> GroupRejection? {
        func needs(_ role: GroupRole) -> GroupRejection? {
            actor >= role ? nil : .insufficientRole(needed: role, actual: actor)
        }
        let outranked: GroupRejection? = target > actor ? .targetOutranksAuthor(Self.targetIdentity.inboxID) : nil
        switch action {
        case .roles(let role):
            return needs(.admin) ?? (role > actor ? .insufficientRole(needed: role, actual: actor) : nil) ?? outranked
        case .remove: return needs(.admin) ?? outranked
        case .block, .unblock: return needs(.moderator) ?? outranked
        case .welcome, .profile, .delete, .admission, .preferences: return needs(.owner)
        // These name a role to give (the target's), not a member to act on.
        case .invite, .link:
            return needs(.admin) ?? (target > actor ? .insufficientRole(needed: target, actual: actor) : nil)
        case .admit:
            return needs(.moderator) ?? (target > actor ? .insufficientRole(needed: target, actual: actor) : nil)
        case .reject: return needs(.moderator)
        }
    }

    static let owner = T.identity("Olive")
    static let actorIdentity = T.identity("Ann")
    static let targetIdentity = T.identity("Tom")
    static let bystander = T.identity("Bea")
    static let joiner = T.identity("Jo")
    static let outsider = T.identity("Xan")
    static let inviteKeys = try! InviteKeys(seed: SymmetricKey(data: Data(repeating: 0x5E, count: 32)))
    static let inviteTag = Data(repeating: 0x42, count: 16)

    /// Olive (owner) created the group; Ann has `actor`, Tom `target`, Bea
    /// is a member.
    static func world(actor: GroupRole, target: GroupRole, queue: Bool = false) throws -> GroupState {
        var state = GroupState(groupID: T.groupID)
        try applied(&state, T.commit(T.create(), by: owner, on: state), by: owner)
        for (identity, role) in [(actorIdentity, actor), (targetIdentity, target), (bystander, .member)] {
            try applied(&state, T.commit(T.add(identity.publicIdentity, as: role), by: owner, on: state), by: owner)
        }
        guard queue else { return state }
        // Invites set up, and Jo waiting for approval.
        let setUp = try InviteGroupWorld.setUp(
            inviteKeys.identity.publicIdentity, tag: inviteTag,
            seed: SymmetricKey(data: Data(repeating: 0x5E, count: 32)),
            sealedTo: state.sortedMembers.filter { $0.role >= .admin }.map(\.identity), on: state)
        try applied(&state, T.commit(setUp, by: owner, on: state), by: owner)
        try applied(
            &state,
            T.commit(GroupAdmissionRulesTests.pending(joiner, tag: inviteTag, request: 9), by: owner, on: state),
            by: owner)
        return state
    }

    struct NotApplied: Error { let outcome: GroupOutcome }

    static func applied(_ state: inout GroupState, _ commit: WireGroupCommit, by signer: Identity) throws {
        let outcome = try state.apply(commit, signedBy: signer)
        guard case .applied = outcome else { throw NotApplied(outcome: outcome) }
    }

    static func commit(_ action: Action, on state: GroupState) throws -> WireGroupCommit {
        let target = [targetIdentity.inboxID]
        switch action {
        case .roles(let role): return T.commit(T.changeRoles(target, wireRole: role.wire), by: actorIdentity, on: state)
        case .remove:
            var commit = T.commit(T.removeMembers(target), by: actorIdentity, on: state)
            try T.attachFreshKey(
                to: &commit, for: state.sortedMembers.map(\.identity).filter { $0.inboxID != targetIdentity.inboxID })
            return commit
        case .block: return T.commit(T.block(target), by: actorIdentity, on: state)
        case .unblock: return T.commit(T.block(target, false), by: actorIdentity, on: state)
        case .welcome: return T.commit(T.welcome("Welcome, hikers!"), by: actorIdentity, on: state)
        case .profile: return T.commit(T.updateProfile("Hikers II", "Longer walks"), by: actorIdentity, on: state)
        case .delete: return T.commit(.deleteGroup(WireDeleteGroup()), by: actorIdentity, on: state)
        case .admission:
            var set = WireSetAdmission()
            set.admission = .approval
            return T.commit(.setAdmission(set), by: actorIdentity, on: state)
        case .preferences:
            var set = WireSetPreferences()
            set.preferences = [GroupPreferences.wire("reactions", GroupPreference(enabled: false))]
            return T.commit(.setPreferences(set), by: actorIdentity, on: state)
        case .invite, .link, .admit, .reject:
            // The role to give is the target's, so the table's target column
            // reads as "the role given".
            let role = state.role(of: targetIdentity.inboxID) ?? .member
            return T.commit(try roleAction(action, role: role, on: state), by: actorIdentity, on: state)
        }
    }

    /// The actions that give a role (`role`) to someone outside the
    /// member list: an outsider invited, the link, the waiting joiner.
    static func roleAction(
        _ action: Action, role: GroupRole, on state: GroupState
    ) throws
        -> WireGroupCommit.OneOf_Action
    {
        switch action {
        case .invite:
            var invite = WireInviteMember()
            invite.member = outsider.publicIdentity.wireBundle
            invite.role = role.wire
            return .inviteMember(invite)
        case .link:
            return GroupAdmissionRulesTests.link(
                by: actorIdentity, tag: Data(repeating: 0x43, count: 16), joinInbox: inviteKeys.identity.inboxID,
                role: role)
        case .admit:
            var admit = WireAdmitPending()
            admit.inboxID = joiner.inboxID.rawValue
            admit.role = role.wire
            return .admitPending(admit)
        default:
            var reject = WireRejectPending()
            reject.inboxID = joiner.inboxID.rawValue
            return .rejectPending(reject)
        }
    }

    struct Row: Sendable, CustomTestStringConvertible {
        let action: Action
        let actor: GroupRole
        let target: GroupRole
        var testDescription: String { "\(action) by \(actor) on \(target)" }
    }

    static let table: [Row] = Action.all.flatMap { action in
        GroupRole.allCases.flatMap { actor in GroupRole.allCases.map { Row(action: action, actor: actor, target: $0) } }
    }

    @Test("every action × actor role × target role: applied exactly when the role rules allow it", arguments: table)
    func rulesTable(_ row: Row) throws {
        let state = try Self.world(actor: row.actor, target: row.target, queue: row.action.needsQueue)
        var next = state
        let outcome = try next.apply(Self.commit(row.action, on: state), signedBy: Self.actorIdentity)
        if let refusal = Self.expected(row.action, actor: row.actor, target: row.target) {
            #expect(outcome == .rejected(refusal))
            #expect(next == state)
            return
        }
        guard case .applied = outcome else {
            Issue.record("refused: \(outcome)")
            return
        }
        let tom = Self.targetIdentity.inboxID
        switch row.action {
        case .roles(let role): #expect(next.role(of: tom) == role)
        case .remove: #expect(next.members[tom] == nil && !next.blocked.contains(tom))
        case .block: #expect(next.blocked == [tom])
        case .unblock: #expect(next.blocked.isEmpty)
        case .welcome: #expect(next.welcomeMessage == "Welcome, hikers!")
        case .profile: #expect(next.profile.name == "Hikers II" && next.profile.description == "Longer walks")
        case .delete:
            #expect(next.deleted)
            var after = next
            #expect(
                try after.apply(T.commit(T.welcome("Still here?"), by: Self.owner, on: next), signedBy: Self.owner)
                    == .rejected(.deleted))
        case .admission: #expect(next.admission == .approval)
        case .preferences: #expect(!next.preferences[.reactions].enabled)
        case .invite: #expect(next.invited[Self.outsider.inboxID]?.role == row.target)
        case .link: #expect(next.groupLink?.role == row.target)
        case .admit: #expect(next.role(of: Self.joiner.inboxID) == row.target && next.pending.isEmpty)
        case .reject: #expect(next.pending.isEmpty && next.members[Self.joiner.inboxID] == nil)
        }
    }

    @Test(
        "GroupPermissions answers what the rules decide, for every action × actor role × target role", arguments: table)
    func permissionsAgreeWithTheRules(_ row: Row) throws {
        let state = try Self.world(actor: row.actor, target: row.target, queue: row.action.needsQueue)
        var next = state
        let outcome = try next.apply(Self.commit(row.action, on: state), signedBy: Self.actorIdentity)
        let applied = if case .applied = outcome { true } else { false }
        let permissions = GroupPermissions(of: Self.actorIdentity.inboxID, in: state)
        let allowed: Bool
        switch row.action {
        case .roles(let role): allowed = permissions.canChangeRole(of: row.target, to: role)
        case .remove: allowed = permissions.canRemove(row.target)
        case .block, .unblock: allowed = permissions.canBlock(row.target)
        case .welcome: allowed = permissions.canSetWelcomeMessage
        case .profile: allowed = permissions.canEditProfile
        case .delete: allowed = permissions.canDelete
        case .admission: allowed = permissions.canSetAdmission
        case .preferences: allowed = permissions.canSetPreferences
        case .invite: allowed = permissions.canAddMembers && permissions.assignableRoles.contains(row.target)
        case .link: allowed = permissions.canManageLink && permissions.assignableRoles.contains(row.target)
        case .admit: allowed = permissions.canReviewPending && row.target <= row.actor
        case .reject: allowed = permissions.canReviewPending
        }
        #expect(allowed == applied, "\(outcome)")
        if case .roles(let role) = row.action, row.target <= row.actor {
            #expect(permissions.assignableRoles.contains(role) == applied)
        }
    }

    @Test("a batch applies to every member it names at once, in one epoch")
    func batchRolesAndRemovals() throws {
        var state = try Self.world(actor: .admin, target: .member)
        let tom = Self.targetIdentity.inboxID
        let bea = Self.bystander.inboxID
        let before = state.epoch
        try Self.applied(
            &state,
            T.commit(T.changeRoles([tom, bea], wireRole: GroupRole.moderator.wire), by: Self.actorIdentity, on: state),
            by: Self.actorIdentity)
        #expect(state.role(of: tom) == .moderator && state.role(of: bea) == .moderator && state.epoch == before + 1)

        var remove = T.commit(
            T.removeMembers([tom, bea], ban: true, withMessages: true), by: Self.actorIdentity, on: state)
        try T.attachFreshKey(to: &remove, for: [Self.owner.publicIdentity, Self.actorIdentity.publicIdentity])
        var next = state
        let outcome = try next.apply(remove, signedBy: Self.actorIdentity)
        guard case .applied(let effects) = outcome else {
            Issue.record("refused: \(outcome)")
            return
        }
        #expect(effects.prefix(3) == [.memberRemoved(tom), .memberRemoved(bea), .messagesDeleted([tom, bea])])
        #expect(next.members.count == 2 && next.banned == [tom, bea])
    }

    @Test("a batch that names a stranger, the author, someone twice, nobody or too many is refused whole")
    func badBatches() throws {
        let state = try Self.world(actor: .admin, target: .member)
        let tom = Self.targetIdentity.inboxID
        let stranger = T.identity("Xan").inboxID
        let cases: [([InboxID], GroupRejection)] = [
            ([tom, stranger], .notAMemberTarget(stranger)),
            ([tom, Self.actorIdentity.inboxID], .cannotTargetSelf),
            ([tom, tom], .invalidTarget("\(tom) is named twice")),
            ([], .invalidTarget("the commit names no member")),
            (
                Array(repeating: tom, count: GroupRules.maxBatch + 1),
                .invalidTarget("a commit names at most \(GroupRules.maxBatch) members")
            ),
        ]
        for (targets, refusal) in cases {
            var next = state
            let commit = T.commit(
                T.changeRoles(targets, wireRole: GroupRole.observer.wire), by: Self.actorIdentity, on: state)
            #expect(try next.apply(commit, signedBy: Self.actorIdentity) == .rejected(refusal))
            #expect(next == state)
        }
    }

    @Test("a batch removal needs one fresh key sealed to exactly the members who remain")
    func removalNeedsTheRightKey() throws {
        let state = try Self.world(actor: .admin, target: .member)
        let tom = Self.targetIdentity.inboxID
        var noKey = state
        #expect(
            try noKey.apply(
                T.commit(T.removeMembers([tom]), by: Self.actorIdentity, on: state), signedBy: Self.actorIdentity)
                == .rejected(.missingEpochKeys))
        var wrong = T.commit(T.removeMembers([tom]), by: Self.actorIdentity, on: state)
        try T.attachFreshKey(to: &wrong, for: state.sortedMembers.map(\.identity))
        var next = state
        #expect(try next.apply(wrong, signedBy: Self.actorIdentity) == .rejected(.epochKeysMismatch))
    }

    @Test("block lives in the group state: it survives a welcome's snapshot and ends with the membership")
    func blockIsGroupState() throws {
        var state = try Self.world(actor: .moderator, target: .member)
        let tom = Self.targetIdentity.inboxID
        try Self.applied(&state, T.commit(T.block([tom]), by: Self.actorIdentity, on: state), by: Self.actorIdentity)
        try Self.applied(&state, T.commit(T.welcome("Hello"), by: Self.owner, on: state), by: Self.owner)
        let restored = try GroupState(
            snapshot: FrameCodec.decode(WireGroupSnapshot.self, from: FrameCodec.encode(state.snapshot), limit: 1 << 20)
        )
        #expect(restored == state && restored.blocked == [tom] && restored.welcomeMessage == "Hello")
        var remove = T.commit(T.remove(tom), by: Self.owner, on: state)
        try T.attachFreshKey(to: &remove, for: state.sortedMembers.map(\.identity).filter { $0.inboxID != tom })
        try Self.applied(&state, remove, by: Self.owner)
        #expect(state.blocked.isEmpty)
    }

    @Test("a welcome message and a profile stay within their limits; an image must be an image of at most 64 KiB")
    func limits() throws {
        let state = try Self.world(actor: .owner, target: .member)
        func refused(_ action: WireGroupCommit.OneOf_Action) throws -> GroupOutcome {
            var next = state
            return try next.apply(T.commit(action, by: Self.owner, on: state), signedBy: Self.owner)
        }
        #expect(
            try refused(T.welcome(String(repeating: "w", count: GroupRules.maxWelcomeBytes + 1)))
                == .rejected(.invalidProfile("the welcome message is longer than \(GroupRules.maxWelcomeBytes) bytes")))
        func profile(_ image: GroupImage?, fullName: String = "") -> WireGroupCommit.OneOf_Action {
            var update = WireUpdateProfile()
            update.profile = GroupProfile(name: "Hikers", description: "", fullName: fullName, image: image).wire
            return .updateProfile(update)
        }
        let big = GroupImage(mediaType: "image/png", data: Data(count: GroupImage.maxBytes + 1))
        #expect(
            try refused(profile(big))
                == .rejected(
                    .invalidProfile(
                        "the image is \(GroupImage.maxBytes + 1) bytes; a group image is 1 to \(GroupImage.maxBytes) bytes"
                    )))
        let svg = GroupImage(mediaType: "image/svg+xml", data: Data("<svg/>".utf8))
        guard case .rejected(.invalidProfile) = try refused(profile(svg)) else {
            Issue.record("an SVG was accepted")
            return
        }
        #expect(
            try refused(profile(nil, fullName: String(repeating: "f", count: GroupRules.maxNameBytes + 1)))
                == .rejected(.invalidProfile("the full name is longer than \(GroupRules.maxNameBytes) bytes")))
        let png = try #require(GroupImage(sniffing: Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3])))
        var next = state
        try Self.applied(
            &next, T.commit(profile(png, fullName: "The Sunday Hikers"), by: Self.owner, on: state), by: Self.owner)
        #expect(next.profile.image == png && next.profile.fullName == "The Sunday Hikers")
    }

    @Test("an image's type is told by its first bytes, never by a name")
    func sniffing() {
        #expect(GroupImage(sniffing: Data([0xFF, 0xD8, 0xFF, 0xE0]))?.mediaType == "image/jpeg")
        #expect(GroupImage(sniffing: Data("GIF89a....".utf8))?.mediaType == "image/gif")
        #expect(GroupImage(sniffing: Data("RIFF\0\0\0\0WEBPVP8 ".utf8))?.mediaType == "image/webp")
        #expect(GroupImage(sniffing: Data("<svg xmlns=".utf8)) == nil)
        #expect(GroupImage(sniffing: Data()) == nil)
    }
}
