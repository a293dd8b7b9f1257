public import Foundation
public import RallyCrypto
public import RallyWire

/// Why a commit was not applied. Every member rejects the same commits for
/// the same reasons, so these are also what an author's client sees when
/// its commit lost a race.
public enum GroupRejection: Error, Sendable, Equatable, CustomStringConvertible {
    case wrongGroup
    case notCreated
    case alreadyCreated
    case staleEpoch(commit: UInt64, current: UInt64)
    case notAMember(InboxID)
    case authorKeysChanged(InboxID)
    case insufficientRole(needed: GroupRole, actual: GroupRole)
    case targetOutranksAuthor(InboxID)
    case alreadyMember(InboxID)
    case notAMemberTarget(InboxID)
    case cannotTargetSelf
    case invalidRole
    case invalidTarget(String)
    case lastOwner
    case rekeyPending
    case missingEpochKeys
    case epochKeysMismatch
    case unexpectedEpochKeys
    case emptyAction
    case invalidProfile(String)
    case exploded
    case invitesAlreadySetUp
    case invitesNotSetUp
    case invalidInviteTag
    case inviteRevoked
    case inviteUsedUp
    case joinRequestAlreadyAdmitted
    case banned(InboxID)
    case inviteSeedsMismatch
    /// The commit names another transcript than this member's for the same
    /// epoch: the relay showed members different histories.
    case forkedHistory
    /// An admin loses their rights: the commit must set up a new invite
    /// identity that they do not hold.
    case inviteRotationRequired
    /// An admin left with the invite seed; no admission until an admin
    /// rotates the invite identity.
    case inviteRotationPending
    case unexpectedInviteRotation
    case deleted
    /// The group has a link already: change its role or delete it first.
    case duplicateGroupLink
    case groupLinkNotFound
    case invalidLink(String)
    case notPending(InboxID)
    case alreadyPending(InboxID)
    case alreadyInvited(InboxID)
    case notInvited(InboxID)
    case invalidPreferences(String)

    public var description: String {
        switch self {
        case .wrongGroup: "commit is for another group"
        case .notCreated: "the group has not been created yet"
        case .alreadyCreated: "the group already exists"
        case .staleEpoch(let commit, let current): "commit builds on epoch \(commit), the group is at \(current)"
        case .notAMember(let inbox): "\(inbox) is not a member of the group"
        case .authorKeysChanged(let inbox): "\(inbox) signed with keys that are not the member's"
        case .insufficientRole(let needed, let actual): "needs role \(needed), author is \(actual)"
        case .targetOutranksAuthor(let inbox): "\(inbox) has a higher role than the author"
        case .alreadyMember(let inbox): "\(inbox) is already a member"
        case .notAMemberTarget(let inbox): "\(inbox) is not a member"
        case .cannotTargetSelf: "use leave to leave a group"
        case .invalidRole: "unknown role"
        case .invalidTarget(let reason): "invalid target: \(reason)"
        case .lastOwner:
            "the last owner cannot leave while others remain: make someone else owner first (`rally group role GROUP owner INBOX`) or delete the group (`rally group delete GROUP`)"
        case .rekeyPending: "the epoch key must be replaced first (someone left)"
        case .missingEpochKeys: "someone loses access, so the commit must carry a fresh epoch key"
        case .epochKeysMismatch: "the fresh epoch key must be sealed to exactly the remaining members"
        case .unexpectedEpochKeys: "this commit may not replace the epoch key"
        case .emptyAction: "commit has no action this client understands"
        case .invalidProfile(let reason): "invalid profile: \(reason)"
        case .exploded: "the group was exploded"
        case .invitesAlreadySetUp: "invites are already set up for this group"
        case .invitesNotSetUp: "invites are not set up for this group"
        case .invalidInviteTag: "an invite tag is 16 bytes, new and random"
        case .inviteRevoked: "the invite was revoked"
        case .inviteUsedUp: "the invite has no uses left"
        case .joinRequestAlreadyAdmitted: "this join request already admitted someone"
        case .banned(let inbox): "\(inbox) is banned from the group"
        case .inviteSeedsMismatch: "the invite seed must be sealed to exactly the group's admins"
        case .forkedHistory: "the commit builds on a history this member was not shown"
        case .inviteRotationRequired: "an admin loses their rights, so the commit must replace the invite identity"
        case .inviteRotationPending: "an admin left; invites admit nobody until an admin replaces the invite identity"
        case .unexpectedInviteRotation: "only an admin may replace the invite identity, once invites are set up"
        case .deleted: "the group was deleted"
        case .duplicateGroupLink:
            "duplicate_group_link: the group has a link already; change its role (`rally group link role`) or delete it first"
        case .groupLinkNotFound:
            "group_link_not_found: the group has no link; create one with `rally group link create`"
        case .invalidLink(let reason): "invalid group link: \(reason)"
        case .notPending(let inbox): "\(inbox) is not waiting for approval"
        case .alreadyPending(let inbox): "\(inbox) is already waiting for approval"
        case .alreadyInvited(let inbox): "\(inbox) is invited already"
        case .notInvited(let inbox): "\(inbox) has no invitation to this group"
        case .invalidPreferences(let reason): "invalid preferences: \(reason)"
        }
    }
}

/// A commit whose signature has been checked; `author` comes from the
/// signed bytes.
public struct VerifiedGroupCommit: Sendable, Equatable {
    public let commit: WireGroupCommit
    public let author: PublicIdentity
    /// The exact bytes the author signed; the transcript hashes them.
    public let signedBytes: Data

    public static let signingDomain = Data("rally-group-commit-v1".utf8)

    public static func verify(_ signed: WireSignedGroupCommit) throws(RallyCryptoError) -> VerifiedGroupCommit {
        let commit: WireGroupCommit
        do {
            commit = try FrameCodec.decode(WireGroupCommit.self, from: signed.commit, limit: WireLimits.maxPayloadBytes)
        } catch {
            throw .malformed("group commit")
        }
        let author = try PublicIdentity(wire: commit.author)
        guard author.signingKey.verifies(signed.signature, for: signingDomain + signed.commit) else {
            throw .invalidSignature("group commit by \(author.inboxID)")
        }
        guard commit.commitID.count == 16 else { throw .malformed("group commit id") }
        return VerifiedGroupCommit(commit: commit, author: author, signedBytes: signed.commit)
    }

    public static func sign(
        _ commit: WireGroupCommit, by identity: Identity
    ) throws(RallyCryptoError) -> WireSignedGroupCommit {
        let bytes = FrameCodec.encode(commit)
        var signed = WireSignedGroupCommit()
        signed.commit = bytes
        do {
            signed.signature = try identity.signingKey.signature(for: signingDomain + bytes)
        } catch {
            throw .invalidSignature("signing a group commit failed: \(error)")
        }
        return signed
    }
}

/// The rules: whether a commit is valid against a state, and what it
/// changes. Pure functions of (commit, state).
enum GroupRules {
    enum Mutation: Equatable {
        case create(GroupProfile)
        case add(PublicIdentity, GroupRole, Admission?)
        /// A single removal or role change is a batch of one.
        case removeMany([InboxID], ban: Bool, withMessages: Bool)
        case setRoles([InboxID], GroupRole)
        case block([InboxID], Bool)
        case setWelcome(String)
        case leave(InboxID)
        case setProfile(GroupProfile)
        case rekey
        case setUpInvites(PublicIdentity, tag: Data)
        case rotateInviteTag(Data)
        case explode
        case delete
        case setGroupLink(GroupLink)
        case deleteGroupLink
        case setAdmission(GroupAdmission)
        case addPending(PendingMember, Admission?)
        /// Several admissions in one commit (``add`` and ``addPending``
        /// only), applied in order.
        case admitMany([Mutation])
        case admitPending(InboxID, GroupRole)
        case rejectPending(InboxID)
        case invite(InvitedMember)
        case setPreferences([WireGroupPreference])
        case withdrawInvitation(InboxID)
    }

    struct Admission: Equatable {
        let inviteID: Data
        let joinRequestID: Data
    }

    struct InviteRotation: Equatable {
        let identity: PublicIdentity
        let tag: Data
    }

    struct Change {
        let mutation: Mutation
        /// Whether the commit replaces the epoch key.
        let rekeys: Bool
        var effects: [GroupEffect]
        var inviteRotation: InviteRotation? = nil
        var leaverWasAdmin = false
    }

    static let maxNameBytes = 256
    static let maxDescriptionBytes = 2048
    static let maxWelcomeBytes = 2048
    /// Most members one batch commit names: a commit stays well inside an
    /// envelope.
    static let maxBatch = 1000

    static func check(_ event: VerifiedGroupCommit, against state: GroupState) -> Result<Change, GroupRejection> {
        var change: Change
        switch checkAction(event, against: state) {
        case .failure(let rejection): return .failure(rejection)
        case .success(let checked): change = checked
        }
        let commit = event.commit
        let author = event.author
        let actor = state.role(of: author.inboxID) ?? .observer
        // Admins after this commit: who must hold the invite seed from now on.
        var admins = Set(state.members.values.filter { $0.role >= .admin }.map(\.inboxID))
        // Admins who lose their rights with this commit.
        var losing: [InboxID] = []
        switch change.mutation {
        case .removeMany(let inboxes, _, _): losing = inboxes
        case .setRoles(let inboxes, let role) where role < .admin: losing = inboxes
        case .setRoles(let inboxes, _): admins.formUnion(inboxes)
        case .leave(let inbox) where admins.contains(inbox): change.leaverWasAdmin = true
        default: break
        }
        let adminLosesRights = !admins.isDisjoint(with: losing)
        admins.subtract(losing)
        if commit.hasRotateInvites {
            guard actor >= .admin, state.inviteIdentity != nil else { return .failure(.unexpectedInviteRotation) }
            let rotate = commit.rotateInvites
            guard rotate.inviteTag.count == inviteTagByteCount, rotate.inviteTag != state.inviteTag,
                !state.retiredInviteTags.contains(rotate.inviteTag)
            else { return .failure(.invalidInviteTag) }
            let identity: PublicIdentity
            do {
                identity = try PublicIdentity(wire: rotate.inviteIdentity)
            } catch {
                return .failure(.invalidTarget(error.description))
            }
            guard isSealed(rotate.sealedSeeds, toExactly: admins) else { return .failure(.inviteSeedsMismatch) }
            change.inviteRotation = InviteRotation(identity: identity, tag: rotate.inviteTag)
            change.effects.append(.invitesSetUp(sealedSeeds: rotate.sealedSeeds))
        } else if adminLosesRights, state.inviteIdentity != nil {
            return .failure(.inviteRotationRequired)
        }
        return .success(change)
    }

    private static func checkAction(
        _ event: VerifiedGroupCommit, against state: GroupState
    ) -> Result<Change, GroupRejection> {
        let commit = event.commit
        let author = event.author
        guard commit.groupID == state.groupID else { return .failure(.wrongGroup) }

        if case .create(let create)? = commit.action {
            guard !state.isCreated else { return .failure(.alreadyCreated) }
            guard commit.epoch == 0 else { return .failure(.staleEpoch(commit: commit.epoch, current: 0)) }
            guard commit.parentTranscript == state.transcript else { return .failure(.forkedHistory) }
            let profile = GroupProfile(wire: create.profile)
            if let problem = profileProblem(profile) { return .failure(.invalidProfile(problem)) }
            guard commit.epochKeys.isEmpty else { return .failure(.unexpectedEpochKeys) }
            return .success(Change(mutation: .create(profile), rekeys: false, effects: [.created]))
        }
        guard state.isCreated else { return .failure(.notCreated) }
        guard !state.exploded else { return .failure(.exploded) }
        guard !state.deleted else { return .failure(.deleted) }
        guard commit.epoch == state.epoch else {
            return .failure(.staleEpoch(commit: commit.epoch, current: state.epoch))
        }
        guard commit.parentTranscript == state.transcript else { return .failure(.forkedHistory) }
        guard let authorMember = state.members[author.inboxID] else { return .failure(.notAMember(author.inboxID)) }
        guard authorMember.identity.hasSameKeys(as: author) else { return .failure(.authorKeysChanged(author.inboxID)) }
        let actor = authorMember.role

        func require(_ needed: GroupRole) -> GroupRejection? {
            actor >= needed ? nil : .insufficientRole(needed: needed, actual: actor)
        }
        func target(_ text: String) -> Result<GroupMember, GroupRejection> {
            guard let inbox = try? InboxID(validating: text) else { return .failure(.invalidTarget(text)) }
            guard inbox != author.inboxID else { return .failure(.cannotTargetSelf) }
            guard let member = state.members[inbox] else { return .failure(.notAMemberTarget(inbox)) }
            guard member.role <= actor else { return .failure(.targetOutranksAuthor(inbox)) }
            return .success(member)
        }
        func keysFor(remaining: Set<InboxID>) -> GroupRejection? {
            guard !commit.epochKeys.isEmpty, commit.epochKeyCommitment.count == 32 else { return .missingEpochKeys }
            return isSealed(commit.epochKeys, toExactly: remaining) ? nil : .epochKeysMismatch
        }
        let noKeys: GroupRejection? = commit.epochKeys.isEmpty ? nil : .unexpectedEpochKeys

        switch commit.action {
        case .addMember(let add)?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            return checkAdd(add, actor: actor, author: author, against: state).map { mutation, effect in
                Change(mutation: mutation, rekeys: false, effects: [effect])
            }

        case .addMembers(let batch)?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            return checkAddBatch(batch, actor: actor, author: author, against: state)

        case .removeMember(let remove)?:
            if let problem = require(.admin) { return .failure(problem) }
            let member: GroupMember
            switch target(remove.inboxID) {
            case .failure(let rejection): return .failure(rejection)
            case .success(let found): member = found
            }
            var remaining = Set(state.members.keys)
            remaining.remove(member.inboxID)
            if let problem = keysFor(remaining: remaining) { return .failure(problem) }
            return .success(
                Change(
                    mutation: .removeMany([member.inboxID], ban: remove.ban, withMessages: false), rekeys: true,
                    effects: [.memberRemoved(member.inboxID)]))

        case .changeRole(let change)?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            guard let role = GroupRole(wire: change.role) else { return .failure(.invalidRole) }
            guard role <= actor else { return .failure(.insufficientRole(needed: role, actual: actor)) }
            switch target(change.inboxID) {
            case .failure(let rejection):
                return .failure(rejection)
            case .success(let member):
                // No last-owner check needed: only an owner may target an
                // owner, never themself, so another owner always remains.
                var effects: [GroupEffect] = [.roleChanged(member.inboxID, role)]
                if change.hasInviteSeed {
                    guard role >= .admin, state.inviteIdentity != nil,
                        isSealed([change.inviteSeed], toExactly: [member.inboxID])
                    else { return .failure(.inviteSeedsMismatch) }
                    effects.append(.inviteSeedShared(change.inviteSeed))
                }
                return .success(Change(mutation: .setRoles([member.inboxID], role), rekeys: false, effects: effects))
            }

        case .leave?:
            if let problem = noKeys { return .failure(problem) }
            if actor == .owner, state.members.count > 1, !hasAnotherOwner(besides: author.inboxID, in: state) {
                return .failure(.lastOwner)
            }
            return .success(
                Change(mutation: .leave(author.inboxID), rekeys: false, effects: [.memberLeft(author.inboxID)]))

        case .updateProfile(let update)?:
            if let problem = require(.owner) ?? noKeys { return .failure(problem) }
            let profile = GroupProfile(wire: update.profile)
            if let problem = profileProblem(profile) { return .failure(.invalidProfile(problem)) }
            return .success(Change(mutation: .setProfile(profile), rekeys: false, effects: [.profileChanged]))

        case .rekey?:
            if !state.needsRekey, let problem = require(.admin) { return .failure(problem) }
            if let problem = keysFor(remaining: Set(state.members.keys)) { return .failure(problem) }
            return .success(Change(mutation: .rekey, rekeys: true, effects: []))

        case .setUpInvites(let setUp)?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            // Again only to replace an identity an admin left with.
            guard state.inviteIdentity == nil || state.invitesNeedRotation else {
                return .failure(.invitesAlreadySetUp)
            }
            guard setUp.inviteTag.count == inviteTagByteCount else { return .failure(.invalidInviteTag) }
            let identity: PublicIdentity
            do {
                identity = try PublicIdentity(wire: setUp.inviteIdentity)
            } catch {
                return .failure(.invalidTarget(error.description))
            }
            let admins = Set(state.members.values.filter { $0.role >= .admin }.map(\.inboxID))
            guard isSealed(setUp.sealedSeeds, toExactly: admins) else { return .failure(.inviteSeedsMismatch) }
            return .success(
                Change(
                    mutation: .setUpInvites(identity, tag: setUp.inviteTag), rekeys: false,
                    effects: [.invitesSetUp(sealedSeeds: setUp.sealedSeeds)]))

        case .rotateInviteTag(let rotate)?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            guard state.inviteIdentity != nil else { return .failure(.invitesNotSetUp) }
            guard rotate.inviteTag.count == inviteTagByteCount, rotate.inviteTag != state.inviteTag,
                !state.retiredInviteTags.contains(rotate.inviteTag)
            else {
                return .failure(.invalidInviteTag)
            }
            return .success(
                Change(mutation: .rotateInviteTag(rotate.inviteTag), rekeys: false, effects: [.inviteTagRotated]))

        case .explode?:
            if let problem = require(.owner) ?? noKeys { return .failure(problem) }
            return .success(Change(mutation: .explode, rekeys: false, effects: [.exploded]))

        case .changeRoles(let change)?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            guard let role = GroupRole(wire: change.role) else { return .failure(.invalidRole) }
            guard role <= actor else { return .failure(.insufficientRole(needed: role, actual: actor)) }
            let members: [GroupMember]
            switch targets(change.inboxIds, author: author, actor: actor, in: state) {
            case .failure(let rejection): return .failure(rejection)
            case .success(let found): members = found
            }
            var effects = members.map { GroupEffect.roleChanged($0.inboxID, role) }
            if !change.inviteSeeds.isEmpty {
                let promoted = Set(members.filter { $0.role < .admin }.map(\.inboxID))
                guard role >= .admin, state.inviteIdentity != nil, isSealed(change.inviteSeeds, toExactly: promoted)
                else { return .failure(.inviteSeedsMismatch) }
                effects += change.inviteSeeds.map { .inviteSeedShared($0) }
            }
            return .success(
                Change(mutation: .setRoles(members.map(\.inboxID), role), rekeys: false, effects: effects))

        case .removeMembers(let remove)?:
            if let problem = require(.admin) { return .failure(problem) }
            let members: [GroupMember]
            switch targets(remove.inboxIds, author: author, actor: actor, in: state) {
            case .failure(let rejection): return .failure(rejection)
            case .success(let found): members = found
            }
            let removed = members.map(\.inboxID)
            if let problem = keysFor(remaining: Set(state.members.keys).subtracting(removed)) {
                return .failure(problem)
            }
            var effects = removed.map(GroupEffect.memberRemoved)
            if remove.withMessages { effects.append(.messagesDeleted(removed)) }
            return .success(
                Change(
                    mutation: .removeMany(removed, ban: remove.ban, withMessages: remove.withMessages), rekeys: true,
                    effects: effects))

        case .blockMembers(let block)?:
            if let problem = require(.moderator) ?? noKeys { return .failure(problem) }
            let members: [GroupMember]
            switch targets(block.inboxIds, author: author, actor: actor, in: state) {
            case .failure(let rejection): return .failure(rejection)
            case .success(let found): members = found
            }
            let inboxes = members.map(\.inboxID)
            return .success(
                Change(
                    mutation: .block(inboxes, block.blocked), rekeys: false,
                    effects: [.blockedForAll(inboxes, block.blocked)]))

        case .setWelcome(let welcome)?:
            if let problem = require(.owner) ?? noKeys { return .failure(problem) }
            guard welcome.text.utf8.count <= maxWelcomeBytes else {
                return .failure(.invalidProfile("the welcome message is longer than \(maxWelcomeBytes) bytes"))
            }
            return .success(Change(mutation: .setWelcome(welcome.text), rekeys: false, effects: [.welcomeChanged]))

        case .deleteGroup?:
            if let problem = require(.owner) ?? noKeys { return .failure(problem) }
            return .success(Change(mutation: .delete, rekeys: false, effects: [.deleted]))

        case .setGroupLink(let set)?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            return checkGroupLink(set, author: author, actor: actor, in: state)

        case .deleteGroupLink?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            guard state.groupLink != nil else { return .failure(.groupLinkNotFound) }
            return .success(Change(mutation: .deleteGroupLink, rekeys: false, effects: [.groupLinkChanged]))

        case .setAdmission(let set)?:
            if let problem = require(.owner) ?? noKeys { return .failure(problem) }
            let admission = GroupAdmission(wire: set.admission)
            return .success(
                Change(mutation: .setAdmission(admission), rekeys: false, effects: [.admissionChanged(admission)]))

        case .addPending(let add)?:
            // Admins' clients answer join requests: they alone hold the
            // invite identity that reads them.
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            return checkAddPending(add, actor: actor, author: author, against: state).map { mutation, effect in
                Change(mutation: mutation, rekeys: false, effects: [effect])
            }

        case .admitPending(let admit)?:
            if let problem = require(.moderator) ?? noKeys { return .failure(problem) }
            guard !state.needsRekey else { return .failure(.rekeyPending) }
            guard let role = GroupRole(wire: admit.role) else { return .failure(.invalidRole) }
            guard role <= actor else { return .failure(.insufficientRole(needed: role, actual: actor)) }
            switch pendingTarget(admit.inboxID, in: state) {
            case .failure(let rejection):
                return .failure(rejection)
            case .success(let waiting):
                return .success(
                    Change(
                        mutation: .admitPending(waiting.inboxID, role), rekeys: false,
                        effects: [.memberAdded(waiting.inboxID, role), .pendingAdmitted(waiting.inboxID)]))
            }

        case .rejectPending(let reject)?:
            if let problem = require(.moderator) ?? noKeys { return .failure(problem) }
            switch pendingTarget(reject.inboxID, in: state) {
            case .failure(let rejection):
                return .failure(rejection)
            case .success(let waiting):
                return .success(
                    Change(
                        mutation: .rejectPending(waiting.inboxID), rekeys: false,
                        effects: [.pendingRejected(waiting.inboxID)]))
            }

        case .inviteMember(let invite)?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            guard let role = GroupRole(wire: invite.role) else { return .failure(.invalidRole) }
            guard role <= actor else { return .failure(.insufficientRole(needed: role, actual: actor)) }
            guard let identity = try? PublicIdentity(wire: invite.member) else {
                return .failure(.invalidTarget("invitee keys"))
            }
            let inbox = identity.inboxID
            guard state.members[inbox] == nil else { return .failure(.alreadyMember(inbox)) }
            guard state.pending[inbox] == nil else { return .failure(.alreadyPending(inbox)) }
            guard state.invited[inbox] == nil else { return .failure(.alreadyInvited(inbox)) }
            let invitee = InvitedMember(identity: identity, role: role, invitedBy: author.inboxID)
            return .success(Change(mutation: .invite(invitee), rekeys: false, effects: [.invited(inbox, role)]))

        case .withdrawInvitation(let withdraw)?:
            if let problem = require(.admin) ?? noKeys { return .failure(problem) }
            guard let inbox = try? InboxID(validating: withdraw.inboxID), inbox.rawValue == withdraw.inboxID else {
                return .failure(.invalidTarget(withdraw.inboxID))
            }
            guard state.invited[inbox] != nil else { return .failure(.notInvited(inbox)) }
            return .success(
                Change(
                    mutation: .withdrawInvitation(inbox), rekeys: false,
                    effects: [.invitationWithdrawn(inbox, declined: withdraw.declined)]))

        case .setPreferences(let set)?:
            if let problem = require(.owner) ?? noKeys { return .failure(problem) }
            if let problem = GroupPreferences.problem(with: set.preferences, merging: state.preferences) {
                return .failure(.invalidPreferences(problem))
            }
            return .success(
                Change(mutation: .setPreferences(set.preferences), rekeys: false, effects: [.preferencesChanged]))

        case .create?, nil:
            return .failure(.emptyAction)
        }
    }

    /// One member added by an admin, or admitted through an invite.
    static func checkAdd(
        _ add: WireAddMember, actor: GroupRole, author: PublicIdentity, against state: GroupState
    ) -> Result<(Mutation, GroupEffect), GroupRejection> {
        guard !state.needsRekey else { return .failure(.rekeyPending) }
        guard let role = GroupRole(wire: add.role) else { return .failure(.invalidRole) }
        guard role <= actor else { return .failure(.insufficientRole(needed: role, actual: actor)) }
        let identity: PublicIdentity
        do {
            identity = try PublicIdentity(wire: add.member)
        } catch {
            return .failure(.invalidTarget(error.description))
        }
        guard state.members[identity.inboxID] == nil else { return .failure(.alreadyMember(identity.inboxID)) }
        var admission: Admission?
        if add.hasViaInvite {
            switch checkAdmission(add.viaInvite, of: identity.inboxID, against: state) {
            case .failure(let rejection): return .failure(rejection)
            case .success(let admitted): admission = admitted
            }
        }
        return .success((.add(identity, role, admission), .memberAdded(identity.inboxID, role)))
    }

    /// One joiner queued for approval through an invite.
    static func checkAddPending(
        _ add: WireAddPending, actor: GroupRole, author: PublicIdentity, against state: GroupState
    ) -> Result<(Mutation, GroupEffect), GroupRejection> {
        guard let role = GroupRole(wire: add.role) else { return .failure(.invalidRole) }
        guard role <= actor else { return .failure(.insufficientRole(needed: role, actual: actor)) }
        guard let identity = try? PublicIdentity(wire: add.member) else {
            return .failure(.invalidTarget("pending member keys"))
        }
        let inbox = identity.inboxID
        guard state.members[inbox] == nil else { return .failure(.alreadyMember(inbox)) }
        guard state.pending[inbox] == nil else { return .failure(.alreadyPending(inbox)) }
        guard add.hasViaInvite else { return .failure(.invalidTarget("a pending joiner comes through an invite")) }
        switch checkAdmission(add.viaInvite, of: inbox, against: state) {
        case .failure(let rejection):
            return .failure(rejection)
        case .success(let admission):
            let member = PendingMember(
                identity: identity, role: role, addedBy: author.inboxID, inviteTag: add.viaInvite.inviteTag,
                joinRequestID: add.viaInvite.joinRequestID)
            return .success((.addPending(member, admission), .pendingAdded(inbox)))
        }
    }

    /// Most joiners one admission batch names: each entry carries a key
    /// bundle (about 300 bytes), so a full batch stays far inside an
    /// envelope.
    static let maxAdmissionBatch = 200

    /// A batch of admissions: each entry is checked as its single form on
    /// the state the entries before it leave, so a single-use invite
    /// admits one joiner of a batch and the same joiner never comes twice.
    static func checkAddBatch(
        _ batch: WireAddMembers, actor: GroupRole, author: PublicIdentity, against state: GroupState
    ) -> Result<Change, GroupRejection> {
        let count = batch.members.count + batch.pending.count
        guard count > 0 else { return .failure(.invalidTarget("the commit names no joiner")) }
        guard count <= maxAdmissionBatch else {
            return .failure(.invalidTarget("a commit admits at most \(maxAdmissionBatch) joiners"))
        }
        var running = state
        var mutations: [Mutation] = []
        var effects: [GroupEffect] = []
        mutations.reserveCapacity(count)
        effects.reserveCapacity(count)
        func take(_ checked: Result<(Mutation, GroupEffect), GroupRejection>) -> GroupRejection? {
            switch checked {
            case .failure(let rejection):
                return rejection
            case .success(let (mutation, effect)):
                running.mutate(mutation, author: author)
                mutations.append(mutation)
                effects.append(effect)
                return nil
            }
        }
        for add in batch.members {
            if let rejection = take(checkAdd(add, actor: actor, author: author, against: running)) {
                return .failure(rejection)
            }
        }
        for add in batch.pending {
            if let rejection = take(checkAddPending(add, actor: actor, author: author, against: running)) {
                return .failure(rejection)
            }
        }
        return .success(Change(mutation: .admitMany(mutations), rekeys: false, effects: effects))
    }

    /// The members a batch names: each a member other than the author,
    /// none above the author's role, none twice, at most ``maxBatch``.
    static func targets(
        _ texts: [String], author: PublicIdentity, actor: GroupRole, in state: GroupState
    ) -> Result<[GroupMember], GroupRejection> {
        guard !texts.isEmpty else { return .failure(.invalidTarget("the commit names no member")) }
        guard texts.count <= maxBatch else {
            return .failure(.invalidTarget("a commit names at most \(maxBatch) members"))
        }
        var members: [GroupMember] = []
        var seen: Set<InboxID> = []
        for text in texts {
            guard let inbox = try? InboxID(validating: text), inbox.rawValue == text else {
                return .failure(.invalidTarget(text))
            }
            guard inbox != author.inboxID else { return .failure(.cannotTargetSelf) }
            guard seen.insert(inbox).inserted else { return .failure(.invalidTarget("\(inbox) is named twice")) }
            guard let member = state.members[inbox] else { return .failure(.notAMemberTarget(inbox)) }
            guard member.role <= actor else { return .failure(.targetOutranksAuthor(inbox)) }
            members.append(member)
        }
        return .success(members)
    }

    static func pendingTarget(_ text: String, in state: GroupState) -> Result<PendingMember, GroupRejection> {
        guard let inbox = try? InboxID(validating: text), inbox.rawValue == text else {
            return .failure(.invalidTarget(text))
        }
        guard let waiting = state.pending[inbox] else { return .failure(.notPending(inbox)) }
        return .success(waiting)
    }

    /// A link is an invite by the author under a fresh tag of its own, to
    /// the group's current join inbox. The same tag again changes the role
    /// or admission of the link there is; another tag is a second link.
    static func checkGroupLink(
        _ set: WireSetGroupLink, author: PublicIdentity, actor: GroupRole, in state: GroupState
    ) -> Result<Change, GroupRejection> {
        guard let inviteIdentity = state.inviteIdentity else { return .failure(.invitesNotSetUp) }
        guard !state.invitesNeedRotation else { return .failure(.inviteRotationPending) }
        let link: GroupLink
        switch GroupLink.decode(signedInvite: set.signedInvite, role: set.role, admission: set.admission) {
        case .failure(let rejection): return .failure(rejection)
        case .success(let decoded): link = decoded
        }
        guard link.role <= actor else { return .failure(.insufficientRole(needed: link.role, actual: actor)) }
        if let existing = state.groupLink, existing.tag == link.tag {
            // A change of role or admission keeps the link any admin made.
            guard existing.invite == link.invite else {
                return .failure(.invalidLink("a change keeps the link's invite as it is"))
            }
        } else if !link.invite.issuer.hasSameKeys(as: author) {
            return .failure(.invalidLink("the link must be issued by the admin who sets it"))
        }
        guard link.invite.payload.joinInboxID == inviteIdentity.inboxID.rawValue else {
            return .failure(.invalidLink("the link must send join requests to the group's current invite identity"))
        }
        if let existing = state.groupLink {
            guard existing.tag == link.tag else { return .failure(.duplicateGroupLink) }
        } else {
            guard link.tag != state.inviteTag, !state.retiredInviteTags.contains(link.tag),
                !state.retiredLinkTags.contains(link.tag)
            else { return .failure(.invalidInviteTag) }
        }
        return .success(Change(mutation: .setGroupLink(link), rekeys: false, effects: [.groupLinkChanged]))
    }

    static let inviteTagByteCount = 16
    static let inviteIDByteCount = 16

    /// An admission through an invite holds only under the current tag,
    /// within the invite's use limit, once per join request, and never for
    /// a banned inbox. Two admins racing on one single-use invite: the
    /// second commit finds the use taken.
    static func checkAdmission(
        _ admission: WireInviteAdmission, of joiner: InboxID, against state: GroupState
    ) -> Result<Admission, GroupRejection> {
        // The seed's order: revoked (a rotated tag, then an admin who left
        // with the seed), already admitted, used up, banned. The join
        // request policy answers joiners from this same check.
        guard state.inviteIdentity != nil else { return .failure(.invitesNotSetUp) }
        guard admission.inviteID.count == inviteIDByteCount, admission.joinRequestID.count == 16 else {
            return .failure(.invalidTarget("invite admission"))
        }
        let viaLink = state.groupLink.map { $0.tag == admission.inviteTag } ?? false
        guard admission.inviteTag == state.inviteTag || viaLink else { return .failure(.inviteRevoked) }
        guard !state.invitesNeedRotation else { return .failure(.inviteRotationPending) }
        guard !state.admittedJoinRequests.contains(admission.joinRequestID) else {
            return .failure(.joinRequestAlreadyAdmitted)
        }
        if admission.maxUses > 0, state.inviteUses[admission.inviteID, default: 0] >= admission.maxUses {
            return .failure(.inviteUsedUp)
        }
        guard !state.banned.contains(joiner) else { return .failure(.banned(joiner)) }
        return .success(Admission(inviteID: admission.inviteID, joinRequestID: admission.joinRequestID))
    }

    /// Whether `sealed` has one entry per inbox of `recipients`, each under
    /// its canonical spelling (members look their entry up by the exact
    /// text of their inbox id).
    static func isSealed(_ sealed: [WireSealedEpochKey], toExactly recipients: Set<InboxID>) -> Bool {
        let sealedTo = sealed.compactMap { entry in
            (try? InboxID(validating: entry.inboxID)).flatMap { $0.rawValue == entry.inboxID ? $0 : nil }
        }
        return !sealed.isEmpty && sealedTo.count == sealed.count && Set(sealedTo) == recipients
            && sealedTo.count == recipients.count
    }

    static func hasAnotherOwner(besides inbox: InboxID, in state: GroupState) -> Bool {
        state.members.values.contains { $0.role == .owner && $0.inboxID != inbox }
    }

    static func profileProblem(_ profile: GroupProfile) -> String? {
        if profile.name.isEmpty { return "the name is empty" }
        if profile.name.utf8.count > maxNameBytes { return "the name is longer than \(maxNameBytes) bytes" }
        if profile.fullName.utf8.count > maxNameBytes {
            return "the full name is longer than \(maxNameBytes) bytes"
        }
        if profile.description.utf8.count > maxDescriptionBytes {
            return "the description is longer than \(maxDescriptionBytes) bytes"
        }
        if let image = profile.image {
            if image.data.isEmpty || image.data.count > GroupImage.maxBytes {
                return "the image is \(image.data.count) bytes; a group image is 1 to \(GroupImage.maxBytes) bytes"
            }
            if !GroupImage.mediaTypes.contains(image.mediaType) {
                return
                    "the image type \(image.mediaType) is not one of \(GroupImage.mediaTypes.joined(separator: ", "))"
            }
        }
        return nil
    }
}
