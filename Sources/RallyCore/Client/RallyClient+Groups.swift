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
    public func createGroup(name: String, description: String = "") async throws(RallyClientError) -> GroupRecord {
        let groupID = Self.randomHex(16)
        let topicID = Self.randomHex(32)
        let record = GroupRecord(
            groupID: groupID, topicID: topicID, state: GroupState(groupID: groupID), status: .creating)
        var commit = newCommit(groupID: groupID, epoch: 0)
        commit.create.profile.name = name
        commit.create.profile.description_p = description
        do {
            try store.saveNewGroup(record, epochKey: (1, EpochKeys.newKey()), cursor: 0)
        } catch {
            throw .store(error)
        }
        try await publish(commit, to: record)
        let report = try await syncGroup(groupID)
        try requireApplied(commit.commitID, in: report)
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
        try await commitWithRetries(groupID) { state throws(RallyClientError) in
            if state.members[inbox] != nil { throw .group(.commitRejected(.alreadyMember(inbox))) }
            var commit = self.newCommit(groupID: groupID, epoch: state.epoch)
            commit.addMember.member = newcomer.wireBundle
            commit.addMember.role = role.wire
            return commit
        }
        try await sendWelcome(to: newcomer, groupID: groupID)
        return try group(groupID)
    }

    /// Removes a member; with `ban`, later join requests from them are
    /// refused too.
    public func removeMember(
        _ inbox: InboxID, from reference: String, ban: Bool = false
    ) async throws(RallyClientError) -> GroupRecord {
        let groupID = try group(reference).groupID
        try await commitWithRetries(groupID) { state throws(RallyClientError) in
            guard state.members[inbox] != nil else { throw .group(.commitRejected(.notAMemberTarget(inbox))) }
            var commit = self.newCommit(groupID: groupID, epoch: state.epoch)
            commit.removeMember.inboxID = inbox.rawValue
            commit.removeMember.ban = ban
            try self.attachFreshKey(to: &commit, for: state.members.values.filter { $0.inboxID != inbox }, state: state)
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
            var commit = self.newCommit(groupID: groupID, epoch: state.epoch)
            commit.changeRole.inboxID = inbox.rawValue
            commit.changeRole.role = role.wire
            // A new admin gets the invite seed, so it answers join requests.
            if role >= .admin, let seed, state.inviteIdentity != nil,
                let target = state.members[inbox], (state.role(of: inbox) ?? .observer) < .admin
            {
                let sealed = try self.sealInviteSeed(seed, to: [target.identity], state: state)
                commit.changeRole.inviteSeed = sealed[0]
            }
            return commit
        }
        return try group(groupID)
    }

    /// Replaces the epoch key (after someone left, or on an admin's wish).
    public func rekey(_ reference: String) async throws(RallyClientError) {
        let groupID = try group(reference).groupID
        try await commitWithRetries(groupID) { state throws(RallyClientError) in
            var commit = self.newCommit(groupID: groupID, epoch: state.epoch)
            commit.rekey = WireRekey()
            try self.attachFreshKey(to: &commit, for: Array(state.members.values), state: state)
            return commit
        }
    }

    /// Builds a commit on the latest state, publishes it, reads the log
    /// back and, if another commit won the race for that epoch, rebuilds
    /// it on the new state. Any other rejection is final. A build that
    /// returns nil says the intent no longer applies to the new state:
    /// nothing is published and the result is false.
    @discardableResult
    func commitWithRetries(
        _ groupID: String, build: (GroupState) throws(RallyClientError) -> WireGroupCommit?
    ) async throws(RallyClientError) -> Bool {
        for attempt in 1...Self.commitAttempts {
            _ = try await syncGroup(groupID)
            let record = try activeGroup(groupID)
            guard let commit = try build(record.state) else { return false }
            if let hook = commitRaceHook { await hook(attempt) }
            try await publish(commit, to: record)
            let report = try await syncGroup(groupID)
            do {
                try requireApplied(commit.commitID, in: report)
                return true
            } catch .group(.commitRejected(.staleEpoch)) {
                continue
            }
        }
        throw .group(.gaveUp(attempts: Self.commitAttempts))
    }

    private func requireApplied(_ commitID: Data, in report: GroupSyncReport) throws(RallyClientError) {
        var outcome = ownCommitOutcomes.removeValue(forKey: commitID)
        for event in report.events {
            guard case .commit(_, let id, _, let seen) = event, id == commitID else { continue }
            outcome = seen
        }
        switch outcome {
        case .applied?, .duplicate?: return
        case .rejected(let rejection)?: throw .group(.commitRejected(rejection))
        case nil: throw .relay(.protocolViolation("published commit did not come back from the group log"))
        }
    }

    private func activeGroup(_ groupID: String) throws(RallyClientError) -> GroupRecord {
        let record = try group(groupID)
        guard record.status == .active else {
            throw .group(.notActive("\"\(record.state.profile.name)\" (\(groupID))", record.status))
        }
        return record
    }

    nonisolated func newCommit(groupID: String, epoch: UInt64) -> WireGroupCommit {
        var commit = WireGroupCommit()
        commit.groupID = groupID
        commit.epoch = epoch
        commit.commitID = MessageSealing.newMessageID()
        commit.author = identity.publicIdentity.wireBundle
        commit.createdAtMs = LocalStore.millis(Date())
        return commit
    }

    /// For tests that build conflicting commits by hand.
    func attachFreshKeyForTest(
        to commit: inout WireGroupCommit, for members: [GroupMember], state: GroupState
    )
        throws(RallyClientError)
    {
        try attachFreshKey(to: &commit, for: members, state: state)
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

    private func publish(_ commit: WireGroupCommit, to record: GroupRecord) async throws(RallyClientError) {
        var entry = WireGroupLogEntry()
        entry.commit = VerifiedGroupCommit.sign(commit, by: identity)
        try await publishEntry(entry, to: record, key: commit.commitID)
    }

    private func publishEntry(
        _ entry: WireGroupLogEntry, to record: GroupRecord, key: Data
    ) async throws(RallyClientError) {
        let payload = FrameCodec.encode(entry)
        guard payload.count <= WireLimits.maxPayloadBytes else {
            throw .messageTooLarge(size: payload.count, limit: WireLimits.maxPayloadBytes)
        }
        let topic = record.topic
        _ = try await withRetries("group publish") { connection throws(RelayClientError) in
            try await connection.publish(topic: topic, payload: payload, idempotencyKey: key, shouldPush: true)
        }
    }

    // MARK: Welcome

    /// What a welcome for a member admitted through an invite carries.
    struct InviteWelcome {
        let tag: Data
        let keys: InviteKeys
    }

    func sendWelcome(
        to newcomer: PublicIdentity, groupID: String, invite: InviteWelcome? = nil
    ) async throws(RallyClientError) {
        let record = try group(groupID)
        let cursor: UInt64
        let key: SymmetricKey?
        let seed: SymmetricKey?
        do {
            cursor = try store.cursor(for: record.topic)
            key = try store.epochKey(group: groupID, epoch: record.state.epoch)
            seed = try store.inviteSeed(group: groupID)
        } catch {
            throw .store(error)
        }
        guard let key else { throw .group(.missingEpochKey(record.state.epoch)) }
        var welcome = WireGroupWelcome()
        welcome.groupID = groupID
        welcome.topicID = record.topicID
        welcome.snapshotSeq = cursor
        welcome.snapshot = record.state.snapshot
        welcome.epochKey = key.withUnsafeBytes { Data($0) }
        if let invite {
            welcome.inviteTag = invite.tag.hexString
            welcome.inviteProof = invite.keys.welcomeProof(
                tag: invite.tag, groupID: groupID, newcomer: newcomer.inboxID)
        }
        // A new admin gets the invite seed, so it can answer join requests.
        if let seed, let role = record.state.role(of: newcomer.inboxID), role >= .admin {
            welcome.inviteSeed = seed.withUnsafeBytes { Data($0) }
        }
        _ = try await send(welcome, codec: GroupWelcomeCodec(), to: newcomer.inboxID)
    }

    /// Checks a welcome and, if it is sound, stores the group with the
    /// message, in one transaction. A welcome that fails the checks is kept
    /// as a message but opens no group. A welcome that answers a join
    /// request (it names an invite tag) must carry the invite identity's
    /// proof for one of this client's pending joins; then it also finishes
    /// that join.
    func acceptWelcome(
        _ welcome: WireGroupWelcome, message: StoredMessage, topic: TopicName, seq: UInt64
    )
        throws(LocalStoreError) -> Bool
    {
        var joinEvent: JoinEventForStore?
        var leaveAfterwards = false
        if !welcome.inviteTag.isEmpty {
            switch joinAnswered(by: welcome) {
            case nil:
                logger.warning("ignoring a welcome from \(message.sender) for a join this client did not ask for")
                return try store.ingest(topic: topic, seq: seq, message: message)
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
        switch validate(welcome, from: message.sender) {
        case .failure(.alreadyJoined):
            let existing = joinEvent.map {
                JoinEventForStore(tag: $0.tag, event: .alreadyMember(groupID: welcome.groupID))
            }
            return try store.ingest(topic: topic, seq: seq, message: message, joinEvent: existing)
        case .failure(let reason):
            logger.warning("ignoring group welcome from \(message.sender): \(reason)")
            return try store.ingest(topic: topic, seq: seq, message: message)
        case .success(let record):
            var inviteSeed: SymmetricKey?
            if !welcome.inviteSeed.isEmpty, let keys = try? InviteKeys(seed: SymmetricKey(data: welcome.inviteSeed)),
                let named = record.state.inviteIdentity, keys.identity.publicIdentity.hasSameKeys(as: named)
            {
                inviteSeed = keys.seed
            }
            let stored = try store.ingestWelcome(
                record, epochKey: (record.state.epoch, SymmetricKey(data: welcome.epochKey)),
                groupCursor: welcome.snapshotSeq, inboxTopic: topic, inboxSeq: seq, message: message,
                inviteSeed: inviteSeed, joinEvent: joinEvent)
            if leaveAfterwards { groupsToLeave.insert(record.groupID) }
            return stored
        }
    }

    enum JoinAnswerMatch {
        case underWay, cancelled
    }

    /// Whether a welcome naming an invite tag answers one of this client's
    /// unfinished joins: signed by that invite's identity (which only the
    /// group's admins hold) for this group and this member.
    private func joinAnswered(by welcome: WireGroupWelcome) -> JoinAnswerMatch? {
        guard let tag = Data(hexString: welcome.inviteTag),
            let attempts = try? store.joinAttempts()
        else { return nil }
        for attempt in attempts where attempt.invite.tag == welcome.inviteTag {
            guard attempt.phase != .joined, attempt.phase != .failed,
                let inviteIdentity = try? store.contact(attempt.invite.inviterInbox),
                InviteKeys.isValidWelcomeProof(
                    welcome.inviteProof, by: inviteIdentity, tag: tag, groupID: welcome.groupID,
                    newcomer: identity.inboxID)
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
            var commit = self.newCommit(groupID: groupID, epoch: state.epoch)
            commit.leave = WireLeaveGroup()
            return commit
        }
    }

    private func validate(_ welcome: WireGroupWelcome, from sender: InboxID) -> Result<GroupRecord, WelcomeProblem> {
        guard welcome.groupID == welcome.snapshot.groupID, welcome.groupID.count == 32,
            welcome.topicID.count == 64, (try? TopicName.group(welcome.topicID)) != nil
        else { return .failure(.malformed) }
        guard welcome.epochKey.count == EpochKeys.keyByteCount else { return .failure(.malformed) }
        let state: GroupState
        do {
            state = try GroupState(snapshot: welcome.snapshot)
        } catch {
            return .failure(.malformed)
        }
        guard let adder = state.members[sender], adder.role >= .admin else { return .failure(.senderCannotAdd) }
        guard state.members[identity.inboxID] != nil else { return .failure(.notIncluded) }
        if (try? store.group(welcome.groupID)) != nil { return .failure(.alreadyJoined) }
        return .success(GroupRecord(groupID: welcome.groupID, topicID: welcome.topicID, state: state, status: .active))
    }

    enum WelcomeProblem: Error {
        case malformed, senderCannotAdd, notIncluded, alreadyJoined
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
            entry.message = try EpochKeys.encrypt(
                MessageSealing.sign(body, by: identity), key: key, groupID: groupID, epoch: epoch)
        } catch {
            throw .recipientKeysInvalid(identity.inboxID, reason: error.description)
        }
        try await publishEntry(entry, to: record, key: body.messageID)
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
        try await followTopic(topic, untilCaughtUp: untilCaughtUp) { envelope throws(RallyClientError) in
            let event = try await self.ingestGroupEnvelope(envelope, groupID: groupID, processor: processor)
            await handler(event)
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
            let result = processor.process(
                envelope, record: record, key: { epoch in try? store.epochKey(group: groupID, epoch: epoch) },
                receivedAt: Date())
            var message: StoredMessage?
            if case .message(let received) = result.event { message = received }
            if case .rejected(let seq, let reason) = result.event {
                logger.warning("group \(groupID): dropped entry #\(seq): \(reason)")
            }
            if case .commit(_, let commitID, let author, let outcome) = result.event, author == identity.inboxID {
                ownCommitOutcomes[commitID] = outcome
            }
            try store.ingestGroupEntry(
                result.record, seq: envelope.seq, epochKey: result.newKey, message: message,
                inviteSeed: result.inviteSeed)
            return result.event
        } catch let error as RallyClientError {
            throw error
        } catch let error as LocalStoreError {
            throw .store(error)
        } catch {
            throw .store(.failed("\(error)"))
        }
    }

    static func randomHex(_ bytes: Int) -> String { randomBytes(bytes).hexString }
}

private actor GroupSyncCollector {
    var report = GroupSyncReport()
    func add(_ event: GroupLogEvent) { report.events.append(event) }
}
