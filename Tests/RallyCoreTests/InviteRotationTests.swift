import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// An admin who loses their rights keeps the invite seed they held: the
/// commit that takes the rights away must replace the invite identity
/// (ADR 0008, issue 8 item 4), and an admin who leaves stops admissions
/// until another admin replaces it.
@Suite("Invite identity rotation")
struct InviteRotationTests {
    typealias T = GroupTest
    typealias W = InviteGroupWorld

    /// Olive (owner) and Abe (admin): the admins left once Ada loses her rights.
    func remainingAdmins(_ w: W) -> [PublicIdentity] { [w.owner, w.admin2].map(\.publicIdentity) }

    /// Ada's demotion to `role` by Olive, with `rotation` when given.
    func demotion(
        _ w: W, to role: GroupRole, rotation: WireSetUpInvites?, on state: GroupState? = nil
    ) -> WireGroupCommit {
        var commit = w.commit(T.changeRole(w.admin.inboxID, to: role), by: w.owner, on: state)
        if let rotation { commit.rotateInvites = rotation }
        return commit
    }

    /// Ada's removal by Olive with a fresh key for the rest, with `rotation` when given.
    func removal(_ w: W, rotation: WireSetUpInvites?, ban: Bool = false) throws -> WireGroupCommit {
        var commit = w.commit(ban ? W.removeAndBan(w.admin.inboxID) : T.remove(w.admin.inboxID), by: w.owner)
        try T.attachFreshKey(
            to: &commit, for: w.state.sortedMembers.map(\.identity).filter { $0.inboxID != w.admin.inboxID })
        if let rotation { commit.rotateInvites = rotation }
        return commit
    }

    func expectRejected(
        _ commit: WireGroupCommit, by author: Identity, on state: GroupState, _ rejection: GroupRejection,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        var next = state
        #expect(try next.apply(commit, signedBy: author) == .rejected(rejection), sourceLocation: sourceLocation)
        #expect(next == state, sourceLocation: sourceLocation)
    }

    /// An admission of Jo through an invite under `tag`.
    func admission(_ w: W, tag: Data, by author: Identity? = nil, on state: GroupState) -> WireGroupCommit {
        w.commit(
            W.admit(w.joiner.publicIdentity, inviteID: W.id(1), tag: tag, maxUses: 0, requestID: W.id(2)),
            by: author ?? w.admin2, on: state)
    }

    // MARK: Rotation required

    @Test(arguments: [GroupRole.moderator, .member, .observer])
    func demotingAnAdminWithoutRotationIsRejected(_ role: GroupRole) throws {
        let w = try W()
        try expectRejected(
            demotion(w, to: role, rotation: nil), by: w.owner, on: w.state, .inviteRotationRequired)
    }

    @Test(arguments: [false, true])
    func removingAnAdminWithoutRotationIsRejected(ban: Bool) throws {
        let w = try W()
        try expectRejected(try removal(w, rotation: nil, ban: ban), by: w.owner, on: w.state, .inviteRotationRequired)
    }

    @Test func noRotationIsNeededWhenNoAdminLosesRights() throws {
        let w = try W()
        // Demoting the moderator, promoting an admin to owner, removing a member.
        _ = try w.applying(T.changeRole(w.moderator.inboxID, to: .member), by: w.admin)
        _ = try w.applying(T.changeRole(w.admin.inboxID, to: .owner), by: w.owner)
        _ = try w.removing(w.member.inboxID, ban: false, by: w.admin)
    }

    @Test func withoutInvitesSetUpAnAdminLosesRightsWithoutRotation() throws {
        let w = try W()
        var state = w.groups.state
        let commit = demotion(w, to: .member, rotation: nil, on: state)
        #expect(try state.apply(commit, signedBy: w.owner).isApplied)
        #expect(state.role(of: w.admin.inboxID) == .member)
    }

    // MARK: A valid rotation

    @Test func aDemotionWithARotationReplacesTheInviteIdentityAndRetiresTheOldOne() throws {
        let w = try W()
        let rotation = try w.rotation(sealedTo: remainingAdmins(w), on: w.state)
        let commit = demotion(w, to: .member, rotation: rotation)
        var state = w.state
        let outcome = try state.apply(commit, signedBy: w.owner)
        #expect(
            outcome
                == .applied([
                    .roleChanged(w.admin.inboxID, .member), .invitesSetUp(sealedSeeds: rotation.sealedSeeds),
                    .epochAdvanced(epoch: w.state.epoch + 1, commitID: commit.commitID, freshKey: nil),
                ]))
        #expect(state.inviteIdentity == w.otherKeys.identity.publicIdentity)
        #expect(state.inviteTag == w.rotatedTag)
        #expect(state.retiredInviteIdentities == [w.keys.identity.publicIdentity])
        #expect(state.retiredInviteTags.contains(w.tag))
        #expect(!state.invitesNeedRotation)
        // The remaining admins open the new seed; Ada does not.
        for admin in [w.owner, w.admin2] {
            let seed = try EpochKeys.openEntry(
                rotation.sealedSeeds, as: admin, groupID: state.groupID, epoch: state.epoch,
                info: EpochKeys.inviteSeedInfo)
            #expect(try InviteKeys(seed: seed).identity.inboxID == w.otherKeys.identity.inboxID)
        }
        #expect(throws: RallyCryptoError.wrongRecipient) {
            try EpochKeys.openEntry(
                rotation.sealedSeeds, as: w.admin, groupID: state.groupID, epoch: state.epoch,
                info: EpochKeys.inviteSeedInfo)
        }
        // The snapshot a newcomer gets keeps the retirement.
        #expect(try T.restored(state) == state)

        // The old tag no longer admits; the new one does.
        try expectRejected(admission(w, tag: w.tag, on: state), by: w.admin2, on: state, .inviteRevoked)
        #expect(try state.apply(admission(w, tag: w.rotatedTag, on: state), signedBy: w.admin2).isApplied)
        #expect(state.role(of: w.joiner.inboxID) == .member)
    }

    @Test(arguments: [false, true])
    func aRemovalWithARotationAppliesAndTheOldTagNoLongerAdmits(ban: Bool) throws {
        let w = try W()
        let rotation = try w.rotation(sealedTo: remainingAdmins(w), on: w.state)
        var state = w.state
        #expect(try state.apply(try removal(w, rotation: rotation, ban: ban), signedBy: w.owner).isApplied)
        #expect(state.members[w.admin.inboxID] == nil)
        #expect(state.inviteIdentity == w.otherKeys.identity.publicIdentity)
        #expect(state.retiredInviteIdentities == [w.keys.identity.publicIdentity])
        #expect(state.retiredInviteTags.contains(w.tag))
        try expectRejected(admission(w, tag: w.tag, by: w.owner, on: state), by: w.owner, on: state, .inviteRevoked)
        // A rotation to a retired tag is refused.
        try expectRejected(
            w.commit(W.rotate(w.tag), by: w.owner, on: state), by: w.owner, on: state, .invalidInviteTag)
    }

    // MARK: Invalid rotations

    @Test func aRotationSealedToTheDemotedAdminToo() throws {
        let w = try W()
        let rotation = try w.rotation(sealedTo: w.admins, on: w.state)
        try expectRejected(
            demotion(w, to: .member, rotation: rotation), by: w.owner, on: w.state, .inviteSeedsMismatch)
        try expectRejected(try removal(w, rotation: rotation), by: w.owner, on: w.state, .inviteSeedsMismatch)
    }

    @Test func aRotationSealedToTooFewOrOtherAdmins() throws {
        let w = try W()
        for recipients in [
            [w.owner.publicIdentity],
            [w.owner, w.admin2, w.moderator].map(\.publicIdentity),
            [w.owner, w.moderator].map(\.publicIdentity),
        ] {
            let rotation = try w.rotation(sealedTo: recipients, on: w.state)
            try expectRejected(
                demotion(w, to: .member, rotation: rotation), by: w.owner, on: w.state, .inviteSeedsMismatch)
        }
    }

    @Test func aRotationMustMoveToANewSixteenByteTag() throws {
        let w = try W()
        for tag in [w.tag, w.rotatedTag.prefix(15), Data()] {
            let rotation = try w.rotation(sealedTo: remainingAdmins(w), on: w.state, tag: tag)
            try expectRejected(
                demotion(w, to: .member, rotation: rotation), by: w.owner, on: w.state, .invalidInviteTag)
        }
    }

    @Test func aRotationByANonAdminOrWithoutInvitesIsUnexpected() throws {
        let w = try W()
        // Mo (moderator) demotes Vic and rotates the invite identity.
        var commit = w.commit(T.changeRole(w.observer.inboxID, to: .member), by: w.moderator)
        commit.rotateInvites = try w.rotation(sealedTo: w.admins, on: w.state)
        // The role change itself needs an admin, and is judged first.
        try expectRejected(commit, by: w.moderator, on: w.state, .insufficientRole(needed: .admin, actual: .moderator))
        // Mo leaves, rotating: the rotation is what is refused.
        var leave = w.commit(T.leave, by: w.moderator)
        leave.rotateInvites = try w.rotation(sealedTo: w.admins, on: w.state)
        try expectRejected(leave, by: w.moderator, on: w.state, .unexpectedInviteRotation)
        // No invite identity to rotate yet.
        let plain = w.groups.state
        var early = w.commit(T.updateProfile("Early"), by: w.owner, on: plain)
        early.rotateInvites = try w.rotation(sealedTo: w.admins, on: plain)
        try expectRejected(early, by: w.owner, on: plain, .unexpectedInviteRotation)
    }

    // MARK: An admin leaves

    @Test func anAdminLeavingStopsAdmissionsUntilAnAdminSetsUpInvitesAgain() throws {
        let w = try W()
        let left = try w.applying(T.leave, by: w.admin)
        #expect(left.invitesNeedRotation)
        #expect(left.inviteIdentity == w.keys.identity.publicIdentity)
        // The leave needs a rekey first; then admissions are refused.
        var rekey = w.commit(T.rekey, by: w.admin2, on: left)
        try T.attachFreshKey(to: &rekey, for: left.sortedMembers.map(\.identity))
        var state = left
        #expect(try state.apply(rekey, signedBy: w.admin2).isApplied)
        #expect(state.invitesNeedRotation)
        try expectRejected(admission(w, tag: w.tag, on: state), by: w.admin2, on: state, .inviteRotationPending)
        // A tag rotation does not replace the seed Ada left with.
        let tagOnly = try w.applying(W.rotate(w.newTag), by: w.owner, to: state)
        #expect(tagOnly.invitesNeedRotation)
        try expectRejected(
            admission(w, tag: w.newTag, on: tagOnly), by: w.admin2, on: tagOnly, .inviteRotationPending)

        // SetUpInvites again, sealed to the admins who remain.
        let setUp = try W.setUp(
            w.otherKeys.identity.publicIdentity, tag: w.rotatedTag, seed: w.otherSeed,
            sealedTo: remainingAdmins(w), on: state)
        state = try w.applying(setUp, by: w.admin2, to: state)
        #expect(!state.invitesNeedRotation)
        #expect(state.inviteIdentity == w.otherKeys.identity.publicIdentity)
        #expect(state.retiredInviteIdentities == [w.keys.identity.publicIdentity])
        #expect(state.retiredInviteTags.contains(w.tag))
        try expectRejected(admission(w, tag: w.tag, on: state), by: w.admin2, on: state, .inviteRevoked)
        #expect(try state.apply(admission(w, tag: w.rotatedTag, on: state), signedBy: w.admin2).isApplied)
        // Once replaced, invites are set up again: no second SetUpInvites.
        let again = try W.setUp(
            w.keys.identity.publicIdentity, tag: w.newTag, seed: w.seed, sealedTo: remainingAdmins(w), on: state)
        try expectRejected(w.commit(again, by: w.owner, on: state), by: w.owner, on: state, .invitesAlreadySetUp)
    }

    @Test func aSetUpAfterAnAdminLeftMustBeSealedToExactlyTheRemainingAdmins() throws {
        let w = try W()
        let left = try w.applying(T.leave, by: w.admin)
        let setUp = try W.setUp(
            w.otherKeys.identity.publicIdentity, tag: w.rotatedTag, seed: w.otherSeed, sealedTo: w.admins, on: left)
        try expectRejected(w.commit(setUp, by: w.owner, on: left), by: w.owner, on: left, .inviteSeedsMismatch)
    }

    @Test(arguments: [GroupRole.moderator, .member, .observer])
    func aNonAdminLeavingNeedsNoRotation(_ role: GroupRole) throws {
        let w = try W()
        let leaver = [GroupRole.moderator: w.moderator, .member: w.member, .observer: w.observer][role]!
        let left = try w.applying(T.leave, by: leaver)
        #expect(!left.invitesNeedRotation)
    }
}

extension GroupOutcome {
    var isApplied: Bool { if case .applied = self { true } else { false } }
}
