import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// `GroupWorld` with invites set up by Olive (the owner): the seed sealed to
/// Olive, Ada and Abe, the tag `tag` (epoch 7). Jo and Jay are joiners,
/// not members. Shared by the invite rules and join request policy suites.
struct InviteGroupWorld {
    typealias T = GroupTest

    let groups: GroupWorld
    let seed = SymmetricKey(data: Data(repeating: 0x5E, count: 32))
    let otherSeed = SymmetricKey(data: Data(repeating: 0xE5, count: 32))
    let keys: InviteKeys
    let otherKeys: InviteKeys
    let tag = Data((0..<16).map { UInt8($0) })
    let newTag = Data((0..<16).map { UInt8(0x80 + $0) })
    /// The tag an invite rotation (an admin losing their rights) moves to.
    let rotatedTag = Data((0..<16).map { UInt8(0x40 + $0) })
    let joiner = GroupTest.identity("Jo")
    let joiner2 = GroupTest.identity("Jay")
    /// `groups.state` after the owner's SetUpInvites (epoch 7).
    let state: GroupState

    struct NotApplied: Error { let outcome: GroupOutcome }

    init(_ groups: GroupWorld? = nil) throws {
        let groups = try groups ?? GroupWorld()
        self.groups = groups
        keys = try InviteKeys(seed: seed)
        otherKeys = try InviteKeys(seed: otherSeed)
        var state = groups.state
        let action = try Self.setUp(
            keys.identity.publicIdentity, tag: tag, seed: seed,
            sealedTo: [groups.owner, groups.admin, groups.admin2].map(\.publicIdentity), on: state)
        try Self.require(state.apply(T.commit(action, by: groups.owner, on: state), signedBy: groups.owner))
        self.state = state
    }

    var owner: Identity { groups.owner }
    var admin: Identity { groups.admin }
    var admin2: Identity { groups.admin2 }
    var moderator: Identity { groups.moderator }
    var member: Identity { groups.member }
    var observer: Identity { groups.observer }
    var outsider: Identity { groups.outsider }

    /// The owner and both admins: who must receive the seed.
    var admins: [PublicIdentity] { [owner, admin, admin2].map(\.publicIdentity) }

    static func require(_ outcome: GroupOutcome) throws {
        guard case .applied = outcome else { throw NotApplied(outcome: outcome) }
    }

    /// A SetUpInvites action with `seed` sealed (as the client does) to
    /// `recipients` for the epoch the commit starts.
    static func setUp(
        _ identity: PublicIdentity, tag: Data, seed: SymmetricKey, sealedTo recipients: [PublicIdentity],
        on state: GroupState
    ) throws -> WireGroupCommit.OneOf_Action {
        .setUpInvites(try setUpInvites(identity, tag: tag, seed: seed, sealedTo: recipients, on: state))
    }

    static func setUpInvites(
        _ identity: PublicIdentity, tag: Data, seed: SymmetricKey, sealedTo recipients: [PublicIdentity],
        on state: GroupState
    ) throws -> WireSetUpInvites {
        var setUp = WireSetUpInvites()
        setUp.inviteIdentity = identity.wireBundle
        setUp.inviteTag = tag
        setUp.sealedSeeds = try EpochKeys.seal(
            seed, to: recipients, groupID: state.groupID, epoch: state.epoch + 1, info: EpochKeys.inviteSeedInfo)
        return setUp
    }

    static func rotate(_ tag: Data) -> WireGroupCommit.OneOf_Action {
        var rotate = WireRotateInviteTag()
        rotate.inviteTag = tag
        return .rotateInviteTag(rotate)
    }

    static let explode = WireGroupCommit.OneOf_Action.explode(WireExplodeGroup())

    /// An AddMember through an invite, as an admitting admin builds it.
    static func admit(
        _ joiner: PublicIdentity, as role: GroupRole = .member, inviteID: Data, tag: Data, maxUses: UInt32,
        requestID: Data
    ) -> WireGroupCommit.OneOf_Action {
        var add = WireAddMember()
        add.member = joiner.wireBundle
        add.role = role.wire
        add.viaInvite.inviteID = inviteID
        add.viaInvite.inviteTag = tag
        add.viaInvite.maxUses = maxUses
        add.viaInvite.joinRequestID = requestID
        return .addMember(add)
    }

    static func removeAndBan(_ inbox: InboxID) -> WireGroupCommit.OneOf_Action {
        var remove = WireRemoveMember()
        remove.inboxID = inbox.rawValue
        remove.ban = true
        return .removeMember(remove)
    }

    /// A `rotate_invites` as the client attaches it when an admin loses
    /// their rights: the other invite identity (`otherKeys`) and a new tag,
    /// its seed sealed to `recipients`.
    func rotation(
        sealedTo recipients: [PublicIdentity], on state: GroupState, tag: Data? = nil
    ) throws -> WireSetUpInvites {
        try Self.setUpInvites(
            otherKeys.identity.publicIdentity, tag: tag ?? rotatedTag, seed: otherSeed, sealedTo: recipients, on: state)
    }

    /// 16 bytes that name a request or an invite in tests.
    static func id(_ byte: UInt8) -> Data { Data(repeating: byte, count: 16) }

    /// A commit on `state`'s (default: `self.state`'s) current epoch.
    func commit(
        _ action: WireGroupCommit.OneOf_Action?, by author: Identity, on state: GroupState? = nil
    )
        -> WireGroupCommit
    {
        T.commit(action, by: author, on: state ?? self.state)
    }

    /// `state` after `action` by `author`, which must apply.
    func applying(
        _ action: WireGroupCommit.OneOf_Action, by author: Identity, to state: GroupState? = nil
    ) throws
        -> GroupState
    {
        var next = state ?? self.state
        try Self.require(next.apply(commit(action, by: author, on: next), signedBy: author))
        return next
    }

    /// `state` after `author` removed `target` (with a fresh key for the rest).
    func removing(
        _ target: InboxID, ban: Bool, by author: Identity, from state: GroupState? = nil
    ) throws
        -> GroupState
    {
        var next = state ?? self.state
        var commit = commit(ban ? Self.removeAndBan(target) : T.remove(target), by: author, on: next)
        try T.attachFreshKey(to: &commit, for: next.sortedMembers.map(\.identity).filter { $0.inboxID != target })
        try Self.require(next.apply(commit, signedBy: author))
        return next
    }
}

extension GroupRejectionCase {
    /// A ChangeRole carrying an invite seed entry addressed to `recipient`
    /// (the rules judge the addressing; the bytes are not opened).
    static func promotion(
        _ target: Identity, to role: GroupRole, sealedTo recipient: Identity
    ) -> WireGroupCommit.OneOf_Action {
        var change = WireChangeRole()
        change.inboxID = target.inboxID.rawValue
        change.role = role.wire
        change.inviteSeed.inboxID = recipient.inboxID.rawValue
        change.inviteSeed.encapsulatedKey = Data(repeating: 1, count: 32)
        change.inviteSeed.ciphertext = Data(repeating: 2, count: 48)
        return .changeRole(change)
    }

    /// Invite commits every member must reject.
    static let invites: [GroupRejectionCase] = [
        // SetUpInvites
        .init("set up: by a moderator") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed, sealedTo: w.admins, on: g.state)
            return on(
                g.state, g.commit(action, by: g.moderator), by: g.moderator,
                .insufficientRole(needed: .admin, actual: .moderator))
        },
        .init("set up: by a member") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed, sealedTo: w.admins, on: g.state)
            return on(
                g.state, g.commit(action, by: g.member), by: g.member,
                .insufficientRole(needed: .admin, actual: .member))
        },
        .init("set up: by an outsider") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed, sealedTo: w.admins, on: g.state)
            return on(g.state, g.commit(action, by: g.outsider), by: g.outsider, .notAMember(g.outsider.inboxID))
        },
        .init("set up: twice") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.newTag, seed: w.seed, sealedTo: w.admins, on: w.state)
            return on(w.state, w.commit(action, by: w.admin), by: w.admin, .invitesAlreadySetUp)
        },
        .init("set up: twice, with another invite identity") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.otherKeys.identity.publicIdentity, tag: w.newTag, seed: w.otherSeed, sealedTo: w.admins, on: w.state)
            return on(w.state, w.commit(action, by: w.owner), by: w.owner, .invitesAlreadySetUp)
        },
        .init("set up: an empty tag") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: Data(), seed: w.seed, sealedTo: w.admins, on: g.state)
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .invalidInviteTag)
        },
        .init("set up: a 15-byte tag") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag.prefix(15), seed: w.seed, sealedTo: w.admins, on: g.state)
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .invalidInviteTag)
        },
        .init("set up: a 17-byte tag") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag + Data([0]), seed: w.seed, sealedTo: w.admins, on: g.state)
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .invalidInviteTag)
        },
        .init("set up: the seed not sealed to one admin") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed,
                sealedTo: [g.owner, g.admin].map(\.publicIdentity), on: g.state)
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .inviteSeedsMismatch)
        },
        .init("set up: the seed not sealed to the owner") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed,
                sealedTo: [g.admin, g.admin2].map(\.publicIdentity), on: g.state)
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .inviteSeedsMismatch)
        },
        .init("set up: the seed also sealed to a moderator") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed,
                sealedTo: w.admins + [g.moderator.publicIdentity], on: g.state)
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .inviteSeedsMismatch)
        },
        .init("set up: the seed also sealed to an outsider") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed,
                sealedTo: w.admins + [g.outsider.publicIdentity], on: g.state)
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .inviteSeedsMismatch)
        },
        .init("set up: the seed sealed to nobody") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed, sealedTo: [], on: g.state)
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .inviteSeedsMismatch)
        },
        .init("set up: the seed sealed twice to one admin") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed,
                sealedTo: w.admins + [g.admin.publicIdentity], on: g.state)
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .inviteSeedsMismatch)
        },
        .init("set up: an entry under an uppercased inbox id") { g in
            let w = try InviteGroupWorld(g)
            var setUp = try InviteGroupWorld.setUpInvites(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed, sealedTo: w.admins, on: g.state)
            setUp.sealedSeeds[0].inboxID = setUp.sealedSeeds[0].inboxID.uppercased()
            return on(g.state, g.commit(.setUpInvites(setUp), by: g.admin), by: g.admin, .inviteSeedsMismatch)
        },
        .init("set up: carries epoch keys") { g in
            let w = try InviteGroupWorld(g)
            let action = try InviteGroupWorld.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed, sealedTo: w.admins, on: g.state)
            var commit = g.commit(action, by: g.admin)
            try T.attachFreshKey(to: &commit, for: g.members())
            return on(g.state, commit, by: g.admin, .unexpectedEpochKeys)
        },
        .init("set up: an invite identity without keys") { g in
            let w = try InviteGroupWorld(g)
            var setUp = try InviteGroupWorld.setUpInvites(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed, sealedTo: w.admins, on: g.state)
            setUp.inviteIdentity = WireKeyBundle()
            let reason = RallyCryptoError.invalidPublicKey("key bundle keys must be 32 bytes each").description
            return on(g.state, g.commit(.setUpInvites(setUp), by: g.admin), by: g.admin, .invalidTarget(reason))
        },
        // RotateInviteTag
        .init("rotate: before invites are set up") { g in
            let w = try InviteGroupWorld(g)
            return on(g.state, g.commit(InviteGroupWorld.rotate(w.newTag), by: g.owner), by: g.owner, .invitesNotSetUp)
        },
        .init("rotate: to the current tag") { g in
            let w = try InviteGroupWorld(g)
            return on(w.state, w.commit(InviteGroupWorld.rotate(w.tag), by: w.admin), by: w.admin, .invalidInviteTag)
        },
        // ChangeRole carrying the invite seed
        .init("promote: seed sealed to someone else") { g in
            let w = try InviteGroupWorld(g)
            let action = Self.promotion(w.member, to: .admin, sealedTo: w.moderator)
            return on(w.state, w.commit(action, by: w.admin), by: w.admin, .inviteSeedsMismatch)
        },
        .init("promote: a seed with a role below admin") { g in
            let w = try InviteGroupWorld(g)
            let action = Self.promotion(w.member, to: .moderator, sealedTo: w.member)
            return on(w.state, w.commit(action, by: w.admin), by: w.admin, .inviteSeedsMismatch)
        },
        .init("promote: a seed before invites are set up") { g in
            let w = try InviteGroupWorld(g)
            _ = w
            let action = Self.promotion(g.member, to: .admin, sealedTo: g.member)
            return on(g.state, g.commit(action, by: g.owner), by: g.owner, .inviteSeedsMismatch)
        },
        .init("rotate: back to a revoked tag") { g in
            let w = try InviteGroupWorld(g)
            let rotated = try w.applying(InviteGroupWorld.rotate(w.newTag), by: w.admin2)
            return on(
                rotated, w.commit(InviteGroupWorld.rotate(w.tag), by: w.admin, on: rotated), by: w.admin,
                .invalidInviteTag)
        },
        .init("rotate: to a 15-byte tag") { g in
            let w = try InviteGroupWorld(g)
            return on(
                w.state, w.commit(InviteGroupWorld.rotate(w.newTag.prefix(15)), by: w.admin), by: w.admin,
                .invalidInviteTag)
        },
        .init("rotate: to an empty tag") { g in
            let w = try InviteGroupWorld(g)
            return on(w.state, w.commit(InviteGroupWorld.rotate(Data()), by: w.admin), by: w.admin, .invalidInviteTag)
        },
        .init("rotate: by a member") { g in
            let w = try InviteGroupWorld(g)
            return on(
                w.state, w.commit(InviteGroupWorld.rotate(w.newTag), by: w.member), by: w.member,
                .insufficientRole(needed: .admin, actual: .member))
        },
        .init("rotate: by a moderator") { g in
            let w = try InviteGroupWorld(g)
            return on(
                w.state, w.commit(InviteGroupWorld.rotate(w.newTag), by: w.moderator), by: w.moderator,
                .insufficientRole(needed: .admin, actual: .moderator))
        },
        .init("rotate: carries epoch keys") { g in
            let w = try InviteGroupWorld(g)
            var commit = w.commit(InviteGroupWorld.rotate(w.newTag), by: w.admin)
            try T.attachFreshKey(to: &commit, for: g.members())
            return on(w.state, commit, by: w.admin, .unexpectedEpochKeys)
        },
        // ExplodeGroup
        .init("explode: by an admin") { g in
            on(
                g.state, g.commit(InviteGroupWorld.explode, by: g.admin), by: g.admin,
                .insufficientRole(needed: .owner, actual: .admin))
        },
        .init("explode: by a member") { g in
            on(
                g.state, g.commit(InviteGroupWorld.explode, by: g.member), by: g.member,
                .insufficientRole(needed: .owner, actual: .member))
        },
        .init("explode: carries epoch keys") { g in
            var commit = g.commit(InviteGroupWorld.explode, by: g.owner)
            try T.attachFreshKey(to: &commit, for: g.members())
            return on(g.state, commit, by: g.owner, .unexpectedEpochKeys)
        },
        // AddMember through an invite
        .init("admit: before invites are set up") { g in
            let w = try InviteGroupWorld(g)
            let action = InviteGroupWorld.admit(
                w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(g.state, g.commit(action, by: g.admin), by: g.admin, .invitesNotSetUp)
        },
        .init("admit: under a tag that is not the group's") { g in
            let w = try InviteGroupWorld(g)
            let action = InviteGroupWorld.admit(
                w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.newTag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(w.state, w.commit(action, by: w.admin), by: w.admin, .inviteRevoked)
        },
        .init("admit: under the tag rotated away") { g in
            let w = try InviteGroupWorld(g)
            let rotated = try w.applying(InviteGroupWorld.rotate(w.newTag), by: w.admin2)
            let action = InviteGroupWorld.admit(
                w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(rotated, w.commit(action, by: w.admin, on: rotated), by: w.admin, .inviteRevoked)
        },
        .init("admit: a 15-byte invite id") { g in
            let w = try InviteGroupWorld(g)
            let action = InviteGroupWorld.admit(
                w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1).prefix(15), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(w.state, w.commit(action, by: w.admin), by: w.admin, .invalidTarget("invite admission"))
        },
        .init("admit: a 17-byte join request id") { g in
            let w = try InviteGroupWorld(g)
            let action = InviteGroupWorld.admit(
                w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2) + Data([2]))
            return on(w.state, w.commit(action, by: w.admin), by: w.admin, .invalidTarget("invite admission"))
        },
        .init("admit: a single-use invite a second time, for another request") { g in
            let w = try InviteGroupWorld(g)
            let once = try w.applying(
                InviteGroupWorld.admit(
                    w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 1,
                    requestID: InviteGroupWorld.id(2)), by: w.admin)
            let action = InviteGroupWorld.admit(
                w.joiner2.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 1,
                requestID: InviteGroupWorld.id(3))
            return on(once, w.commit(action, by: w.admin2, on: once), by: w.admin2, .inviteUsedUp)
        },
        .init("admit: a two-use invite a third time") { g in
            let w = try InviteGroupWorld(g)
            var state = w.state
            for (joiner, request) in [(w.joiner, UInt8(2)), (w.joiner2, 3)] {
                state = try w.applying(
                    InviteGroupWorld.admit(
                        joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 2,
                        requestID: InviteGroupWorld.id(request)), by: w.admin, to: state)
            }
            let action = InviteGroupWorld.admit(
                w.outsider.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 2,
                requestID: InviteGroupWorld.id(4))
            return on(state, w.commit(action, by: w.admin, on: state), by: w.admin, .inviteUsedUp)
        },
        .init("admit: a join request that already admitted someone") { g in
            let w = try InviteGroupWorld(g)
            let once = try w.applying(
                InviteGroupWorld.admit(
                    w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                    requestID: InviteGroupWorld.id(2)), by: w.admin)
            let action = InviteGroupWorld.admit(
                w.joiner2.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(once, w.commit(action, by: w.admin2, on: once), by: w.admin2, .joinRequestAlreadyAdmitted)
        },
        .init("admit: the same join request through another invite") { g in
            let w = try InviteGroupWorld(g)
            let once = try w.applying(
                InviteGroupWorld.admit(
                    w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                    requestID: InviteGroupWorld.id(2)), by: w.admin)
            let action = InviteGroupWorld.admit(
                w.joiner2.publicIdentity, inviteID: InviteGroupWorld.id(9), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(once, w.commit(action, by: w.admin, on: once), by: w.admin, .joinRequestAlreadyAdmitted)
        },
        .init("admit: a banned inbox") { g in
            let w = try InviteGroupWorld(g)
            let banned = try w.removing(w.member.inboxID, ban: true, by: w.admin)
            let action = InviteGroupWorld.admit(
                w.member.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(banned, w.commit(action, by: w.admin, on: banned), by: w.admin, .banned(w.member.inboxID))
        },
        .init("admit: someone who is a member already") { g in
            let w = try InviteGroupWorld(g)
            let action = InviteGroupWorld.admit(
                w.member.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(w.state, w.commit(action, by: w.admin), by: w.admin, .alreadyMember(w.member.inboxID))
        },
        .init("admit: by a moderator") { g in
            let w = try InviteGroupWorld(g)
            let action = InviteGroupWorld.admit(
                w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(
                w.state, w.commit(action, by: w.moderator), by: w.moderator,
                .insufficientRole(needed: .admin, actual: .moderator))
        },
        .init("admit: while a rekey is pending") { g in
            let w = try InviteGroupWorld(g)
            let left = try w.applying(T.leave, by: w.member)
            let action = InviteGroupWorld.admit(
                w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(left, w.commit(action, by: w.admin, on: left), by: w.admin, .rekeyPending)
        },
        // The order of the admission checks.
        .init("admit order: a revoked tag before an admitted request") { g in
            let w = try InviteGroupWorld(g)
            let once = try w.applying(
                InviteGroupWorld.admit(
                    w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 1,
                    requestID: InviteGroupWorld.id(2)), by: w.admin)
            let rotated = try w.applying(InviteGroupWorld.rotate(w.newTag), by: w.admin, to: once)
            let action = InviteGroupWorld.admit(
                w.joiner2.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 1,
                requestID: InviteGroupWorld.id(2))
            return on(rotated, w.commit(action, by: w.admin, on: rotated), by: w.admin, .inviteRevoked)
        },
        .init("admit order: an admitted request before a ban") { g in
            let w = try InviteGroupWorld(g)
            let once = try w.applying(
                InviteGroupWorld.admit(
                    w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                    requestID: InviteGroupWorld.id(2)), by: w.admin)
            let banned = try w.removing(w.member.inboxID, ban: true, by: w.admin, from: once)
            let action = InviteGroupWorld.admit(
                w.member.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 0,
                requestID: InviteGroupWorld.id(2))
            return on(banned, w.commit(action, by: w.admin, on: banned), by: w.admin, .joinRequestAlreadyAdmitted)
        },
        .init("admit order: a used-up invite before a ban (the seed's order)") { g in
            let w = try InviteGroupWorld(g)
            let once = try w.applying(
                InviteGroupWorld.admit(
                    w.joiner.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 1,
                    requestID: InviteGroupWorld.id(2)), by: w.admin)
            let banned = try w.removing(w.member.inboxID, ban: true, by: w.admin, from: once)
            let action = InviteGroupWorld.admit(
                w.member.publicIdentity, inviteID: InviteGroupWorld.id(1), tag: w.tag, maxUses: 1,
                requestID: InviteGroupWorld.id(3))
            return on(banned, w.commit(action, by: w.admin, on: banned), by: w.admin, .inviteUsedUp)
        },
    ]
}

@Suite("Invite rules")
struct InviteRulesTests {
    typealias T = GroupTest
    typealias W = InviteGroupWorld

    @Test(arguments: GroupRejectionCase.invites)
    func rejectsWithoutChangingTheState(_ testCase: GroupRejectionCase) throws {
        let scenario = try testCase.build(GroupWorld())
        var state = scenario.state
        let outcome = try state.apply(scenario.commit, signedBy: scenario.signer)
        #expect(outcome == .rejected(scenario.expected))
        #expect(state == scenario.state)
    }

    /// The effects of an applied commit that does not replace the key.
    private func expectApplied(
        _ action: WireGroupCommit.OneOf_Action, by author: Identity, on state: GroupState, effects: [GroupEffect],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> GroupState {
        var next = state
        let commit = T.commit(action, by: author, on: state)
        let outcome = try next.apply(commit, signedBy: author)
        let advance = GroupEffect.epochAdvanced(epoch: state.epoch + 1, commitID: commit.commitID, freshKey: nil)
        #expect(outcome == .applied(effects + [advance]), sourceLocation: sourceLocation)
        #expect(next.epoch == state.epoch + 1, sourceLocation: sourceLocation)
        return next
    }

    // MARK: SetUpInvites

    @Test(arguments: [GroupRole.admin, .owner])
    func anAdminOrOwnerSetsUpInvitesAndEveryAdminOpensTheSeed(_ role: GroupRole) throws {
        let w = try W()
        let author = role == .owner ? w.owner : w.admin
        let state = w.groups.state
        let setUp = try W.setUpInvites(
            w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed, sealedTo: w.admins, on: state)
        let next = try expectApplied(
            .setUpInvites(setUp), by: author, on: state, effects: [.invitesSetUp(sealedSeeds: setUp.sealedSeeds)])
        #expect(next.inviteIdentity == w.keys.identity.publicIdentity)
        #expect(next.inviteTag == w.tag)
        #expect(next.inviteUses.isEmpty)
        #expect(next.admittedJoinRequests.isEmpty)
        #expect(next.banned.isEmpty)
        #expect(!next.exploded)
        #expect(next.members == state.members)
        for admin in [w.owner, w.admin, w.admin2] {
            let opened = try EpochKeys.openEntry(
                setUp.sealedSeeds, as: admin, groupID: state.groupID, epoch: next.epoch, info: EpochKeys.inviteSeedInfo)
            #expect(try InviteKeys(seed: opened).identity.inboxID == w.keys.identity.inboxID)
        }
        #expect(throws: RallyCryptoError.wrongRecipient) {
            try EpochKeys.openEntry(
                setUp.sealedSeeds, as: w.moderator, groupID: state.groupID, epoch: next.epoch,
                info: EpochKeys.inviteSeedInfo)
        }
        // Sealed as an invite seed, not as an epoch key.
        #expect(throws: RallyCryptoError.decryptionFailed) {
            try EpochKeys.openEntry(
                setUp.sealedSeeds, as: w.admin, groupID: state.groupID, epoch: next.epoch,
                info: Data("rally-epoch-key-v1".utf8))
        }
    }

    @Test func setUpIsAllowedWhileARekeyIsPending() throws {
        let w = try W()
        let afterLeave = w.groups.afterLeave
        let setUp = try W.setUpInvites(
            w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed, sealedTo: w.admins, on: afterLeave)
        let next = try expectApplied(
            .setUpInvites(setUp), by: w.admin, on: afterLeave, effects: [.invitesSetUp(sealedSeeds: setUp.sealedSeeds)])
        #expect(next.needsRekey)
    }

    // MARK: RotateInviteTag and ExplodeGroup

    @Test func anAdminRotatesTheTagAndKeepsTheInviteIdentityAndCounts() throws {
        let w = try W()
        let admitted = try w.applying(
            W.admit(w.joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 3, requestID: W.id(2)),
            by: w.admin)
        let rotated = try expectApplied(W.rotate(w.newTag), by: w.admin2, on: admitted, effects: [.inviteTagRotated])
        #expect(rotated.inviteTag == w.newTag)
        #expect(rotated.inviteIdentity == w.keys.identity.publicIdentity)
        #expect(rotated.inviteUses == [W.id(1): 1])
        #expect(rotated.admittedJoinRequests == [W.id(2)])
        // The new tag admits and keeps counting the invite's uses.
        let again = try w.applying(
            W.admit(w.joiner2.publicIdentity, inviteID: W.id(1), tag: w.newTag, maxUses: 3, requestID: W.id(3)),
            by: w.admin, to: rotated)
        #expect(again.inviteUses == [W.id(1): 2])
    }

    @Test func theOwnerExplodesTheGroup() throws {
        let w = try W()
        let exploded = try expectApplied(W.explode, by: w.owner, on: w.state, effects: [.exploded])
        #expect(exploded.exploded)
        #expect(exploded.members == w.state.members)
        // Also without invites set up.
        let plain = try expectApplied(W.explode, by: w.owner, on: w.groups.state, effects: [.exploded])
        #expect(plain.exploded)
    }

    /// Every kind of commit after the explosion, each otherwise valid.
    static let afterExplosion: [String] = [
        "add", "admit", "remove", "ban", "change role", "leave", "update profile", "rekey", "set up invites",
        "rotate tag", "explode again", "empty action", "stale epoch", "by an outsider",
    ]

    @Test(arguments: afterExplosion)
    func noCommitAppliesAfterTheGroupExploded(_ kind: String) throws {
        let w = try W()
        let exploded = try w.applying(W.explode, by: w.owner)
        let members = exploded.sortedMembers.map(\.identity)
        var author = w.owner
        var commit: WireGroupCommit
        switch kind {
        case "add": commit = w.commit(T.add(w.joiner.publicIdentity, as: .member), by: author, on: exploded)
        case "admit":
            commit = w.commit(
                W.admit(w.joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(2)),
                by: author, on: exploded)
        case "remove", "ban":
            commit = w.commit(
                kind == "ban" ? W.removeAndBan(w.member.inboxID) : T.remove(w.member.inboxID), by: author, on: exploded)
            try T.attachFreshKey(to: &commit, for: members.filter { $0.inboxID != w.member.inboxID })
        case "change role": commit = w.commit(T.changeRole(w.member.inboxID, to: .admin), by: author, on: exploded)
        case "leave":
            author = w.member
            commit = w.commit(T.leave, by: author, on: exploded)
        case "update profile": commit = w.commit(T.updateProfile("After"), by: author, on: exploded)
        case "rekey":
            commit = w.commit(T.rekey, by: author, on: exploded)
            try T.attachFreshKey(to: &commit, for: members)
        case "set up invites":
            let groups = try GroupWorld()
            var plain = groups.state
            try W.require(plain.apply(groups.commit(W.explode, by: groups.owner), signedBy: groups.owner))
            let action = try W.setUp(
                w.keys.identity.publicIdentity, tag: w.tag, seed: w.seed,
                sealedTo: [groups.owner, groups.admin, groups.admin2].map(\.publicIdentity), on: plain)
            var state = plain
            let setUp = T.commit(action, by: groups.owner, on: plain)
            #expect(try state.apply(setUp, signedBy: groups.owner) == .rejected(.exploded))
            #expect(state == plain)
            return
        case "rotate tag": commit = w.commit(W.rotate(w.newTag), by: author, on: exploded)
        case "explode again": commit = w.commit(W.explode, by: author, on: exploded)
        case "empty action": commit = w.commit(nil, by: author, on: exploded)
        case "stale epoch": commit = w.commit(T.updateProfile("After"), by: author, on: w.state)
        case "by an outsider":
            author = w.outsider
            commit = w.commit(T.updateProfile("After"), by: author, on: exploded)
        default:
            Issue.record("unknown kind \(kind)")
            return
        }
        var state = exploded
        #expect(try state.apply(commit, signedBy: author) == .rejected(.exploded))
        #expect(state == exploded)
    }

    @Test func aCreateAfterTheExplosionIsStillAlreadyCreated() throws {
        let w = try W()
        var state = try w.applying(W.explode, by: w.owner)
        let before = state
        #expect(
            try state.apply(T.commit(T.create(), by: w.owner, epoch: 0), signedBy: w.owner)
                == .rejected(.alreadyCreated))
        #expect(state == before)
    }

    // MARK: Admission through an invite

    @Test func admissionsCountUsesPerInviteAndRecordTheirRequests() throws {
        let w = try W()
        var state = w.state
        let admissions: [(Identity, GroupRole, Data, UInt32, Data)] = [
            (w.joiner, .member, W.id(1), 0, W.id(0xA1)),
            (w.joiner2, .observer, W.id(1), 0, W.id(0xA2)),
            (w.outsider, .admin, W.id(7), 2, W.id(0xA3)),
        ]
        for (joiner, role, inviteID, maxUses, requestID) in admissions {
            let before = state
            state = try expectApplied(
                W.admit(
                    joiner.publicIdentity, as: role, inviteID: inviteID, tag: w.tag, maxUses: maxUses,
                    requestID: requestID),
                by: w.admin, on: before, effects: [.memberAdded(joiner.inboxID, role)])
            #expect(
                state.members[joiner.inboxID]
                    == GroupMember(identity: joiner.publicIdentity, role: role, addedBy: w.admin.inboxID))
        }
        #expect(state.inviteUses == [W.id(1): 2, W.id(7): 1])
        #expect(state.admittedJoinRequests == [W.id(0xA1), W.id(0xA2), W.id(0xA3)])
        #expect(state.members.count == w.state.members.count + 3)
        // An unlimited invite keeps admitting.
        let fourth = T.identity("Quinn")
        state = try w.applying(
            W.admit(fourth.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xA4)),
            by: w.owner, to: state)
        #expect(state.inviteUses[W.id(1)] == 3)
    }

    @Test func aSingleUseInviteAdmitsOnceAndTheRejectionChangesNothing() throws {
        let w = try W()
        let first = W.admit(w.joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 1, requestID: W.id(2))
        let once = try expectApplied(
            first, by: w.admin, on: w.state, effects: [.memberAdded(w.joiner.inboxID, .member)])
        #expect(once.inviteUses == [W.id(1): 1])
        var state = once
        let second = W.admit(w.joiner2.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 1, requestID: W.id(3))
        #expect(
            try state.apply(w.commit(second, by: w.admin2, on: once), signedBy: w.admin2) == .rejected(.inviteUsedUp))
        #expect(state == once)
        // A raised limit in a later admission counts the uses so far.
        let raised = W.admit(w.joiner2.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 2, requestID: W.id(3))
        state = try w.applying(raised, by: w.admin2, to: once)
        #expect(state.inviteUses == [W.id(1): 2])
    }

    @Test func theSameJoinRequestAdmitsOnlyOnce() throws {
        let w = try W()
        let first = W.admit(w.joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(2))
        let once = try w.applying(first, by: w.admin)
        // The joiner left and the same request is replayed: still refused.
        var left = try w.applying(T.leave, by: w.joiner, to: once)
        var rekey = w.commit(T.rekey, by: w.admin, on: left)
        try T.attachFreshKey(to: &rekey, for: left.sortedMembers.map(\.identity))
        try W.require(left.apply(rekey, signedBy: w.admin))
        #expect(left.role(of: w.joiner.inboxID) == nil)
        var state = left
        #expect(
            try state.apply(w.commit(first, by: w.admin2, on: left), signedBy: w.admin2)
                == .rejected(.joinRequestAlreadyAdmitted))
        #expect(state == left)
    }

    // MARK: Bans

    @Test func aBanOnRemovalIsRecordedAndADirectAddLiftsIt() throws {
        let w = try W()
        let removed = try w.removing(w.member.inboxID, ban: false, by: w.admin)
        #expect(removed.role(of: w.member.inboxID) == nil)
        #expect(removed.banned.isEmpty)

        let banned = try w.removing(w.member.inboxID, ban: true, by: w.admin)
        #expect(banned.role(of: w.member.inboxID) == nil)
        #expect(banned.banned == [w.member.inboxID])
        // Banning a second one keeps the first.
        let both = try w.removing(w.observer.inboxID, ban: true, by: w.owner, from: banned)
        #expect(both.banned == [w.member.inboxID, w.observer.inboxID])

        // An invite cannot bring the banned member back...
        var state = both
        let viaInvite = W.admit(
            w.member.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(2))
        #expect(
            try state.apply(w.commit(viaInvite, by: w.admin, on: both), signedBy: w.admin)
                == .rejected(.banned(w.member.inboxID)))
        #expect(state == both)
        // ...an admin adding them by hand does, and lifts only their ban.
        let readded = try expectApplied(
            T.add(w.member.publicIdentity, as: .member), by: w.admin, on: both,
            effects: [.memberAdded(w.member.inboxID, .member)])
        #expect(readded.banned == [w.observer.inboxID])
        // Removed again without a ban, they may now join through an invite.
        let removedAgain = try w.removing(w.member.inboxID, ban: false, by: w.admin, from: readded)
        #expect(removedAgain.banned == [w.observer.inboxID])
        let rejoined = try w.applying(viaInvite, by: w.admin, to: removedAgain)
        #expect(rejoined.role(of: w.member.inboxID) == .member)
        #expect(rejoined.banned == [w.observer.inboxID])
    }

    @Test func anAdmissionDoesNotLiftABanOfSomeoneElse() throws {
        let w = try W()
        let banned = try w.removing(w.member.inboxID, ban: true, by: w.admin)
        let admitted = try w.applying(
            W.admit(w.joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(2)),
            by: w.admin, to: banned)
        #expect(admitted.banned == [w.member.inboxID])
    }

    // MARK: Snapshots

    @Test func aSnapshotRoundTripsEveryInviteField() throws {
        let w = try W()
        var state = try w.applying(
            W.admit(w.joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 1, requestID: W.id(2)),
            by: w.admin)
        state = try w.applying(
            W.admit(
                w.joiner2.publicIdentity, as: .observer, inviteID: W.id(3), tag: w.tag, maxUses: 0,
                requestID: W.id(4)),
            by: w.admin2, to: state)
        state = try w.removing(w.member.inboxID, ban: true, by: w.admin, from: state)
        state = try w.removing(w.observer.inboxID, ban: true, by: w.admin, from: state)
        state = try w.applying(W.rotate(w.newTag), by: w.owner, to: state)
        state = try w.applying(W.explode, by: w.owner, to: state)

        #expect(state.inviteIdentity == w.keys.identity.publicIdentity)
        #expect(state.inviteTag == w.newTag)
        #expect(state.inviteUses == [W.id(1): 1, W.id(3): 1])
        #expect(state.admittedJoinRequests == [W.id(2), W.id(4)])
        #expect(state.banned == [w.member.inboxID, w.observer.inboxID])
        #expect(state.exploded)

        #expect(try GroupState(snapshot: state.snapshot) == state)
        #expect(try T.restored(state) == state)
        // Snapshot lists are in a canonical order.
        let snapshot = state.snapshot
        #expect(snapshot.banned == [w.member.inboxID.rawValue, w.observer.inboxID.rawValue].sorted())
        #expect(snapshot.inviteUses.map(\.inviteID) == [W.id(1), W.id(3)])
        #expect(snapshot.admittedJoinRequests == [W.id(2), W.id(4)])
        // The restored state rejects like the original.
        var restored = try T.restored(state)
        #expect(
            try restored.apply(w.commit(W.rotate(w.tag), by: w.owner, on: restored), signedBy: w.owner)
                == .rejected(.exploded))
    }

    @Test func aSnapshotWithoutInvitesRoundTrips() throws {
        let w = try W()
        let snapshot = w.groups.state.snapshot
        #expect(!snapshot.hasInviteIdentity)
        let restored = try GroupState(snapshot: snapshot)
        #expect(restored == w.groups.state)
        #expect(restored.inviteIdentity == nil)
        #expect(restored.inviteTag.isEmpty)
    }

    @Test func aSnapshotWithABadBannedInboxOrInviteIdentityIsRefused() throws {
        let w = try W()
        var badBan = w.state.snapshot
        badBan.banned = ["not an inbox"]
        #expect(throws: GroupSnapshotError.invalidMember("banned inbox id")) { try GroupState(snapshot: badBan) }
        var badIdentity = w.state.snapshot
        badIdentity.inviteIdentity = WireKeyBundle()
        let reason = RallyCryptoError.invalidPublicKey("key bundle keys must be 32 bytes each").description
        #expect(throws: GroupSnapshotError.invalidMember("invite identity: \(reason)")) {
            try GroupState(snapshot: badIdentity)
        }
    }
}
