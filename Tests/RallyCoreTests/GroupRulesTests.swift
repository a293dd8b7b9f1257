import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// A created group: Olive (owner) added Ada and Abe (admins), Mo
/// (moderator), Bea (member) and Vic (observer). Xan is not in it.
struct GroupWorld {
    let owner = GroupTest.identity("Olive")
    let admin = GroupTest.identity("Ada")
    let admin2 = GroupTest.identity("Abe")
    let moderator = GroupTest.identity("Mo")
    let member = GroupTest.identity("Bea")
    let observer = GroupTest.identity("Vic")
    let outsider = GroupTest.identity("Xan")
    /// The state right after the five adds (epoch 6).
    let state: GroupState
    /// `state` after Bea left: a rekey is pending (epoch 7).
    let afterLeave: GroupState

    struct SetupFailed: Error { let outcome: GroupOutcome }

    init() throws {
        var state = GroupState(groupID: GroupTest.groupID)
        try Self.require(state.apply(GroupTest.commit(GroupTest.create(), by: owner, on: state), signedBy: owner))
        for (identity, role) in [
            (admin, GroupRole.admin), (admin2, .admin), (moderator, .moderator), (member, .member),
            (observer, .observer),
        ] {
            let commit = GroupTest.commit(
                GroupTest.add(identity.publicIdentity, as: role), by: owner, on: state)
            try Self.require(state.apply(commit, signedBy: owner))
        }
        self.state = state
        try Self.require(
            state.apply(GroupTest.commit(GroupTest.leave, by: member, on: state), signedBy: member))
        afterLeave = state
    }

    private static func require(_ outcome: GroupOutcome) throws {
        guard case .applied = outcome else { throw SetupFailed(outcome: outcome) }
    }

    /// A commit on `state`'s current epoch.
    func commit(
        _ action: WireGroupCommit.OneOf_Action?, by author: Identity, on state: GroupState? = nil
    )
        -> WireGroupCommit
    {
        GroupTest.commit(action, by: author, on: state ?? self.state)
    }

    /// The public identities of `state`'s members, minus `excluded`.
    func members(of state: GroupState? = nil, except excluded: Identity...) -> [PublicIdentity] {
        let skip = Set(excluded.map(\.inboxID))
        return (state ?? self.state).sortedMembers.map(\.identity).filter { !skip.contains($0.inboxID) }
    }
}

/// One commit that every member must reject, and why.
struct GroupRejectionCase: Sendable, CustomTestStringConvertible {
    struct Scenario {
        let state: GroupState
        let commit: WireGroupCommit
        let signer: Identity
        let expected: GroupRejection
    }

    let name: String
    let build: @Sendable (GroupWorld) throws -> Scenario

    var testDescription: String { name }

    init(_ name: String, _ build: @escaping @Sendable (GroupWorld) throws -> Scenario) {
        self.name = name
        self.build = build
    }
}

extension GroupRejectionCase {
    typealias T = GroupTest

    static func on(
        _ state: GroupState, _ commit: WireGroupCommit, by signer: Identity, _ expected: GroupRejection
    ) -> Scenario {
        Scenario(state: state, commit: commit, signer: signer, expected: expected)
    }

    static let create: [GroupRejectionCase] = [
        .init("create: the group already exists") { w in
            on(w.state, w.commit(T.create(), by: w.owner), by: w.owner, .alreadyCreated)
        },
        .init("create: replayed at epoch 0 on a created group") { w in
            on(w.state, T.commit(T.create(), by: w.outsider, epoch: 0), by: w.outsider, .alreadyCreated)
        },
        .init("create: epoch other than 0") { w in
            let fresh = GroupState(groupID: T.groupID)
            return on(
                fresh, T.commit(T.create(), by: w.owner, epoch: 1), by: w.owner, .staleEpoch(commit: 1, current: 0))
        },
        .init("create: empty name") { w in
            let fresh = GroupState(groupID: T.groupID)
            return on(
                fresh, T.commit(T.create(""), by: w.owner, on: fresh), by: w.owner, .invalidProfile("the name is empty")
            )
        },
        .init("create: 257-byte name") { w in
            let fresh = GroupState(groupID: T.groupID)
            let name = String(repeating: "n", count: 257)
            return on(
                fresh, T.commit(T.create(name), by: w.owner, on: fresh), by: w.owner,
                .invalidProfile("the name is longer than 256 bytes"))
        },
        .init("create: 129 two-byte characters (258 bytes) in the name") { w in
            let fresh = GroupState(groupID: T.groupID)
            let name = String(repeating: "é", count: 129)
            return on(
                fresh, T.commit(T.create(name), by: w.owner, on: fresh), by: w.owner,
                .invalidProfile("the name is longer than 256 bytes"))
        },
        .init("create: 2049-byte description") { w in
            let fresh = GroupState(groupID: T.groupID)
            let description = String(repeating: "d", count: 2049)
            return on(
                fresh, T.commit(T.create("ok", description: description), by: w.owner, on: fresh), by: w.owner,
                .invalidProfile("the description is longer than 2048 bytes"))
        },
        .init("create: carries epoch keys") { w in
            let fresh = GroupState(groupID: T.groupID)
            var commit = T.commit(T.create(), by: w.owner, on: fresh)
            try T.attachFreshKey(to: &commit, for: [w.owner.publicIdentity])
            return on(fresh, commit, by: w.owner, .unexpectedEpochKeys)
        },
        .init("create: for another group") { w in
            let fresh = GroupState(groupID: T.groupID)
            return on(
                fresh, T.commit(T.create(), by: w.owner, on: fresh, groupID: T.otherGroupID), by: w.owner, .wrongGroup)
        },
    ]

    static let general: [GroupRejectionCase] = [
        .init("not created: add before the create commit") { w in
            let fresh = GroupState(groupID: T.groupID)
            return on(
                fresh, T.commit(T.add(w.admin.publicIdentity, as: .admin), by: w.owner, epoch: 0), by: w.owner,
                .notCreated)
        },
        .init("not created: leave before the create commit") { w in
            on(GroupState(groupID: T.groupID), T.commit(T.leave, by: w.owner, epoch: 0), by: w.owner, .notCreated)
        },
        .init("not created: empty action before the create commit") { w in
            on(GroupState(groupID: T.groupID), T.commit(nil, by: w.owner, epoch: 0), by: w.owner, .notCreated)
        },
        .init("stale epoch: one behind") { w in
            let commit = T.commit(T.add(w.outsider.publicIdentity, as: .member), by: w.owner, epoch: 5)
            return on(w.state, commit, by: w.owner, .staleEpoch(commit: 5, current: 6))
        },
        .init("stale epoch: ahead of the group") { w in
            let commit = T.commit(T.add(w.outsider.publicIdentity, as: .member), by: w.owner, epoch: 7)
            return on(w.state, commit, by: w.owner, .staleEpoch(commit: 7, current: 6))
        },
        .init("stale epoch: checked before membership") { w in
            on(w.state, T.commit(T.leave, by: w.outsider, epoch: 2), by: w.outsider, .staleEpoch(commit: 2, current: 6))
        },
        .init("wrong group") { w in
            let commit = T.commit(
                T.add(w.outsider.publicIdentity, as: .member), by: w.owner, epoch: 6, groupID: T.otherGroupID)
            return on(w.state, commit, by: w.owner, .wrongGroup)
        },
        .init("author is not a member") { w in
            on(
                w.state, w.commit(T.add(w.outsider.publicIdentity, as: .member), by: w.outsider), by: w.outsider,
                .notAMember(w.outsider.inboxID))
        },
        .init("author is a member who left") { w in
            on(
                w.afterLeave, w.commit(T.updateProfile("x"), by: w.member, on: w.afterLeave), by: w.member,
                .notAMember(w.member.inboxID))
        },
        .init("author keys changed: same signing key, other agreement key") { w in
            let impostor = try Identity(
                signingKeyBytes: w.admin.signingKey.rawRepresentation,
                agreementKeyBytes: Curve25519.KeyAgreement.PrivateKey().rawRepresentation,
                displayName: w.admin.displayName, createdAt: GroupTest.created)
            let commit = w.commit(T.add(w.outsider.publicIdentity, as: .member), by: impostor)
            return on(w.state, commit, by: impostor, .authorKeysChanged(w.admin.inboxID))
        },
        .init("empty action") { w in on(w.state, w.commit(nil, by: w.owner), by: w.owner, .emptyAction) },
    ]

    static let add: [GroupRejectionCase] = [
        .init("add: by a member") { w in
            on(
                w.state, w.commit(T.add(w.outsider.publicIdentity, as: .observer), by: w.member), by: w.member,
                .insufficientRole(needed: .admin, actual: .member))
        },
        .init("add: by a moderator") { w in
            on(
                w.state, w.commit(T.add(w.outsider.publicIdentity, as: .observer), by: w.moderator), by: w.moderator,
                .insufficientRole(needed: .admin, actual: .moderator))
        },
        .init("add: by an observer") { w in
            on(
                w.state, w.commit(T.add(w.outsider.publicIdentity, as: .observer), by: w.observer), by: w.observer,
                .insufficientRole(needed: .admin, actual: .observer))
        },
        .init("add: an admin grants owner, above their own role") { w in
            on(
                w.state, w.commit(T.add(w.outsider.publicIdentity, as: .owner), by: w.admin), by: w.admin,
                .insufficientRole(needed: .owner, actual: .admin))
        },
        .init("add: already a member") { w in
            on(
                w.state, w.commit(T.add(w.member.publicIdentity, as: .member), by: w.admin), by: w.admin,
                .alreadyMember(w.member.inboxID))
        },
        .init("add: the author themself") { w in
            on(
                w.state, w.commit(T.add(w.admin.publicIdentity, as: .member), by: w.admin), by: w.admin,
                .alreadyMember(w.admin.inboxID))
        },
        .init("add: while a rekey is pending after a leave") { w in
            on(
                w.afterLeave, w.commit(T.add(w.outsider.publicIdentity, as: .member), by: w.owner, on: w.afterLeave),
                by: w.owner, .rekeyPending)
        },
        .init("add: unspecified role") { w in
            on(
                w.state, w.commit(T.add(w.outsider.publicIdentity.wireBundle, wireRole: .unspecified), by: w.admin),
                by: w.admin, .invalidRole)
        },
        .init("add: role unknown to this client") { w in
            on(
                w.state, w.commit(T.add(w.outsider.publicIdentity.wireBundle, wireRole: .UNRECOGNIZED(9)), by: w.admin),
                by: w.admin, .invalidRole)
        },
        .init("add: carries epoch keys") { w in
            var commit = w.commit(T.add(w.outsider.publicIdentity, as: .member), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members() + [w.outsider.publicIdentity])
            return on(w.state, commit, by: w.admin, .unexpectedEpochKeys)
        },
        .init("add: a key bundle without keys") { w in
            var bundle = WireKeyBundle()
            bundle.displayName = "Nobody"
            let reason = RallyCryptoError.invalidPublicKey("key bundle keys must be 32 bytes each").description
            return on(
                w.state, w.commit(T.add(bundle, wireRole: .member), by: w.admin), by: w.admin, .invalidTarget(reason))
        },
    ]

    static let remove: [GroupRejectionCase] = [
        .init("remove: by a non-member") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.outsider)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.member))
            return on(w.state, commit, by: w.outsider, .notAMember(w.outsider.inboxID))
        },
        .init("remove: by a moderator") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.moderator)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.member))
            return on(w.state, commit, by: w.moderator, .insufficientRole(needed: .admin, actual: .moderator))
        },
        .init("remove: the target outranks the author") { w in
            var commit = w.commit(T.remove(w.owner.inboxID), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.owner))
            return on(w.state, commit, by: w.admin, .targetOutranksAuthor(w.owner.inboxID))
        },
        .init("remove: the author themself") { w in
            var commit = w.commit(T.remove(w.admin.inboxID), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.admin))
            return on(w.state, commit, by: w.admin, .cannotTargetSelf)
        },
        .init("remove: someone who is not a member") { w in
            var commit = w.commit(T.remove(w.outsider.inboxID), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members())
            return on(w.state, commit, by: w.admin, .notAMemberTarget(w.outsider.inboxID))
        },
        .init("remove: the target is not an inbox id") { w in
            var commit = w.commit(T.remove(text: "not-an-inbox"), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members())
            return on(w.state, commit, by: w.admin, .invalidTarget("not-an-inbox"))
        },
        .init("remove: no fresh key") { w in
            on(w.state, w.commit(T.remove(w.member.inboxID), by: w.admin), by: w.admin, .missingEpochKeys)
        },
        .init("remove: sealed keys but no commitment") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.member))
            commit.epochKeyCommitment = Data()
            return on(w.state, commit, by: w.admin, .missingEpochKeys)
        },
        .init("remove: a 31-byte commitment") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.member))
            commit.epochKeyCommitment = commit.epochKeyCommitment.prefix(31)
            return on(w.state, commit, by: w.admin, .missingEpochKeys)
        },
        .init("remove: a commitment but no sealed keys") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.admin)
            commit.epochKeyCommitment = EpochKeys.commitment(to: EpochKeys.newKey())
            return on(w.state, commit, by: w.admin, .missingEpochKeys)
        },
        .init("remove: key also sealed to the removed member") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members())
            return on(w.state, commit, by: w.admin, .epochKeysMismatch)
        },
        .init("remove: key not sealed to one remaining member") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.member, w.observer))
            return on(w.state, commit, by: w.admin, .epochKeysMismatch)
        },
        .init("remove: key sealed to an outsider instead of a member") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.admin)
            try T.attachFreshKey(
                to: &commit, for: w.members(except: w.member, w.observer) + [w.outsider.publicIdentity])
            return on(w.state, commit, by: w.admin, .epochKeysMismatch)
        },
        .init("remove: one remaining member sealed to twice") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.member) + [w.observer.publicIdentity])
            return on(w.state, commit, by: w.admin, .epochKeysMismatch)
        },
        .init("remove: a sealed entry names no inbox") { w in
            var commit = w.commit(T.remove(w.member.inboxID), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.member))
            var bogus = commit.epochKeys[0]
            bogus.inboxID = "nobody"
            commit.epochKeys.append(bogus)
            return on(w.state, commit, by: w.admin, .epochKeysMismatch)
        },
    ]

    static let changeRole: [GroupRejectionCase] = [
        .init("change role: the last owner demotes themself") { w in
            // `.lastOwner` cannot come from a role change: only an owner may
            // target an owner and never themself, so another owner remains.
            on(
                w.state, w.commit(T.changeRole(w.owner.inboxID, to: .admin), by: w.owner), by: w.owner,
                .cannotTargetSelf)
        },
        .init("change role: an admin grants owner") { w in
            on(
                w.state, w.commit(T.changeRole(w.member.inboxID, to: .owner), by: w.admin), by: w.admin,
                .insufficientRole(needed: .owner, actual: .admin))
        },
        .init("change role: an admin demotes the owner") { w in
            on(
                w.state, w.commit(T.changeRole(w.owner.inboxID, to: .member), by: w.admin), by: w.admin,
                .targetOutranksAuthor(w.owner.inboxID))
        },
        .init("change role: by a moderator") { w in
            on(
                w.state, w.commit(T.changeRole(w.member.inboxID, to: .observer), by: w.moderator), by: w.moderator,
                .insufficientRole(needed: .admin, actual: .moderator))
        },
        .init("change role: unspecified role") { w in
            on(
                w.state, w.commit(T.changeRole(w.member.inboxID, wireRole: .unspecified), by: w.admin), by: w.admin,
                .invalidRole)
        },
        .init("change role: of a non-member") { w in
            on(
                w.state, w.commit(T.changeRole(w.outsider.inboxID, to: .member), by: w.admin), by: w.admin,
                .notAMemberTarget(w.outsider.inboxID))
        },
        .init("change role: carries epoch keys") { w in
            var commit = w.commit(T.changeRole(w.member.inboxID, to: .moderator), by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members())
            return on(w.state, commit, by: w.admin, .unexpectedEpochKeys)
        },
    ]

    static let leave: [GroupRejectionCase] = [
        .init("leave: the last owner while others remain") { w in
            on(w.state, w.commit(T.leave, by: w.owner), by: w.owner, .lastOwner)
        },
        .init("leave: carries epoch keys") { w in
            var commit = w.commit(T.leave, by: w.moderator)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.moderator))
            return on(w.state, commit, by: w.moderator, .unexpectedEpochKeys)
        },
    ]

    static let updateProfile: [GroupRejectionCase] = [
        .init("update profile: by an admin") { w in
            on(
                w.state, w.commit(T.updateProfile("Climbers"), by: w.admin), by: w.admin,
                .insufficientRole(needed: .owner, actual: .admin))
        },
        .init("update profile: by a member") { w in
            on(
                w.state, w.commit(T.updateProfile("Climbers"), by: w.member), by: w.member,
                .insufficientRole(needed: .owner, actual: .member))
        },
        .init("update profile: empty name") { w in
            on(
                w.state, w.commit(T.updateProfile(""), by: w.owner), by: w.owner,
                .invalidProfile("the name is empty"))
        },
        .init("update profile: 2049-byte description") { w in
            on(
                w.state, w.commit(T.updateProfile("ok", String(repeating: "d", count: 2049)), by: w.owner),
                by: w.owner, .invalidProfile("the description is longer than 2048 bytes"))
        },
        .init("update profile: carries epoch keys") { w in
            var commit = w.commit(T.updateProfile("Climbers"), by: w.owner)
            try T.attachFreshKey(to: &commit, for: w.members())
            return on(w.state, commit, by: w.owner, .unexpectedEpochKeys)
        },
    ]

    static let rekey: [GroupRejectionCase] = [
        .init("rekey: by a member when no rekey is pending") { w in
            var commit = w.commit(T.rekey, by: w.member)
            try T.attachFreshKey(to: &commit, for: w.members())
            return on(w.state, commit, by: w.member, .insufficientRole(needed: .admin, actual: .member))
        },
        .init("rekey: by a moderator when no rekey is pending") { w in
            var commit = w.commit(T.rekey, by: w.moderator)
            try T.attachFreshKey(to: &commit, for: w.members())
            return on(w.state, commit, by: w.moderator, .insufficientRole(needed: .admin, actual: .moderator))
        },
        .init("rekey: an admin's rekey without a key") { w in
            on(w.state, w.commit(T.rekey, by: w.admin), by: w.admin, .missingEpochKeys)
        },
        .init("rekey: key not sealed to every member") { w in
            var commit = w.commit(T.rekey, by: w.admin)
            try T.attachFreshKey(to: &commit, for: w.members(except: w.observer))
            return on(w.state, commit, by: w.admin, .epochKeysMismatch)
        },
        .init("rekey: after a leave, key still sealed to the leaver") { w in
            var commit = w.commit(T.rekey, by: w.moderator, on: w.afterLeave)
            try T.attachFreshKey(to: &commit, for: w.members(of: w.afterLeave) + [w.member.publicIdentity])
            return on(w.afterLeave, commit, by: w.moderator, .epochKeysMismatch)
        },
        .init("rekey: after a leave, without a key") { w in
            on(w.afterLeave, w.commit(T.rekey, by: w.observer, on: w.afterLeave), by: w.observer, .missingEpochKeys)
        },
    ]

    /// Every commit names the transcript it builds on (ADR 0008): a member
    /// shown another history rejects it.
    static let transcript: [GroupRejectionCase] = [
        .init("transcript: a parent this member was not shown") { w in
            var commit = w.commit(T.updateProfile("Fork"), by: w.owner)
            commit.parentTranscript = Data(repeating: 0xAB, count: 32)
            return on(w.state, commit, by: w.owner, .forkedHistory)
        },
        .init("transcript: no parent") { w in
            var commit = w.commit(T.updateProfile("Fork"), by: w.owner)
            commit.parentTranscript = Data()
            return on(w.state, commit, by: w.owner, .forkedHistory)
        },
        .init("transcript: the previous epoch's transcript at the current epoch") { w in
            var commit = w.commit(T.updateProfile("Fork"), by: w.owner, on: w.afterLeave)
            commit.parentTranscript = w.state.transcript
            return on(w.afterLeave, commit, by: w.owner, .forkedHistory)
        },
        .init("transcript: another group's chain") { w in
            var commit = w.commit(T.updateProfile("Fork"), by: w.owner)
            commit.parentTranscript = CommitSealing.initialTranscript(groupID: T.otherGroupID)
            return on(w.state, commit, by: w.owner, .forkedHistory)
        },
        .init("transcript: checked before membership") { w in
            var commit = w.commit(T.add(w.outsider.publicIdentity, as: .member), by: w.outsider)
            commit.parentTranscript = Data(repeating: 0xAB, count: 32)
            return on(w.state, commit, by: w.outsider, .forkedHistory)
        },
        .init("transcript: checked after the epoch") { w in
            var commit = w.commit(T.updateProfile("Fork"), by: w.owner)
            commit.epoch = 5
            commit.parentTranscript = Data(repeating: 0xAB, count: 32)
            return on(w.state, commit, by: w.owner, .staleEpoch(commit: 5, current: 6))
        },
        .init("create: a parent other than the initial transcript") { w in
            let fresh = GroupState(groupID: T.groupID)
            var commit = T.commit(T.create(), by: w.owner, on: fresh)
            commit.parentTranscript = Data(repeating: 0xAB, count: 32)
            return on(fresh, commit, by: w.owner, .forkedHistory)
        },
        .init("create: another group's initial transcript") { w in
            let fresh = GroupState(groupID: T.groupID)
            var commit = T.commit(T.create(), by: w.owner, on: fresh)
            commit.parentTranscript = CommitSealing.initialTranscript(groupID: T.otherGroupID)
            return on(fresh, commit, by: w.owner, .forkedHistory)
        },
        .init("create: no parent") { w in
            let fresh = GroupState(groupID: T.groupID)
            return on(fresh, T.commit(T.create(), by: w.owner, epoch: 0), by: w.owner, .forkedHistory)
        },
    ]

    static let all = create + general + add + remove + changeRole + leave + updateProfile + rekey + transcript
}

@Suite("Group rules")
struct GroupRulesTests {
    typealias T = GroupTest

    // MARK: Rejections

    @Test(arguments: GroupRejectionCase.all)
    func rejectsWithoutChangingTheState(_ testCase: GroupRejectionCase) throws {
        let world = try GroupWorld()
        let scenario = try testCase.build(world)
        var state = scenario.state
        let outcome = try state.apply(scenario.commit, signedBy: scenario.signer)
        #expect(outcome == .rejected(scenario.expected))
        #expect(state == scenario.state)
    }

    @Test func theWorldIsWhatTheCasesAssume() throws {
        let w = try GroupWorld()
        #expect(w.state.epoch == 6)
        #expect(w.state.role(of: w.owner.inboxID) == .owner)
        #expect(w.state.role(of: w.admin.inboxID) == .admin)
        #expect(w.state.role(of: w.admin2.inboxID) == .admin)
        #expect(w.state.role(of: w.moderator.inboxID) == .moderator)
        #expect(w.state.role(of: w.member.inboxID) == .member)
        #expect(w.state.role(of: w.observer.inboxID) == .observer)
        #expect(w.state.role(of: w.outsider.inboxID) == nil)
        #expect(!w.state.needsRekey)
        #expect(w.afterLeave.epoch == 7)
        #expect(w.afterLeave.needsRekey)
        #expect(w.afterLeave.role(of: w.member.inboxID) == nil)
    }

    @Test func aRejectedCommitCanBeResentAndIsRejectedAgainNotTreatedAsDuplicate() throws {
        let w = try GroupWorld()
        var state = w.state
        let commit = w.commit(T.add(w.outsider.publicIdentity, as: .owner), by: w.admin)
        let expected = GroupOutcome.rejected(.insufficientRole(needed: .owner, actual: .admin))
        #expect(try state.apply(commit, signedBy: w.admin) == expected)
        #expect(try state.apply(commit, signedBy: w.admin) == expected)
        #expect(state == w.state)
    }

    // MARK: Applied commits

    /// Applies `commit` and checks the outcome is exactly `effects` followed
    /// by the epoch advance, and the bookkeeping every applied commit does.
    func expectApplied(
        _ commit: WireGroupCommit, by signer: Identity, on state: GroupState, effects: [GroupEffect],
        fresh: GroupFreshKey? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> GroupState {
        var next = state
        let outcome = try next.apply(commit, signedBy: signer)
        let advance = GroupEffect.epochAdvanced(
            epoch: state.epoch + 1, commitID: commit.commitID,
            freshKey: fresh.map { FreshEpochKey(sealed: $0.sealed, commitment: $0.commitment) })
        #expect(outcome == .applied(effects + [advance]), sourceLocation: sourceLocation)
        #expect(next.epoch == state.epoch + 1, sourceLocation: sourceLocation)
        #expect(next.lastCommitID == commit.commitID, sourceLocation: sourceLocation)
        #expect(
            next.appliedCommitIDs == state.appliedCommitIDs.union([commit.commitID]), sourceLocation: sourceLocation)
        return next
    }

    @Test func createMakesTheAuthorOwnerAndStartsEpochOne() throws {
        let owner = T.identity("Olive")
        let commit = T.commit(
            T.create("Hikers", description: "Sunday walks"), by: owner, on: GroupState(groupID: T.groupID))
        let state = try expectApplied(commit, by: owner, on: GroupState(groupID: T.groupID), effects: [.created])
        #expect(state.isCreated)
        #expect(state.epoch == 1)
        #expect(state.profile == GroupProfile(name: "Hikers", description: "Sunday walks"))
        #expect(
            state.members == [owner.inboxID: GroupMember(identity: owner.publicIdentity, role: .owner, addedBy: nil)])
        #expect(!state.needsRekey)
    }

    @Test func createAcceptsANameAndDescriptionExactlyAtTheByteLimits() throws {
        let owner = T.identity("Olive")
        let name = String(repeating: "é", count: 128)  // 256 bytes
        let description = String(repeating: "d", count: 2048)
        let commit = T.commit(T.create(name, description: description), by: owner, on: GroupState(groupID: T.groupID))
        let state = try expectApplied(commit, by: owner, on: GroupState(groupID: T.groupID), effects: [.created])
        #expect(state.profile == GroupProfile(name: name, description: description))
    }

    @Test(arguments: [GroupRole.observer, .member, .moderator, .admin])
    func anAdminAddsUpToTheirOwnRole(_ role: GroupRole) throws {
        let w = try GroupWorld()
        let commit = w.commit(T.add(w.outsider.publicIdentity, as: role), by: w.admin)
        let state = try expectApplied(
            commit, by: w.admin, on: w.state, effects: [.memberAdded(w.outsider.inboxID, role)])
        #expect(
            state.members[w.outsider.inboxID]
                == GroupMember(identity: w.outsider.publicIdentity, role: role, addedBy: w.admin.inboxID))
        #expect(state.members.count == w.state.members.count + 1)
    }

    @Test func aRenamedMemberIsStillTheSameMember() throws {
        let w = try GroupWorld()
        let renamed = try Identity(
            signingKeyBytes: w.admin.signingKey.rawRepresentation,
            agreementKeyBytes: w.admin.agreementKey.rawRepresentation, displayName: "Ada (new phone)",
            createdAt: GroupTest.created)
        let commit = w.commit(T.add(w.outsider.publicIdentity, as: .member), by: renamed)
        _ = try expectApplied(commit, by: renamed, on: w.state, effects: [.memberAdded(w.outsider.inboxID, .member)])
    }

    @Test func anOwnerAddsAnotherOwner() throws {
        let w = try GroupWorld()
        let commit = w.commit(T.add(w.outsider.publicIdentity, as: .owner), by: w.owner)
        let state = try expectApplied(
            commit, by: w.owner, on: w.state, effects: [.memberAdded(w.outsider.inboxID, .owner)])
        #expect(state.role(of: w.outsider.inboxID) == .owner)
    }

    @Test func anAdminRemovesAnEqualWithAFreshKeyOnlyTheRemainingMembersCanOpen() throws {
        let w = try GroupWorld()
        var commit = w.commit(T.remove(w.admin2.inboxID), by: w.admin)
        let fresh = try T.attachFreshKey(to: &commit, for: w.members(except: w.admin2))
        let state = try expectApplied(
            commit, by: w.admin, on: w.state, effects: [.memberRemoved(w.admin2.inboxID)], fresh: fresh)
        #expect(state.members[w.admin2.inboxID] == nil)
        #expect(Set(state.members.keys) == Set(w.state.members.keys).subtracting([w.admin2.inboxID]))
        for remaining in [w.owner, w.admin, w.moderator, w.member, w.observer] {
            let opened = try EpochKeys.open(
                commit.epochKeys, as: remaining, groupID: T.groupID, epoch: state.epoch,
                commitment: commit.epochKeyCommitment)
            #expect(opened.withUnsafeBytes { Data($0) } == fresh.bytes)
        }
        #expect(throws: RallyCryptoError.wrongRecipient) {
            try EpochKeys.open(
                commit.epochKeys, as: w.admin2, groupID: T.groupID, epoch: state.epoch,
                commitment: commit.epochKeyCommitment)
        }
    }

    @Test func anOwnerRemovesAnotherOwner() throws {
        let w = try GroupWorld()
        var state = try expectApplied(
            w.commit(T.changeRole(w.admin.inboxID, to: .owner), by: w.owner), by: w.owner, on: w.state,
            effects: [.roleChanged(w.admin.inboxID, .owner)])
        var commit = w.commit(T.remove(w.owner.inboxID), by: w.admin, on: state)
        let fresh = try T.attachFreshKey(to: &commit, for: w.members(of: state, except: w.owner))
        state = try expectApplied(
            commit, by: w.admin, on: state, effects: [.memberRemoved(w.owner.inboxID)], fresh: fresh)
        #expect(state.role(of: w.admin.inboxID) == .owner)
        #expect(state.members[w.owner.inboxID] == nil)
    }

    @Test func anAdminChangesRolesUpToTheirOwnIncludingAnotherAdmins() throws {
        let w = try GroupWorld()
        var state = try expectApplied(
            w.commit(T.changeRole(w.member.inboxID, to: .admin), by: w.admin), by: w.admin, on: w.state,
            effects: [.roleChanged(w.member.inboxID, .admin)])
        state = try expectApplied(
            w.commit(T.changeRole(w.admin2.inboxID, to: .observer), by: w.admin, on: state), by: w.admin, on: state,
            effects: [.roleChanged(w.admin2.inboxID, .observer)])
        #expect(state.role(of: w.member.inboxID) == .admin)
        #expect(state.role(of: w.admin2.inboxID) == .observer)
        #expect(state.members.count == w.state.members.count)
    }

    @Test func aSecondOwnerMayDemoteTheFirstButTheLastOwnerCannotBeDemoted() throws {
        let w = try GroupWorld()
        var state = try expectApplied(
            w.commit(T.changeRole(w.admin.inboxID, to: .owner), by: w.owner), by: w.owner, on: w.state,
            effects: [.roleChanged(w.admin.inboxID, .owner)])
        state = try expectApplied(
            w.commit(T.changeRole(w.owner.inboxID, to: .member), by: w.admin, on: state), by: w.admin, on: state,
            effects: [.roleChanged(w.owner.inboxID, .member)])
        #expect(state.members.values.filter { $0.role == .owner }.map(\.inboxID) == [w.admin.inboxID])
        // Now Ada is the only owner: nobody can demote her.
        let before = state
        #expect(
            try state.apply(
                w.commit(T.changeRole(w.admin.inboxID, to: .admin), by: w.admin, on: state), signedBy: w.admin)
                == .rejected(.cannotTargetSelf))
        #expect(
            try state.apply(
                w.commit(T.changeRole(w.admin.inboxID, to: .admin), by: w.admin2, on: state), signedBy: w.admin2)
                == .rejected(.targetOutranksAuthor(w.admin.inboxID)))
        #expect(state == before)
    }

    @Test func aLeaveCarriesNoKeyAndSetsNeedsRekeyWhichBlocksAddsUntilAnyMemberRekeys() throws {
        let w = try GroupWorld()
        var state = try expectApplied(
            w.commit(T.leave, by: w.moderator), by: w.moderator, on: w.state,
            effects: [.memberLeft(w.moderator.inboxID)])
        #expect(state.needsRekey)
        #expect(state.members[w.moderator.inboxID] == nil)

        let add = w.commit(T.add(w.outsider.publicIdentity, as: .member), by: w.owner, on: state)
        let pending = state
        #expect(try state.apply(add, signedBy: w.owner) == .rejected(.rekeyPending))
        #expect(state == pending)

        // The observer is no admin, but anyone may rekey after a leave.
        var rekey = w.commit(T.rekey, by: w.observer, on: state)
        let fresh = try T.attachFreshKey(to: &rekey, for: w.members(of: state))
        state = try expectApplied(rekey, by: w.observer, on: state, effects: [], fresh: fresh)
        #expect(!state.needsRekey)

        let addAgain = w.commit(T.add(w.outsider.publicIdentity, as: .member), by: w.owner, on: state)
        state = try expectApplied(
            addAgain, by: w.owner, on: state, effects: [.memberAdded(w.outsider.inboxID, .member)])
    }

    @Test func aRemoveAlsoSatisfiesAPendingRekey() throws {
        let w = try GroupWorld()
        var commit = w.commit(T.remove(w.observer.inboxID), by: w.admin, on: w.afterLeave)
        let fresh = try T.attachFreshKey(to: &commit, for: w.members(of: w.afterLeave, except: w.observer))
        let state = try expectApplied(
            commit, by: w.admin, on: w.afterLeave, effects: [.memberRemoved(w.observer.inboxID)], fresh: fresh)
        #expect(!state.needsRekey)
    }

    @Test func changesWithoutAFreshKeyLeaveARekeyPending() throws {
        let w = try GroupWorld()
        var state = try expectApplied(
            w.commit(T.changeRole(w.observer.inboxID, to: .member), by: w.admin, on: w.afterLeave), by: w.admin,
            on: w.afterLeave, effects: [.roleChanged(w.observer.inboxID, .member)])
        state = try expectApplied(
            w.commit(T.updateProfile("Climbers"), by: w.owner, on: state), by: w.owner, on: state,
            effects: [.profileChanged])
        #expect(state.needsRekey)
    }

    @Test func anOwnerMayLeaveWhenAnotherOwnerRemains() throws {
        let w = try GroupWorld()
        var state = try expectApplied(
            w.commit(T.changeRole(w.admin.inboxID, to: .owner), by: w.owner), by: w.owner, on: w.state,
            effects: [.roleChanged(w.admin.inboxID, .owner)])
        state = try expectApplied(
            w.commit(T.leave, by: w.owner, on: state), by: w.owner, on: state, effects: [.memberLeft(w.owner.inboxID)])
        #expect(state.role(of: w.admin.inboxID) == .owner)
        #expect(state.needsRekey)
    }

    @Test func theSoleMemberMayLeaveAndThenNobodyCanCommit() throws {
        let owner = T.identity("Olive")
        var state = GroupState(groupID: T.groupID)
        _ = try state.apply(T.commit(T.create(), by: owner, on: state), signedBy: owner)
        state = try expectApplied(
            T.commit(T.leave, by: owner, on: state), by: owner, on: state, effects: [.memberLeft(owner.inboxID)])
        #expect(state.members.isEmpty)
        #expect(!state.needsRekey)
        let empty = state
        #expect(
            try state.apply(T.commit(T.updateProfile("Back"), by: owner, on: state), signedBy: owner)
                == .rejected(.notAMember(owner.inboxID)))
        #expect(
            try state.apply(T.commit(T.create(), by: owner, epoch: 0), signedBy: owner) == .rejected(.alreadyCreated))
        #expect(state == empty)
    }

    @Test func theOwnerUpdatesTheProfile() throws {
        let w = try GroupWorld()
        let state = try expectApplied(
            w.commit(T.updateProfile("Climbers", "Saturdays"), by: w.owner), by: w.owner, on: w.state,
            effects: [.profileChanged])
        #expect(state.profile == GroupProfile(name: "Climbers", description: "Saturdays"))
        #expect(state.members == w.state.members)
    }

    @Test func anAdminMayRekeyAtAnyTime() throws {
        let w = try GroupWorld()
        var commit = w.commit(T.rekey, by: w.admin2)
        let fresh = try T.attachFreshKey(to: &commit, for: w.members())
        let state = try expectApplied(commit, by: w.admin2, on: w.state, effects: [], fresh: fresh)
        #expect(state.members == w.state.members)
        #expect(state.profile == w.state.profile)
    }

    @Test func theSameCommitIDIsADuplicateEvenEpochsLaterAndWithOtherContent() throws {
        let w = try GroupWorld()
        var state = w.state
        let commit = w.commit(T.changeRole(w.member.inboxID, to: .moderator), by: w.admin)
        state = try expectApplied(commit, by: w.admin, on: state, effects: [.roleChanged(w.member.inboxID, .moderator)])
        let applied = state
        #expect(try state.apply(commit, signedBy: w.admin) == .duplicate)
        #expect(state == applied)

        state = try expectApplied(
            w.commit(T.updateProfile("Later"), by: w.owner, on: state), by: w.owner, on: state,
            effects: [.profileChanged])
        let later = state
        #expect(try state.apply(commit, signedBy: w.admin) == .duplicate)
        var reused = w.commit(T.changeRole(w.observer.inboxID, to: .admin), by: w.owner, on: state)
        reused.commitID = commit.commitID
        #expect(try state.apply(reused, signedBy: w.owner) == .duplicate)
        #expect(state == later)
    }

    @Test func aCreateSeenTwiceIsADuplicate() throws {
        let owner = T.identity("Olive")
        var state = GroupState(groupID: T.groupID)
        let create = T.commit(T.create(), by: owner, on: state)
        _ = try state.apply(create, signedBy: owner)
        let created = state
        #expect(try state.apply(create, signedBy: owner) == .duplicate)
        #expect(state == created)
    }

    // MARK: Transcript

    @Test func everyAppliedCommitChainsTheTranscriptOverItsSignedBytes() throws {
        let owner = T.identity("Olive")
        var state = GroupState(groupID: T.groupID)
        #expect(state.transcript == CommitSealing.initialTranscript(groupID: T.groupID))
        let create = try T.verified(T.commit(T.create(), by: owner, on: state), by: owner)
        #expect(create.commit.parentTranscript == state.transcript)
        let initial = state.transcript
        _ = state.apply(create)
        let afterCreate = CommitSealing.transcript(after: initial, commitBytes: create.signedBytes)
        #expect(state.transcript == afterCreate)
        let rename = try T.verified(T.commit(T.updateProfile("Climbers"), by: owner, on: state), by: owner)
        _ = state.apply(rename)
        #expect(state.transcript == CommitSealing.transcript(after: afterCreate, commitBytes: rename.signedBytes))
        // A duplicate leaves it where it is.
        let applied = state
        #expect(state.apply(rename) == .duplicate)
        #expect(state.transcript == applied.transcript)
    }

    @Test func twoHistoriesOfTheSameEpochHaveDifferentTranscriptsAndDoNotMix() throws {
        let w = try GroupWorld()
        var one = w.state
        var two = w.state
        let first = w.commit(T.updateProfile("One"), by: w.owner)
        let second = w.commit(T.updateProfile("Two"), by: w.owner)
        #expect(try one.apply(first, signedBy: w.owner).isApplied)
        #expect(try two.apply(second, signedBy: w.owner).isApplied)
        #expect(one.epoch == two.epoch)
        #expect(one.transcript != two.transcript)
        // A commit built on history two is forked for a member of history one.
        let onTwo = w.commit(T.updateProfile("Three"), by: w.owner, on: two)
        let before = one
        #expect(try one.apply(onTwo, signedBy: w.owner) == .rejected(.forkedHistory))
        #expect(one == before)
        #expect(try two.apply(onTwo, signedBy: w.owner).isApplied)
    }

    @Test func theSnapshotCarriesTheTranscriptAndRefusesAMalformedOne() throws {
        let w = try GroupWorld()
        #expect(try T.restored(w.state).transcript == w.state.transcript)
        for bad in [Data(), Data(repeating: 1, count: 31), Data(repeating: 1, count: 33)] {
            var snapshot = w.state.snapshot
            snapshot.transcript = bad
            #expect(throws: GroupSnapshotError.invalidMember("transcript")) { try GroupState(snapshot: snapshot) }
        }
    }

    // MARK: Signatures

    @Test func aCommitSignedByAnotherKeyDoesNotVerify() throws {
        let w = try GroupWorld()
        let commit = w.commit(T.add(w.outsider.publicIdentity, as: .member), by: w.owner)
        let forged = try T.signed(commit, by: w.outsider)
        #expect(throws: RallyCryptoError.self) { try VerifiedGroupCommit.verify(forged) }
        var altered = commit
        altered.action = T.add(w.outsider.publicIdentity, as: .owner)
        var tampered = try T.signed(commit, by: w.owner)
        tampered.commit = FrameCodec.encode(altered)
        #expect(throws: RallyCryptoError.invalidSignature("group commit by \(w.owner.inboxID)")) {
            try VerifiedGroupCommit.verify(tampered)
        }
    }

    @Test func aCommitIDMustBeSixteenBytes() throws {
        let w = try GroupWorld()
        let commit = w.commit(T.leave, by: w.member)
        var short = commit
        short.commitID = Data(count: 15)
        #expect(throws: RallyCryptoError.malformed("group commit id")) {
            try VerifiedGroupCommit.verify(T.signed(short, by: w.member))
        }
        #expect(try VerifiedGroupCommit.verify(T.signed(commit, by: w.member)).author == w.member.publicIdentity)
    }
}
