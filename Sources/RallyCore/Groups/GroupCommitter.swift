import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// The one place group commits are built, sealed and published: every
/// capability that changes a group (membership, roles, invites, joins)
/// hands it a build step and gets back what the log made of it.
struct GroupCommitter: Sendable {
    /// How often a commit is rebuilt after losing a race to another commit.
    static let attempts = 8

    let context: ClientContext
    let log: GroupLog

    /// Builds a commit on the latest state and publishes it as a control
    /// entry that builds on the last control entry this client read. If
    /// another commit got there first the relay answers CONFLICT: read the
    /// log, rebuild on the new state, try again. Any rejection by the rules
    /// is final. A build that returns nil says the intent no longer
    /// applies: nothing is published and the result is nil. Otherwise the
    /// result is the commit id.
    @discardableResult
    func commit(
        _ groupID: String, build: (GroupState) throws(RallyClientError) -> WireGroupCommit?
    ) async throws(RallyClientError) -> Data? {
        for _ in 1...Self.attempts {
            try await log.sync(groupID)
            let record = try log.activeGroup(groupID)
            guard let commit = try build(record.state) else { return nil }
            do {
                _ = try await publish(commit, to: record)
            } catch .relay(.conflict), .relay(.accessRevoked) {
                // Another commit got there first (and may have replaced the
                // topic key): read it, then rebuild.
                continue
            }
            try await log.sync(groupID)
            do {
                try await requireApplied(commit.commitID)
                return commit.commitID
            } catch .group(.commitRejected(.staleEpoch)) {
                continue
            }
        }
        throw .group(.gaveUp(attempts: Self.attempts))
    }

    /// Judges one of this identity's commits by what the log made of it,
    /// as recorded by whichever process on this home read it.
    func requireApplied(_ commitID: Data) async throws(RallyClientError) {
        let recorded = try context.stored { () throws(LocalStoreError) in try context.store.ownCommit(commitID) }
        guard let recorded else {
            throw .relay(.protocolViolation("published commit did not come back from the group log"))
        }
        let typed = await log.ownOutcomes.take(commitID)
        guard let rejection = recorded.rejection else { return }
        // This process read it: the typed reason. Another process did: its words.
        if case .rejected(let reason)? = typed { throw .group(.commitRejected(reason)) }
        throw .group(.commitRefused(rejection))
    }

    // MARK: Building

    /// A commit building on `state`: its epoch and transcript.
    func newCommit(on state: GroupState) -> WireGroupCommit {
        CommitDraft.on(state, by: context.identity.publicIdentity, at: context.clock.now())
    }

    /// Seals a fresh epoch key to `members` for the epoch the commit starts.
    func attachFreshKey(
        to commit: inout WireGroupCommit, for members: [GroupMember], state: GroupState
    ) throws(RallyClientError) {
        let key = EpochKeys.newKey()
        do {
            commit.epochKeys = try EpochKeys.seal(
                key, to: members.map(\.identity), groupID: state.groupID, epoch: state.epoch + 1)
        } catch {
            throw .recipientKeysInvalid(context.identity.inboxID, reason: error.description)
        }
        commit.epochKeyCommitment = EpochKeys.commitment(to: key)
    }

    /// Replaces the invite identity in a commit that takes an admin's
    /// rights away: a new seed, sealed to the admins who keep theirs, and a
    /// new tag. Invites issued before it stop admitting anyone.
    func attachInviteRotation(
        to commit: inout WireGroupCommit, state: GroupState, admins: Set<InboxID>
    ) throws(RallyClientError) {
        guard state.inviteIdentity != nil else { return }
        let keys = try newInviteKeys()
        let seed = keys.seed
        commit.rotateInvites.inviteIdentity = keys.identity.publicIdentity.wireBundle
        commit.rotateInvites.inviteTag = Randomness.bytes(16)
        commit.rotateInvites.sealedSeeds = try sealInviteSeed(
            seed, to: admins.compactMap { state.members[$0]?.identity }, state: state)
    }

    /// A new invite identity: a fresh seed and the keys it yields.
    func newInviteKeys() throws(RallyClientError) -> InviteKeys {
        do {
            return try InviteKeys(seed: InviteKeys.newSeed())
        } catch {
            throw .recipientKeysInvalid(context.identity.inboxID, reason: error.description)
        }
    }

    /// Seals the invite seed for the commit built on `state` (members open
    /// it at the epoch that commit starts).
    func sealInviteSeed(
        _ seed: SymmetricKey, to recipients: [PublicIdentity], state: GroupState
    ) throws(RallyClientError) -> [WireSealedEpochKey] {
        do {
            return try EpochKeys.seal(
                seed, to: recipients, groupID: state.groupID, epoch: state.epoch + 1, info: EpochKeys.inviteSeedInfo)
        } catch {
            throw .recipientKeysInvalid(context.identity.inboxID, reason: error.description)
        }
    }

    // MARK: Publishing

    /// Signs and seals a commit under the commit key of the epoch it builds
    /// on, and publishes it as a control entry. A commit that replaces the
    /// epoch key also moves the topic to the access key derived from it.
    func publish(_ commit: WireGroupCommit, to record: GroupRecord) async throws(RallyClientError) -> WirePublishAck {
        let (entry, rotateTo) = try sealedEntry(commit, record: record)
        return try await publishEntry(
            entry, to: record, key: commit.commitID, control: true, rotateAccessKey: rotateTo)
    }

    /// The log entry of a commit, and the access key the topic moves to
    /// with it (for a commit that replaces the epoch key).
    func sealedEntry(
        _ commit: WireGroupCommit, record: GroupRecord
    ) throws(RallyClientError) -> (entry: WireGroupLogEntry, rotateAccessKey: Data?) {
        let epochKey = try context.stored { () throws(LocalStoreError) in
            try context.store.epochKey(group: record.groupID, epoch: commit.epoch)
        }
        guard let epochKey else { throw .group(.missingEpochKey(commit.epoch)) }
        let identity = context.identity
        var entry = WireGroupLogEntry()
        var rotateTo: Data?
        do {
            entry.sealedCommit = try CommitDraft.sealed(
                VerifiedGroupCommit.sign(commit, by: identity), epoch: commit.epoch, epochKey: epochKey,
                groupID: record.groupID, transcript: record.state.transcript, epochLink: record.epochLink)
            if !commit.epochKeys.isEmpty {
                // This client is among the members the fresh key is sealed to.
                let fresh = try EpochKeys.open(
                    commit.epochKeys, as: identity, groupID: record.groupID, epoch: commit.epoch + 1,
                    commitment: commit.epochKeyCommitment)
                rotateTo = try TopicAccess(secret: TopicAccess.secret(fromEpochKey: fresh)).publicKey
            }
        } catch {
            throw .recipientKeysInvalid(identity.inboxID, reason: "\(error)")
        }
        return (entry, rotateTo)
    }

    /// Publishes one entry to a group's topic with its access key.
    func publishEntry(
        _ entry: WireGroupLogEntry, to record: GroupRecord, key: Data, control: Bool = false,
        rotateAccessKey: Data? = nil, expiresAt: Date? = nil
    ) async throws(RallyClientError) -> WirePublishAck {
        let payload = FrameCodec.encode(entry)
        guard payload.count <= WireLimits.maxPayloadBytes else {
            throw .messageTooLarge(size: payload.count, limit: WireLimits.maxPayloadBytes)
        }
        guard let access = record.topicAccess else {
            throw .group(.noTopicAccess("\"\(record.state.profile.name)\""))
        }
        let topic = record.topic
        let expected = record.lastControlSeq
        return try await context.withRetries("group publish") { link throws(RelayClientError) in
            try await link.publish(
                topic: topic, payload: payload, idempotencyKey: key, shouldPush: true, expiresAt: expiresAt,
                access: access,
                control: control, expectedControlSeq: expected, rotateAccessKey: rotateAccessKey)
        }
    }
}

extension GroupCommitter {
    /// Withdraws an invitation (admin); `declined` records the invitee's
    /// own refusal.
    func withdrawInvitation(
        of inbox: InboxID, in groupID: String, declined: Bool = false
    ) async throws(RallyClientError) {
        try await commit(groupID) { state throws(RallyClientError) in
            guard state.invited[inbox] != nil else { throw .group(.commitRejected(.notInvited(inbox))) }
            var commit = newCommit(on: state)
            commit.withdrawInvitation.inboxID = inbox.rawValue
            commit.withdrawInvitation.declined = declined
            return commit
        }
    }
}
