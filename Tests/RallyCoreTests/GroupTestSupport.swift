import Crypto
import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire

@testable import RallyCore

/// A fresh epoch key as the remover / rekeyer seals it.
struct GroupFreshKey {
    let key: SymmetricKey
    let sealed: [WireSealedEpochKey]
    let commitment: Data

    var bytes: Data { key.withUnsafeBytes { Data($0) } }
}

/// Builds group commits with the SDK's own drafting and sealing
/// (`CommitDraft`), signed with real identities; and, for the rules' edge
/// cases, commits that deliberately do not build on a state.
enum GroupTest {
    static let groupID = "00112233445566778899aabbccddeeff"
    static let otherGroupID = "ffeeddccbbaa99887766554433221100"
    static let topicID = String(repeating: "5a", count: 32)
    /// A whole second, so the key bundle's millisecond date round trips.
    static let created = Date(timeIntervalSince1970: 1_700_000_000)

    static func identity(_ name: String) -> Identity { Identity(displayName: name, createdAt: created) }

    /// An identity whose keys come from `rng`, so a seeded run is repeatable.
    static func identity(_ name: String, using rng: inout SeededGenerator) throws -> Identity {
        try Identity(
            signingKeyBytes: rng.bytes(32), agreementKeyBytes: rng.bytes(32), displayName: name, createdAt: created)
    }

    /// A commit that names `epoch` and `parentTranscript` as given: for
    /// commits that deliberately do not build on a state (stale, future,
    /// forked). Use `commit(_:by:on:)` for a commit that builds on a state.
    static func commit(
        _ action: WireGroupCommit.OneOf_Action?, by author: Identity, epoch: UInt64, groupID: String = groupID,
        id: Data = MessageSealing.newMessageID(), parentTranscript: Data = Data()
    ) -> WireGroupCommit {
        var commit = WireGroupCommit()
        commit.groupID = groupID
        commit.epoch = epoch
        commit.parentTranscript = parentTranscript
        commit.commitID = id
        commit.author = author.publicIdentity.wireBundle
        commit.createdAtMs = 1_700_000_000_000 + Int64(epoch)
        commit.action = action
        return commit
    }

    /// A commit building on `state`, drafted as the SDK drafts it.
    static func commit(
        _ action: WireGroupCommit.OneOf_Action?, by author: Identity, on state: GroupState, groupID: String? = nil,
        id: Data = MessageSealing.newMessageID()
    ) -> WireGroupCommit {
        var commit = CommitDraft.on(
            state, by: author.publicIdentity, at: Date(timeIntervalSince1970: 1_700_000_000 + Double(state.epoch)),
            id: id)
        if let groupID { commit.groupID = groupID }
        commit.action = action
        return commit
    }

    static func profile(_ name: String, _ description: String = "") -> WireGroupProfile {
        var profile = WireGroupProfile()
        profile.name = name
        profile.description_p = description
        return profile
    }

    static func create(_ name: String = "Hikers", description: String = "") -> WireGroupCommit.OneOf_Action {
        var create = WireCreateGroup()
        create.profile = profile(name, description)
        return .create(create)
    }

    static func add(_ member: PublicIdentity, as role: GroupRole) -> WireGroupCommit.OneOf_Action {
        add(member.wireBundle, wireRole: role.wire)
    }

    static func add(_ bundle: WireKeyBundle, wireRole: WireGroupRole) -> WireGroupCommit.OneOf_Action {
        var add = WireAddMember()
        add.member = bundle
        add.role = wireRole
        return .addMember(add)
    }

    static func remove(_ inbox: InboxID) -> WireGroupCommit.OneOf_Action { remove(text: inbox.rawValue) }

    static func remove(text: String) -> WireGroupCommit.OneOf_Action {
        var remove = WireRemoveMember()
        remove.inboxID = text
        return .removeMember(remove)
    }

    static func changeRole(_ inbox: InboxID, to role: GroupRole) -> WireGroupCommit.OneOf_Action {
        changeRole(inbox, wireRole: role.wire)
    }

    static func changeRole(_ inbox: InboxID, wireRole: WireGroupRole) -> WireGroupCommit.OneOf_Action {
        var change = WireChangeRole()
        change.inboxID = inbox.rawValue
        change.role = wireRole
        return .changeRole(change)
    }

    static func changeRoles(_ inboxes: [InboxID], wireRole: WireGroupRole) -> WireGroupCommit.OneOf_Action {
        var change = WireChangeRoles()
        change.inboxIds = inboxes.map(\.rawValue)
        change.role = wireRole
        return .changeRoles(change)
    }

    static func removeMembers(
        _ inboxes: [InboxID], ban: Bool = false, withMessages: Bool = false
    ) -> WireGroupCommit.OneOf_Action {
        var remove = WireRemoveMembers()
        remove.inboxIds = inboxes.map(\.rawValue)
        remove.ban = ban
        remove.withMessages = withMessages
        return .removeMembers(remove)
    }

    static func block(_ inboxes: [InboxID], _ blocked: Bool = true) -> WireGroupCommit.OneOf_Action {
        var block = WireBlockMembers()
        block.inboxIds = inboxes.map(\.rawValue)
        block.blocked = blocked
        return .blockMembers(block)
    }

    static func welcome(_ text: String) -> WireGroupCommit.OneOf_Action {
        var welcome = WireSetWelcomeMessage()
        welcome.text = text
        return .setWelcome(welcome)
    }

    static let leave = WireGroupCommit.OneOf_Action.leave(WireLeaveGroup())
    static let rekey = WireGroupCommit.OneOf_Action.rekey(WireRekey())

    static func updateProfile(_ name: String, _ description: String = "") -> WireGroupCommit.OneOf_Action {
        var update = WireUpdateProfile()
        update.profile = profile(name, description)
        return .updateProfile(update)
    }

    /// Seals a new key to `members` for the epoch `commit` starts, and
    /// attaches it with its commitment.
    @discardableResult
    static func attachFreshKey(
        to commit: inout WireGroupCommit, for members: [PublicIdentity]
    ) throws
        -> GroupFreshKey
    {
        let key = EpochKeys.newKey()
        let sealed = try EpochKeys.seal(key, to: members, groupID: commit.groupID, epoch: commit.epoch + 1)
        let fresh = GroupFreshKey(key: key, sealed: sealed, commitment: EpochKeys.commitment(to: key))
        commit.epochKeys = fresh.sealed
        commit.epochKeyCommitment = fresh.commitment
        return fresh
    }

    static func signed(_ commit: WireGroupCommit, by identity: Identity) throws -> WireSignedGroupCommit {
        try VerifiedGroupCommit.sign(commit, by: identity)
    }

    /// Signs and verifies: what a member's client hands to `apply`.
    static func verified(_ commit: WireGroupCommit, by identity: Identity) throws -> VerifiedGroupCommit {
        try VerifiedGroupCommit.verify(signed(commit, by: identity))
    }

    /// A signed commit sealed as the SDK seals it: under the commit key of
    /// the epoch it builds on, with that epoch's transcript and epoch link.
    static func sealed(
        _ signed: WireSignedGroupCommit, epoch: UInt64, epochKey: SymmetricKey, groupID: String = groupID,
        transcript: Data = Data(), epochLink: Data = Data()
    ) throws -> WireSealedGroupCommit {
        try CommitDraft.sealed(
            signed, epoch: epoch, epochKey: epochKey, groupID: groupID, transcript: transcript, epochLink: epochLink)
    }

    /// The log entry bytes a relay carries for a sealed commit.
    static func entryPayload(_ sealed: WireSealedGroupCommit) -> Data {
        var entry = WireGroupLogEntry()
        entry.sealedCommit = sealed
        return FrameCodec.encode(entry)
    }

    /// The log entry bytes of a commit in the clear, as the protocol before
    /// ADR 0008 published it: every member rejects it.
    static func plainEntryPayload(_ signed: WireSignedGroupCommit) -> Data {
        var entry = WireGroupLogEntry()
        entry.commit = signed
        return FrameCodec.encode(entry)
    }

    static func envelope(_ payload: Data, seq: UInt64) -> WireEnvelope {
        var envelope = WireEnvelope()
        envelope.topic = "group/\(topicID)"
        envelope.seq = seq
        envelope.serverTimeMs = 1_700_000_000_000 + Int64(seq)
        envelope.payload = payload
        return envelope
    }

    /// What must hold for every state any reducer reaches.
    static func invariantViolations(_ state: GroupState, appliedCount: Int) -> [String] {
        var problems: [String] = []
        if !state.members.isEmpty, !state.members.values.contains(where: { $0.role == .owner }) {
            problems.append("members but no owner")
        }
        if state.epoch != UInt64(appliedCount) {
            problems.append("epoch \(state.epoch) after \(appliedCount) applied commits")
        }
        if state.appliedCommitIDs.count != appliedCount {
            problems.append("\(state.appliedCommitIDs.count) applied commit ids after \(appliedCount) commits")
        }
        for member in state.members.values {
            if !GroupRole.allCases.contains(member.role) || GroupRole(wire: member.role.wire) != member.role {
                problems.append("\(member.inboxID) has an invalid role")
            }
            if member.inboxID != member.identity.inboxID { problems.append("member keyed by a foreign inbox") }
        }
        for (inbox, member) in state.members where inbox != member.inboxID {
            problems.append("\(inbox) maps to \(member.inboxID)")
        }
        if state.needsRekey, state.members.isEmpty { problems.append("needsRekey on an empty group") }
        if !state.blocked.isSubset(of: Set(state.members.keys)) { problems.append("a non-member is blocked") }
        if state.welcomeMessage.utf8.count > 2048 { problems.append("welcome message over its limit") }
        let members = Set(state.members.keys)
        if !members.isDisjoint(with: state.pending.keys) { problems.append("a member is also pending") }
        if !members.isDisjoint(with: state.invited.keys) { problems.append("a member is also invited") }
        if let link = state.groupLink, link.tag == state.inviteTag || state.retiredLinkTags.contains(link.tag) {
            problems.append("the link's tag is the invite tag or a retired one")
        }
        return problems
    }

    /// A state restored from its snapshot after a wire round trip, as a
    /// newcomer receives it in a welcome.
    static func restored(_ state: GroupState) throws -> GroupState {
        let bytes = FrameCodec.encode(state.snapshot)
        return try GroupState(
            snapshot: FrameCodec.decode(WireGroupSnapshot.self, from: bytes, limit: WireLimits.maxPayloadBytes))
    }
}

extension GroupState {
    /// Applies a commit signed by `identity` (real signature, verified).
    mutating func apply(_ commit: WireGroupCommit, signedBy identity: Identity) throws -> GroupOutcome {
        apply(try GroupTest.verified(commit, by: identity))
    }
}
