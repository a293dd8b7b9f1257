import Crypto
import Foundation
import RallyCrypto
import RallyWire

public enum GroupClientError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownGroup(String)
    case ambiguousGroup(String, matches: [String])
    case notActive(String, GroupRecord.Status)
    case commitRejected(GroupRejection)
    case gaveUp(attempts: Int)
    case missingEpochKey(UInt64)
    case mayNotSend(GroupRole)
    case diverged(group: String, reason: String)
    /// Rejected by the rules, as recorded by another process on this home.
    case commitRefused(String)
    case noTopicAccess(String)

    public var description: String {
        switch self {
        case .unknownGroup(let reference): "no group \"\(reference)\" here: see `rally group list`"
        case .ambiguousGroup(let reference, let matches):
            "\"\(reference)\" matches several groups: \(matches.joined(separator: ", ")); use more of the id"
        case .notActive(let group, let status):
            switch status {
            case .removed: "you were removed from \(group)"
            case .left: "you left \(group)"
            case .creating, .active: "group \(group) is not ready yet"
            }
        case .commitRejected(let rejection): "the group refused the change: \(rejection)"
        case .gaveUp(let attempts): "the group kept changing under this change; gave up after \(attempts) attempts"
        case .missingEpochKey(let epoch): "this client has no key for epoch \(epoch) of the group"
        case .mayNotSend(let role): "your role in this group is \(role), which may not send"
        case .diverged(let group, let reason):
            "the relay showed this device a different history of \(group) than the other members see (\(reason)); nothing more is sent into it: check with the other members out of band, then forget the group and have an admin add you again"
        case .commitRefused(let reason): "the group refused the change: \(reason)"
        case .noTopicAccess(let group):
            "this device has no access key for the topic of \(group); ask an admin to add you again"
        }
    }
}

/// What a group sync saw.
public struct GroupSyncReport: Sendable {
    public var events: [GroupLogEvent] = []
    public var messages: [StoredMessage] {
        events.compactMap { if case .message(let message) = $0 { message } else { nil } }
    }
    public var rejections: [(seq: UInt64, reason: GroupEntryRejection)] {
        events.compactMap { if case .rejected(let seq, let reason) = $0 { (seq, reason) } else { nil } }
    }
}

extension RallyClient {
    /// How often a commit is rebuilt after losing a race to another commit.
    public static let commitAttempts = 8

    // MARK: Queries

    public func groups() throws(RallyClientError) -> [GroupRecord] {
        do {
            return try store.groups()
        } catch {
            throw .store(error)
        }
    }

    /// Resolves a group by id, id prefix or name.
    public func group(_ reference: String) throws(RallyClientError) -> GroupRecord {
        let matches: [GroupRecord]
        do {
            matches = try store.findGroup(reference)
        } catch {
            throw .store(error)
        }
        guard let first = matches.first else { throw .group(.unknownGroup(reference)) }
        guard matches.count == 1 else { throw .group(.ambiguousGroup(reference, matches: matches.map(\.groupID))) }
        return first
    }

    // MARK: Create

    /// Creates a group with this identity as its owner: a random group id,
    /// a random 256-bit topic id only members learn, and a first epoch key.
    /// Creates a group with this identity as its owner. Its first epoch key
    /// yields the topic's access key, the topic id names that key (nobody
    /// can claim the topic first) and the group id names the topic (a
    /// welcome cannot pass another topic off as this group).
    public func createGroup(name: String, description: String = "") async throws(RallyClientError) -> GroupRecord {
        let firstKey = EpochKeys.newKey()
        let accessSecret = TopicAccess.secret(fromEpochKey: firstKey)
        let access: TopicAccess
        do {
            access = try TopicAccess(secret: accessSecret)
        } catch {
            throw .recipientKeysInvalid(identity.inboxID, reason: error.description)
        }
        let topicID = access.foundedTopicID
        let groupID = GroupRecord.groupID(forTopicID: topicID)
        let record = GroupRecord(
            groupID: groupID, topicID: topicID, state: GroupState(groupID: groupID), status: .creating,
            accessSecret: access.secretBytes)
        var commit = newCommit(on: record.state)
        commit.create.profile.name = name
        commit.create.profile.description_p = description
        do {
            try store.saveNewGroup(record, epochKey: (0, firstKey), cursor: 0)
        } catch {
            throw .store(error)
        }
        _ = try await publish(commit, to: record)
        _ = try await syncGroup(groupID)
        try requireApplied(commit.commitID)
        return try group(groupID)
    }

    // MARK: Membership changes

    public func addMember(
        _ inbox: InboxID, role: GroupRole = .member, to reference: String
    ) async throws(RallyClientError)
        -> GroupRecord
    {
        let newcomer = try await lookUp(inbox)
        let groupID = try group(reference).groupID
        let admission = try await commitWithRetries(groupID) { state throws(RallyClientError) in
            if state.members[inbox] != nil { throw .group(.commitRejected(.alreadyMember(inbox))) }
            var commit = self.newCommit(on: state)
            commit.addMember.member = newcomer.wireBundle
            commit.addMember.role = role.wire
            return commit
        }
        if let admission { try await sendWelcome(to: newcomer, groupID: groupID, admission: admission) }
        return try group(groupID)
    }

    /// Removes a member; with `ban`, later join requests from them are
    /// refused too.
    public func removeMember(
        _ inbox: InboxID, from reference: String, ban: Bool = false
    ) async throws(RallyClientError) -> GroupRecord {
        let groupID = try group(reference).groupID
        try await commitWithRetries(groupID) { state throws(RallyClientError) in
            guard let target = state.members[inbox] else {
                throw .group(.commitRejected(.notAMemberTarget(inbox)))
            }
            var commit = self.newCommit(on: state)
            commit.removeMember.inboxID = inbox.rawValue
            commit.removeMember.ban = ban
            try self.attachFreshKey(to: &commit, for: state.members.values.filter { $0.inboxID != inbox }, state: state)
            if target.role >= .admin {
                try self.attachInviteRotation(to: &commit, state: state, admins: state.admins.subtracting([inbox]))
            }
            return commit
        }
        return try group(groupID)
    }

    public func changeRole(
        of inbox: InboxID, to role: GroupRole, in reference: String
    ) async throws(RallyClientError)
        -> GroupRecord
    {
        let groupID = try group(reference).groupID
        let seed: SymmetricKey?
        do {
            seed = try store.inviteSeed(group: groupID)
        } catch {
            throw .store(error)
        }
        try await commitWithRetries(groupID) { state throws(RallyClientError) in
            var commit = self.newCommit(on: state)
            commit.changeRole.inboxID = inbox.rawValue
            commit.changeRole.role = role.wire
            let wasAdmin = (state.role(of: inbox) ?? .observer) >= .admin
            // A new admin gets the invite seed, so it answers join requests.
            if role >= .admin, let seed, state.inviteIdentity != nil,
                let target = state.members[inbox], !wasAdmin
            {
                let sealed = try self.sealInviteSeed(seed, to: [target.identity], state: state)
                commit.changeRole.inviteSeed = sealed[0]
            }
            // A demoted admin keeps the old seed: the invites move on.
            if wasAdmin, role < .admin {
                try self.attachInviteRotation(to: &commit, state: state, admins: state.admins.subtracting([inbox]))
            }
            return commit
        }
        return try group(groupID)
    }

    /// Replaces the epoch key (after someone left, or on an admin's wish).
    public func rekey(_ reference: String) async throws(RallyClientError) {
        let groupID = try group(reference).groupID
        try await commitWithRetries(groupID) { state throws(RallyClientError) in
            var commit = self.newCommit(on: state)
            commit.rekey = WireRekey()
            try self.attachFreshKey(to: &commit, for: Array(state.members.values), state: state)
            return commit
        }
    }

    /// Builds a commit on the latest state and publishes it as a control
    /// entry that builds on the last control entry this client read. If
    /// another commit got there first the relay answers CONFLICT: read the
    /// log, rebuild on the new state, try again. Any rejection by the rules
    /// is final. A build that returns nil says the intent no longer
    /// applies: nothing is published and the result is nil. Otherwise the
    /// result is the commit id.
    @discardableResult
    func commitWithRetries(
        _ groupID: String, build: (GroupState) throws(RallyClientError) -> WireGroupCommit?
    ) async throws(RallyClientError) -> Data? {
        for attempt in 1...Self.commitAttempts {
            _ = try await syncGroup(groupID)
            let record = try activeGroup(groupID)
            guard let commit = try build(record.state) else { return nil }
            if let hook = commitRaceHook { await hook(attempt) }
            do {
                _ = try await publish(commit, to: record)
            } catch .relay(.conflict), .relay(.accessRevoked) {
                // Another commit got there first (and may have replaced the
                // topic key): read it, then rebuild.
                continue
            }
            _ = try await syncGroup(groupID)
            do {
                try requireApplied(commit.commitID)
                return commit.commitID
            } catch .group(.commitRejected(.staleEpoch)) {
                continue
            }
        }
        throw .group(.gaveUp(attempts: Self.commitAttempts))
    }

    /// Judges one of this identity's commits by what the log made of it,
    /// as recorded by whichever process on this home read it.
    func requireApplied(_ commitID: Data) throws(RallyClientError) {
        let recorded: LocalStore.OwnCommit?
        do {
            recorded = try store.ownCommit(commitID)
        } catch {
            throw .store(error)
        }
        guard let recorded else {
            throw .relay(.protocolViolation("published commit did not come back from the group log"))
        }
        guard let rejection = recorded.rejection else { return }
        // This process read it: the typed reason. Another process did: its words.
        if let typed = ownCommitOutcomes.removeValue(forKey: commitID), case .rejected(let reason) = typed {
            throw .group(.commitRejected(reason))
        }
        throw .group(.commitRefused(rejection))
    }

    private func activeGroup(_ groupID: String) throws(RallyClientError) -> GroupRecord {
        let record = try group(groupID)
        let label = "\"\(record.state.profile.name)\" (\(groupID))"
        guard record.status == .active else { throw .group(.notActive(label, record.status)) }
        if let reason = record.divergence { throw .group(.diverged(group: label, reason: reason)) }
        return record
    }

    /// A commit building on `state`: its epoch and transcript.
    nonisolated func newCommit(on state: GroupState) -> WireGroupCommit {
        var commit = WireGroupCommit()
        commit.groupID = state.groupID
        commit.epoch = state.epoch
        commit.parentTranscript = state.transcript
        commit.commitID = MessageSealing.newMessageID()
        commit.author = identity.publicIdentity.wireBundle
        commit.createdAtMs = LocalStore.millis(Date())
        return commit
    }

    /// Replaces the invite identity in a commit that takes an admin's
    /// rights away: a new seed, sealed to the admins who keep theirs, and a
    /// new tag. Invites issued before it stop admitting anyone.
    nonisolated func attachInviteRotation(
        to commit: inout WireGroupCommit, state: GroupState, admins: Set<InboxID>
    ) throws(RallyClientError) {
        guard state.inviteIdentity != nil else { return }
        let seed = InviteKeys.newSeed()
        let keys: InviteKeys
        do {
            keys = try InviteKeys(seed: seed)
        } catch {
            throw .recipientKeysInvalid(identity.inboxID, reason: error.description)
        }
        commit.rotateInvites.inviteIdentity = keys.identity.publicIdentity.wireBundle
        commit.rotateInvites.inviteTag = Self.randomBytes(16)
        commit.rotateInvites.sealedSeeds = try sealInviteSeed(
            seed, to: admins.compactMap { state.members[$0]?.identity }, state: state)
    }

    func attachFreshKey(
        to commit: inout WireGroupCommit, for members: [GroupMember], state: GroupState
    )
        throws(RallyClientError)
    {
        let key = EpochKeys.newKey()
        do {
            commit.epochKeys = try EpochKeys.seal(
                key, to: members.map(\.identity), groupID: state.groupID, epoch: state.epoch + 1)
        } catch {
            throw .recipientKeysInvalid(identity.inboxID, reason: error.description)
        }
        commit.epochKeyCommitment = EpochKeys.commitment(to: key)
    }

    /// Signs and seals a commit under the commit key of the epoch it builds
    /// on, and publishes it as a control entry. A commit that replaces the
    /// epoch key also moves the topic to the access key derived from it.
    private func publish(
        _ commit: WireGroupCommit, to record: GroupRecord
    ) async throws(RallyClientError)
        -> WirePublishAck
    {
        let (entry, rotateTo) = try sealedEntry(commit, record: record)
        return try await publishEntry(
            entry, to: record, key: commit.commitID, control: true, rotateAccessKey: rotateTo)
    }

    /// The log entry of a commit, and the access key the topic moves to
    /// with it (for a commit that replaces the epoch key).
    func sealedEntry(
        _ commit: WireGroupCommit, record: GroupRecord
    ) throws(RallyClientError) -> (entry: WireGroupLogEntry, rotateAccessKey: Data?) {
        let epochKey: SymmetricKey?
        do {
            epochKey = try store.epochKey(group: record.groupID, epoch: commit.epoch)
        } catch {
            throw .store(error)
        }
        guard let epochKey else { throw .group(.missingEpochKey(commit.epoch)) }
        var entry = WireGroupLogEntry()
        var rotateTo: Data?
        do {
            var sealed = try CommitSealing.seal(
                VerifiedGroupCommit.sign(commit, by: identity), commitKey: CommitSealing.commitKey(epochKey: epochKey),
                groupID: record.groupID, epoch: commit.epoch)
            sealed.transcript = record.state.transcript
            sealed.epochLink = record.epochLink
            entry.sealedCommit = sealed
            if !commit.epochKeys.isEmpty {
                // This client is among the members the fresh key is sealed to.
                let fresh = try EpochKeys.open(
                    commit.epochKeys, as: identity, groupID: record.groupID, epoch: commit.epoch + 1,
                    commitment: commit.epochKeyCommitment)
                rotateTo = try TopicAccess(secret: TopicAccess.secret(fromEpochKey: fresh)).publicKey
            }
        } catch {
            throw .recipientKeysInvalid(identity.inboxID, reason: error.description)
        }
        return (entry, rotateTo)
    }

    private func publishEntry(
        _ entry: WireGroupLogEntry, to record: GroupRecord, key: Data, control: Bool = false,
        rotateAccessKey: Data? = nil
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
        return try await withRetries("group publish") { connection throws(RelayClientError) in
            try await connection.publish(
                topic: topic, payload: payload, idempotencyKey: key, shouldPush: true, access: access,
                control: control, expectedControlSeq: expected, rotateAccessKey: rotateAccessKey)
        }
    }

    // MARK: Welcome

    /// What a welcome for a member admitted through an invite carries.
    struct InviteWelcome {
        let tag: Data
        let keys: InviteKeys
        let requestID: Data
    }

    /// Sends a newcomer its welcome: the state right after its admission
    /// commit, at that commit's seq, with the key that opens the commit, so
    /// the newcomer checks the welcome against the log itself. Without an
    /// admission (a joiner who is already a member), the welcome only ends
    /// that join; it opens no group.
    func sendWelcome(
        to newcomer: PublicIdentity, groupID: String, admission: Data?, invite: InviteWelcome? = nil
    ) async throws(RallyClientError) {
        let record = try group(groupID)
        var welcome = WireGroupWelcome()
        welcome.groupID = groupID
        welcome.topicID = record.topicID
        do {
            if let admission, let own = try store.ownCommit(admission), own.rejection == nil,
                own.snapshot.epoch > 0,
                let before = try store.epochKey(group: groupID, epoch: own.snapshot.epoch - 1),
                let after = try store.epochKey(group: groupID, epoch: own.snapshot.epoch)
            {
                welcome.snapshotSeq = own.seq
                welcome.snapshot = own.snapshot
                welcome.epochKey = after.withUnsafeBytes { Data($0) }
                welcome.admissionCommitKey = CommitSealing.commitKey(epochKey: before).withUnsafeBytes { Data($0) }
                welcome.epochLink = CommitSealing.epochLink(
                    previousEpochKey: before, groupID: groupID, epoch: own.snapshot.epoch,
                    transcript: own.snapshot.transcript)
                welcome.topicAccessSecret = record.accessSecret ?? Data()
                // A new admin gets the invite seed, so it can answer join requests.
                if let seed = try store.inviteSeed(group: groupID),
                    let role = record.state.role(of: newcomer.inboxID), role >= .admin
                {
                    welcome.inviteSeed = seed.withUnsafeBytes { Data($0) }
                }
            }
        } catch {
            throw .store(error)
        }
        if let invite {
            welcome.inviteTag = invite.tag.hexString
            welcome.joinRequestID = invite.requestID
            welcome.inviteProof = invite.keys.welcomeProof(
                tag: invite.tag, groupID: groupID, newcomer: newcomer.inboxID, requestID: invite.requestID)
        }
        _ = try await send(welcome, codec: GroupWelcomeCodec(), to: newcomer.inboxID)
    }

    /// Checks a welcome and, if it is sound, stores the group with the
    /// message, in one transaction. A welcome that fails the checks is kept
    /// as a message but opens no group, and hides no later welcome. A
    /// welcome that answers a join request (it names an invite tag) must
    /// carry the invite identity's proof for that very request; then it
    /// also finishes that join. Only a failure to reach the relay throws:
    /// the welcome is read again on the next sync.
    func acceptWelcome(
        _ welcome: WireGroupWelcome, message: StoredMessage, topic: TopicName, seq: UInt64
    ) async throws(RallyClientError) -> Bool {
        func keepAsMessage(_ joinEvent: JoinEventForStore? = nil) throws(RallyClientError) -> Bool {
            do {
                return try store.ingest(topic: topic, seq: seq, message: message, joinEvent: joinEvent)
            } catch {
                throw .store(error)
            }
        }
        var joinEvent: JoinEventForStore?
        var leaveAfterwards = false
        if !welcome.inviteTag.isEmpty {
            switch joinAnswered(by: welcome) {
            case nil:
                logger.warning("ignoring a welcome from \(message.sender) for a join this client did not ask for")
                return try keepAsMessage()
            case .cancelled?:
                // Admitted after the joiner cancelled: take the group only
                // to leave it, so a cancelled join leaves no membership.
                leaveAfterwards = true
            case .underWay?:
                joinEvent = JoinEventForStore(
                    tag: welcome.inviteTag,
                    event: .welcomeReceived(tag: welcome.inviteTag, groupID: welcome.groupID, from: message.sender))
            }
        }
        if (try? store.group(welcome.groupID)) != nil {
            let existing = joinEvent.map {
                JoinEventForStore(tag: $0.tag, event: .alreadyMember(groupID: welcome.groupID))
            }
            return try keepAsMessage(existing)
        }
        let record: GroupRecord
        switch try await verify(welcome) {
        case .failure(let reason):
            logger.warning("ignoring group welcome from \(message.sender): \(reason)")
            return try keepAsMessage()
        case .success(let verified):
            record = verified
        }
        var inviteSeed: SymmetricKey?
        if !welcome.inviteSeed.isEmpty, let keys = try? InviteKeys(seed: SymmetricKey(data: welcome.inviteSeed)),
            let named = record.state.inviteIdentity, keys.identity.publicIdentity.hasSameKeys(as: named)
        {
            inviteSeed = keys.seed
        }
        do {
            let stored = try store.ingestWelcome(
                record, epochKey: (record.state.epoch, SymmetricKey(data: welcome.epochKey)),
                groupCursor: welcome.snapshotSeq, inboxTopic: topic, inboxSeq: seq, message: message,
                inviteSeed: inviteSeed, joinEvent: joinEvent)
            if leaveAfterwards { groupsToLeave.insert(record.groupID) }
            return stored
        } catch {
            throw .store(error)
        }
    }

    enum JoinAnswerMatch {
        case underWay, cancelled
    }

    /// Whether a welcome naming an invite tag answers one of this client's
    /// unfinished joins: signed by that invite's identity (which only the
    /// group's admins hold) for this group, this member and that request.
    private func joinAnswered(by welcome: WireGroupWelcome) -> JoinAnswerMatch? {
        guard let tag = Data(hexString: welcome.inviteTag),
            let attempts = try? store.joinAttempts()
        else { return nil }
        for attempt in attempts
        where attempt.invite.tag == welcome.inviteTag && Data(hexString: attempt.requestID) == welcome.joinRequestID {
            guard attempt.phase != .joined, attempt.phase != .failed,
                let inviteIdentity = try? store.contact(attempt.invite.inviterInbox),
                InviteKeys.isValidWelcomeProof(
                    welcome.inviteProof, by: inviteIdentity, tag: tag, groupID: welcome.groupID,
                    newcomer: identity.inboxID, requestID: welcome.joinRequestID)
            else { continue }
            return attempt.phase == .cancelled ? .cancelled : .underWay
        }
        return nil
    }

    /// Leaves the groups this client was admitted to after cancelling the
    /// join. A failure is logged; the next sync tries again.
    func leaveCancelledJoins() async {
        for groupID in groupsToLeave {
            do {
                try await leaveGroup(groupID)
                groupsToLeave.remove(groupID)
            } catch {
                logger.warning("could not leave \(groupID), joined after cancelling: \(error)")
            }
        }
    }

    /// Leaves a group. The remaining members replace the key before anyone
    /// sends again.
    public func leaveGroup(_ reference: String) async throws(RallyClientError) {
        let groupID = try group(reference).groupID
        try await commitWithRetries(groupID) { state throws(RallyClientError) in
            var commit = self.newCommit(on: state)
            commit.leave = WireLeaveGroup()
            return commit
        }
    }

    enum WelcomeProblem: Error, CustomStringConvertible {
        case malformed(String)
        case notIncluded
        case notInTheLog(String)

        var description: String {
            switch self {
            case .malformed(let what): "malformed welcome: \(what)"
            case .notIncluded: "the welcome's group does not include this member"
            case .notInTheLog(let why): "the welcome does not match the group's log: \(why)"
            }
        }
    }

    /// A welcome opens a group only when the group's own log backs it: the
    /// group id names the topic, the topic's access key reads the entry at
    /// the snapshot's seq, that entry is a commit sealed under the given
    /// commit key, signed by an admin, adding exactly this identity, and
    /// the snapshot is the state that commit's transcript leads to.
    private func verify(
        _ welcome: WireGroupWelcome
    ) async throws(RallyClientError) -> Result<GroupRecord, WelcomeProblem> {
        guard welcome.groupID == welcome.snapshot.groupID, (try? TopicName.group(welcome.topicID)) != nil,
            welcome.groupID == GroupRecord.groupID(forTopicID: welcome.topicID)
        else { return .failure(.malformed("the group id does not name its topic")) }
        guard welcome.epochKey.count == EpochKeys.keyByteCount,
            welcome.admissionCommitKey.count == EpochKeys.keyByteCount, welcome.snapshotSeq > 0,
            let access = try? TopicAccess(secret: SymmetricKey(data: welcome.topicAccessSecret))
        else { return .failure(.malformed("keys")) }
        let state: GroupState
        do {
            state = try GroupState(snapshot: welcome.snapshot)
        } catch {
            return .failure(.malformed("snapshot"))
        }
        guard let me = state.members[identity.inboxID], me.identity.hasSameKeys(as: identity.publicIdentity) else {
            return .failure(.notIncluded)
        }
        let topic = try! TopicName.group(welcome.topicID)
        let envelope: WireEnvelope
        switch try await readEntry(topic, seq: welcome.snapshotSeq, access: access) {
        case .failure(let problem): return .failure(problem)
        case .success(let read): envelope = read
        }
        guard envelope.control,
            let entry = try? FrameCodec.decode(
                WireGroupLogEntry.self, from: envelope.payload, limit: WireLimits.maxPayloadBytes),
            case .sealedCommit(let sealed)? = entry.entry, sealed.epoch + 1 == state.epoch,
            let signed = try? CommitSealing.open(
                sealed, commitKey: SymmetricKey(data: welcome.admissionCommitKey), groupID: welcome.groupID),
            let commit = try? VerifiedGroupCommit.verify(signed)
        else { return .failure(.notInTheLog("entry #\(welcome.snapshotSeq) is not a commit of this group")) }
        guard case .addMember(let add)? = commit.commit.action, commit.commit.groupID == welcome.groupID,
            let added = try? PublicIdentity(wire: add.member), added.hasSameKeys(as: identity.publicIdentity)
        else { return .failure(.notInTheLog("entry #\(welcome.snapshotSeq) does not add this member")) }
        guard let author = state.members[commit.author.inboxID], author.role >= .admin,
            author.identity.hasSameKeys(as: commit.author)
        else { return .failure(.notInTheLog("the admission was not made by an admin")) }
        guard
            CommitSealing.transcript(after: commit.commit.parentTranscript, commitBytes: commit.signedBytes)
                == state.transcript, commit.commit.parentTranscript == sealed.transcript
        else { return .failure(.notInTheLog("the snapshot is not the state the admission leads to")) }
        return .success(
            GroupRecord(
                groupID: welcome.groupID, topicID: welcome.topicID, state: state, status: .active,
                accessSecret: access.secretBytes, epochLink: welcome.epochLink, lastControlSeq: welcome.snapshotSeq))
    }

    /// Reads the one entry at `seq` of a topic. Refusals mean the welcome's
    /// key does not open this topic; failures to reach the relay throw.
    private func readEntry(
        _ topic: TopicName, seq: UInt64, access: TopicAccess
    ) async throws(RallyClientError) -> Result<WireEnvelope, WelcomeProblem> {
        let connection = try await connected()
        let events = await connection.subscribe(topic: topic, after: seq - 1, access: access)
        do {
            for try await event in events {
                await connection.unsubscribe(topic: topic)
                switch event {
                case .envelope(let envelope) where envelope.seq == seq: return .success(envelope)
                case .envelope, .caughtUp: return .failure(.notInTheLog("no entry #\(seq)"))
                }
            }
            return .failure(.notInTheLog("no entry #\(seq)"))
        } catch let error as RelayClientError {
            if case .refused = error, !error.isTransient {
                return .failure(.notInTheLog("the relay refused the welcome's key: \(error)"))
            }
            throw .relay(error)
        } catch {
            throw .relay(.disconnected("\(error)"))
        }
    }

    // MARK: Messages

    public func sendGroupText(_ text: String, to reference: String) async throws(RallyClientError) -> StoredMessage {
        let groupID = try group(reference).groupID
        _ = try await syncGroup(groupID)
        var record = try activeGroup(groupID)
        if record.state.needsRekey {
            try await rekey(groupID)
            record = try activeGroup(groupID)
        }
        guard let role = record.state.role(of: identity.inboxID), role.canSend else {
            throw .group(.mayNotSend(record.state.role(of: identity.inboxID) ?? .observer))
        }
        let epoch = record.state.epoch
        let key: SymmetricKey?
        do {
            key = try store.epochKey(group: groupID, epoch: epoch)
        } catch {
            throw .store(error)
        }
        guard let key else { throw .group(.missingEpochKey(epoch)) }
        let content: WireEncodedContent
        do {
            content = ContentCompression.compressedIfUseful(try TextCodec().encode(text))
        } catch {
            throw .content(error)
        }
        var body = WireMessageBody()
        body.messageID = MessageSealing.newMessageID()
        body.sender = identity.publicIdentity.wireBundle
        body.recipient = groupID
        body.sentAtMs = LocalStore.millis(Date())
        body.content = content
        var entry = WireGroupLogEntry()
        do {
            var ciphertext = try EpochKeys.encrypt(
                MessageSealing.sign(body, by: identity), key: key, groupID: groupID, epoch: epoch)
            ciphertext.transcript = record.state.transcript
            ciphertext.epochLink = record.epochLink
            entry.message = ciphertext
        } catch {
            throw .recipientKeysInvalid(identity.inboxID, reason: error.description)
        }
        _ = try await publishEntry(entry, to: record, key: body.messageID)
        // Reading our own message back from the log stores it at its
        // position, exactly as the other members see it.
        let report = try await syncGroup(groupID)
        if let mine = report.messages.first(where: { $0.id == body.messageID.hexString }) { return mine }
        if let stored = try? store.messages(conversation: groupID).last(where: { $0.id == body.messageID.hexString }) {
            return stored
        }
        throw .relay(.protocolViolation("sent group message did not come back from the log"))
    }

    // MARK: Sync

    /// Reads the group log from the stored cursor up to its head.
    @discardableResult
    public func syncGroup(_ reference: String) async throws(RallyClientError) -> GroupSyncReport {
        let collector = GroupSyncCollector()
        try await followGroup(reference, untilCaughtUp: true) { event in await collector.add(event) }
        return await collector.report
    }

    /// Streams a group's log: every entry is applied and persisted before
    /// `handler` sees it.
    public func followGroup(
        _ reference: String, untilCaughtUp: Bool, handler: @Sendable (GroupLogEvent) async -> Void
    ) async throws(RallyClientError) {
        let groupID = try group(reference).groupID
        let topic = try group(groupID).topic
        let processor = GroupLogProcessor(identity: identity, codecs: codecs)
        let store = self.store
        // The access key is read again on every (re)subscription: a commit
        // that rotated it ends the old key's subscription at that commit.
        do {
            try await followTopic(
                topic, untilCaughtUp: untilCaughtUp,
                access: { () throws(RallyClientError) -> TopicAccess? in
                    let record: GroupRecord?
                    do throws(LocalStoreError) {
                        record = try store.group(groupID)
                    } catch {
                        throw .store(error)
                    }
                    return record?.topicAccess
                }
            ) { envelope throws(RallyClientError) in
                let event = try await self.ingestGroupEnvelope(envelope, groupID: groupID, processor: processor)
                await handler(event)
            }
        } catch .relay(.accessRevoked(_, let lastReadable)) {
            // The relay ended this member's access. Removed or gone: as
            // expected. Still a member here: the change that ended it was
            // never shown to this device.
            let record = try group(groupID)
            guard record.status == .active else { return }
            let seq: UInt64
            do {
                seq = try store.cursor(for: record.topic)
            } catch {
                throw .store(error)
            }
            let reason =
                "the relay ended this device's access to the group at entry #\(lastReadable), but this device, which has read up to #\(seq), was shown no change there"
            do {
                try store.setDivergence(reason, group: groupID)
            } catch {
                throw .store(error)
            }
            logger.error("group \(groupID): \(reason)")
            await handler(.diverged(seq: seq, reason: reason))
        }
    }

    private func ingestGroupEnvelope(
        _ envelope: WireEnvelope, groupID: String, processor: GroupLogProcessor
    )
        throws(RallyClientError) -> GroupLogEvent
    {
        do {
            guard let record = try store.group(groupID) else { throw RallyClientError.group(.unknownGroup(groupID)) }
            let store = self.store
            // A store error stops here: the cursor stays before this entry
            // and the next sync reads it again. Nothing is skipped.
            let result = try processor.process(
                envelope, record: record, key: { epoch in try store.epochKey(group: groupID, epoch: epoch) },
                receivedAt: Date())
            var message: StoredMessage?
            var ownCommit: (commitID: Data, rejection: String?)?
            switch result.event {
            case .message(let received):
                message = received
            case .rejected(let seq, let reason):
                logger.warning("group \(groupID): dropped entry #\(seq): \(reason)")
            case .diverged(let seq, let reason):
                logger.error("group \(groupID): history diverged at entry #\(seq): \(reason)")
            case .commit(_, let commitID, let author, let outcome) where author == identity.inboxID:
                ownCommitOutcomes[commitID] = outcome
                switch outcome {
                case .applied, .duplicate: ownCommit = (commitID, nil)
                case .rejected(let rejection): ownCommit = (commitID, rejection.description)
                }
            case .commit:
                break
            }
            try store.ingestGroupEntry(
                result.record, seq: envelope.seq, epochKey: result.newKey, message: message,
                inviteSeed: result.inviteSeed, ownCommit: ownCommit,
                accessSecretChanged: result.record.accessSecret != record.accessSecret)
            return result.event
        } catch let error as RallyClientError {
            throw error
        } catch let error as LocalStoreError {
            throw .store(error)
        } catch {
            throw .store(.failed("\(error)"))
        }
    }

}

private actor GroupSyncCollector {
    var report = GroupSyncReport()
    func add(_ event: GroupLogEvent) { report.events.append(event) }
}
