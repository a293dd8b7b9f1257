import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// How a welcome relates to this client's joins (``JoinService`` judges).
enum WelcomeJoinMatch: Sendable {
    /// A plain welcome (an admin added this member): no join involved.
    case notAJoinAnswer
    /// It names an invite but answers no join of this client's.
    case unasked
    /// It answers a join under way: the join ends with it.
    case underWay(JoinEventForStore)
    /// It answers a join this client cancelled: the group is taken only to
    /// be left.
    case cancelled
}

/// Welcomes: what an admin sends a newcomer, and how a newcomer checks one
/// against the group's own log before it opens the group.
struct GroupWelcomes: Sendable {
    let context: ClientContext
    let log: GroupLog
    let messages: DirectMessageService
    /// The most a welcome's snapshot may take (``maxSnapshotBytes``):
    /// admissions past it are refused before their commit. Lowered in
    /// tests, to fill a group with a few members.
    var budget = Self.maxSnapshotBytes

    /// What a welcome for a member admitted through an invite carries.
    struct InviteProof {
        let tag: Data
        /// The invite identity's keys sign the proof; a moderator admitting
        /// from the approval queue holds none, and the joiner takes its
        /// welcome as one of the approvers the group named.
        let keys: InviteKeys?
        let requestID: Data
    }

    /// One newcomer of a welcome round, with the invite it came through.
    struct Newcomer: Sendable {
        let identity: PublicIdentity
        let invite: InviteProof?
    }

    /// Whether a welcome can carry the group as `state` has it, within
    /// this client's budget.
    func canCarry(_ state: GroupState) -> Bool { Self.canCarry(state, budget: budget) }

    /// What one admission can add to a snapshot besides its key bundle: the
    /// member or pending record's other fields and framing, the request id
    /// and a new invite's use count.
    static let admissionGrowthBound = 256
    /// What one commit adds: its id, and varints that grow by a byte.
    static let commitGrowthBound = 64

    /// Whether a welcome can carry the group once a commit of `added` lands
    /// on it, when its stored snapshot takes `storedBytes`. Most groups are
    /// far inside the budget, which a bound on the growth shows without
    /// building or encoding the state after; near it, `after` builds that
    /// state and ``canCarry(_:)`` decides (nil: the rules will refuse the
    /// commit anyway).
    func canCarry(
        _ added: WireAddMembers, growingFrom storedBytes: Int?, after: () -> GroupState?
    ) -> Bool {
        if let storedBytes {
            let bundles = (added.members.map(\.member) + added.pending.map(\.member)).reduce(0) {
                $0 + FrameCodec.encode($1).count + Self.admissionGrowthBound
            }
            if storedBytes + Self.commitGrowthBound + bundles <= budget { return true }
        }
        return after().map(canCarry) ?? true
    }

    /// Sends a newcomer its welcome: the state right after its admission
    /// commit, at that commit's seq, with the key that opens the commit, so
    /// the newcomer checks the welcome against the log itself. Without an
    /// admission (a joiner who is already a member), the welcome only ends
    /// that join; it opens no group.
    func send(
        to newcomer: PublicIdentity, groupID: String, admission: Data?, invite: InviteProof? = nil
    ) async throws(RallyClientError) {
        try await send(to: [Newcomer(identity: newcomer, invite: invite)], groupID: groupID, admission: admission)
    }

    /// One round of welcomes for everyone one commit admitted: the group's
    /// part is read once, each newcomer's part added, and all of them are
    /// queued in one transaction and sent by one flush. Each is sealed to
    /// the keys the commit admitted.
    func send(to newcomers: [Newcomer], groupID: String, admission: Data?) async throws(RallyClientError) {
        guard !newcomers.isEmpty else { return }
        let record = try log.group(groupID)
        let store = context.store
        var common = WireGroupWelcome()
        common.groupID = groupID
        common.topicID = record.topicID
        var seed: Data?
        try context.stored { () throws(LocalStoreError) in
            guard let admission, let own = try store.ownCommit(admission), own.rejection == nil,
                own.snapshot.epoch > 0,
                let before = try store.epochKey(group: groupID, epoch: own.snapshot.epoch - 1),
                let after = try store.epochKey(group: groupID, epoch: own.snapshot.epoch)
            else { return }
            common.snapshotSeq = own.seq
            common.snapshot = own.encodedSnapshot
            common.epochKey = after.withUnsafeBytes { Data($0) }
            common.admissionCommitKey = CommitSealing.commitKey(epochKey: before).withUnsafeBytes { Data($0) }
            common.epochLink = CommitSealing.epochLink(
                previousEpochKey: before, groupID: groupID, epoch: own.snapshot.epoch,
                transcript: own.snapshot.transcript)
            common.topicAccessSecret = record.accessSecret ?? Data()
            // With history visible to new members, the recent messages come
            // along (as this member stored them); hidden, the newcomer gets
            // no key and no copy of anything before its admission.
            if record.state.preferences[.history].enabled {
                // Within what is left of the welcome's envelope (a large
                // group's snapshot and image come first).
                let room = WireLimits.maxPayloadBytes - FrameCodec.encode(common).count - Self.sealingAllowance
                common.history = Self.recentHistory(
                    try store.messages(conversation: groupID), maxBytes: min(Self.maxHistoryBytes, room))
            }
            seed = try store.inviteSeed(group: groupID)?.withUnsafeBytes { Data($0) }
        }
        let welcomes = newcomers.map { newcomer in
            var welcome = common
            // A new admin gets the invite seed, so it can answer join requests.
            if let seed, let role = record.state.role(of: newcomer.identity.inboxID), role >= .admin {
                welcome.inviteSeed = seed
            }
            if let invite = newcomer.invite {
                welcome.inviteTag = invite.tag.hexString
                welcome.joinRequestID = invite.requestID
                if let keys = invite.keys {
                    welcome.inviteProof = keys.welcomeProof(
                        tag: invite.tag, groupID: groupID, newcomer: newcomer.identity.inboxID,
                        requestID: invite.requestID)
                }
            }
            return (value: welcome, recipient: newcomer.identity, messageID: Data?.none)
        }
        _ = try await messages.send(welcomes, codec: GroupWelcomeCodec(), keepCopy: true)
    }

    /// Most messages, and bytes, a welcome shares with a newcomer.
    static let maxHistoryMessages = 100
    static let maxHistoryBytes = 64 * 1024
    /// What sealing and framing add to a welcome, kept free of history.
    static let sealingAllowance = 16 * 1024
    /// The most a welcome's snapshot may take: its envelope less what the
    /// rest of the welcome and its sealing need (history only fills what
    /// is left).
    static let maxSnapshotBytes = WireLimits.maxPayloadBytes - sealingAllowance

    /// Whether a welcome can carry the group as `state` has it: the
    /// snapshot's encoding fits, or, past `budget`, that encoding
    /// compressed as the welcome's content will be. An admission that fails
    /// this is refused before its commit, since a member admitted without
    /// a welcome could never open the group.
    static func canCarry(_ state: GroupState, budget: Int) -> Bool {
        let encoded = FrameCodec.encode(state.snapshot)
        return encoded.count <= budget || Deflate.compress(encoded).count <= budget
    }

    /// The newest stored messages that fit in `maxBytes`, oldest first.
    static func recentHistory(_ messages: [StoredMessage], maxBytes: Int) -> [WireSharedHistoryMessage] {
        var shared: [WireSharedHistoryMessage] = []
        var bytes = 0
        for message in messages.reversed() where message.seq != nil {
            let size = message.encodedContent.count + message.senderName.utf8.count + 128
            guard shared.count < maxHistoryMessages, bytes + size <= maxBytes else {
                break
            }
            var entry = WireSharedHistoryMessage()
            entry.messageID = message.id
            entry.sender = message.sender.rawValue
            entry.senderName = message.senderName
            entry.sentAtMs = ClientClock.millis(message.sentAt)
            entry.content = message.encodedContent
            bytes += size
            shared.append(entry)
        }
        return shared.reversed()
    }

    /// The history a welcome shares, as messages of the group (at most the
    /// limits above; anything malformed is left out).
    func history(of welcome: WireGroupWelcome, topic: TopicName, now: Date) -> [StoredMessage] {
        welcome.history.prefix(Self.maxHistoryMessages).compactMap { entry -> StoredMessage? in
            guard let sender = try? InboxID(validating: entry.sender), entry.messageID.count == 32,
                entry.content.count <= Self.maxHistoryBytes,
                let content = try? WireEncodedContent(serializedBytes: entry.content)
            else { return nil }
            let decoded = context.codecs.decode(content)
            return StoredMessage(
                id: entry.messageID, conversation: welcome.groupID, outgoing: sender == context.identity.inboxID,
                sender: sender, senderName: entry.senderName, sentAt: Date(milliseconds: entry.sentAtMs),
                receivedAt: now, topic: topic.rawValue, seq: nil, contentType: decoded.contentType.description,
                encodedContent: entry.content, displayText: decoded.displayText, isKnownType: decoded.isKnown)
        }
    }

    /// What taking a welcome did.
    struct Taken: Sendable {
        /// Whether the welcome message was new to this home.
        var isNew: Bool
        /// A group opened only to be left (a join cancelled before its
        /// answer came).
        var leave: String?
    }

    /// Checks a welcome and, if it is sound, stores the group with the
    /// message, in one transaction. A welcome that fails the checks is kept
    /// as a message but opens no group, and hides no later welcome. Only a
    /// failure to reach the relay throws: the welcome is read again on the
    /// next sync.
    func take(
        _ welcome: WireGroupWelcome, message: StoredMessage, topic: TopicName, seq: UInt64, join: WelcomeJoinMatch
    ) async throws(RallyClientError) -> Taken {
        let store = context.store
        func keepAsMessage(_ joinEvent: JoinEventForStore? = nil) throws(RallyClientError) -> Taken {
            Taken(
                isNew: try context.stored { () throws(LocalStoreError) in
                    try store.ingest(
                        topic: topic, seq: seq, message: message, joinEvent: joinEvent, now: context.clock.now())
                })
        }
        var joinEvent: JoinEventForStore?
        var leaveAfterwards = false
        switch join {
        case .notAJoinAnswer:
            break
        case .unasked:
            context.logger.warning("ignoring a welcome from \(message.sender) for a join this client did not ask for")
            return try keepAsMessage()
        case .cancelled:
            leaveAfterwards = true
        case .underWay(let event):
            joinEvent = event
        }
        if (try? store.group(welcome.groupID)) != nil {
            return try keepAsMessage(
                joinEvent.map { JoinEventForStore(tag: $0.tag, event: .alreadyMember(groupID: welcome.groupID)) })
        }
        let record: GroupRecord
        switch try await verify(welcome) {
        case .failure(let reason):
            context.logger.warning("ignoring group welcome from \(message.sender): \(reason)")
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
        let now = context.clock.now()
        let history = history(of: welcome, topic: record.topic, now: now)
        let isNew = try context.stored { () throws(LocalStoreError) in
            // The state was decoded from the welcome's snapshot: stored as
            // received, without building it again.
            try store.ingestWelcome(
                record, snapshot: welcome.snapshot,
                epochKey: (record.state.epoch, SymmetricKey(data: welcome.epochKey)),
                groupCursor: welcome.snapshotSeq, inboxTopic: topic, inboxSeq: seq, message: message,
                inviteSeed: inviteSeed, joinEvent: joinEvent, history: history, now: now)
        }
        return Taken(isNew: isNew, leave: leaveAfterwards ? record.groupID : nil)
    }

    enum Problem: Error, CustomStringConvertible {
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
    private func verify(_ welcome: WireGroupWelcome) async throws(RallyClientError) -> Result<GroupRecord, Problem> {
        let identity = context.identity
        guard (try? TopicName.group(welcome.topicID)) != nil,
            welcome.groupID == GroupRecord.groupID(forTopicID: welcome.topicID)
        else { return .failure(.malformed("the group id does not name its topic")) }
        guard welcome.epochKey.count == EpochKeys.keyByteCount,
            welcome.admissionCommitKey.count == EpochKeys.keyByteCount, welcome.snapshotSeq > 0,
            let access = try? TopicAccess(secret: SymmetricKey(data: welcome.topicAccessSecret))
        else { return .failure(.malformed("keys")) }
        let state: GroupState
        do {
            state = try GroupState(
                snapshot: FrameCodec.decodeGroupSnapshot(welcome.snapshot, limit: WireLimits.maxPayloadBytes))
        } catch {
            return .failure(.malformed("snapshot"))
        }
        guard state.groupID == welcome.groupID else {
            return .failure(.malformed("the group id does not name its topic"))
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
        // An admin adds; a moderator (or above) admits from the approval
        // queue, where the joiner's keys were recorded by an admin's commit.
        let needed: GroupRole
        switch commit.commit.action {
        case .addMember(let add)? where Self.adds(add, identity.publicIdentity):
            needed = .admin
        case .addMembers(let batch)? where batch.members.contains(where: { Self.adds($0, identity.publicIdentity) }):
            needed = .admin
        case .admitPending(let admit)? where admit.inboxID == identity.inboxID.rawValue:
            needed = .moderator
        default:
            return .failure(.notInTheLog("entry #\(welcome.snapshotSeq) does not add this member"))
        }
        guard commit.commit.groupID == welcome.groupID else {
            return .failure(.notInTheLog("entry #\(welcome.snapshotSeq) is another group's"))
        }
        guard let author = state.members[commit.author.inboxID], author.role >= needed,
            author.identity.hasSameKeys(as: commit.author)
        else { return .failure(.notInTheLog("the admission was not made by an \(needed) or above")) }
        guard
            CommitSealing.transcript(after: commit.commit.parentTranscript, commitBytes: commit.signedBytes)
                == state.transcript, commit.commit.parentTranscript == sealed.transcript
        else { return .failure(.notInTheLog("the snapshot is not the state the admission leads to")) }
        return .success(
            GroupRecord(
                groupID: welcome.groupID, topicID: welcome.topicID, state: state, status: .active,
                accessSecret: access.secretBytes, epochLink: welcome.epochLink, lastControlSeq: welcome.snapshotSeq))
    }

    private static func adds(_ add: WireAddMember, _ joiner: PublicIdentity) -> Bool {
        (try? PublicIdentity(wire: add.member))?.hasSameKeys(as: joiner) ?? false
    }

    /// Reads the one entry at `seq` of a topic. Refusals mean the welcome's
    /// key does not open this topic; failures to reach the relay throw.
    private func readEntry(
        _ topic: TopicName, seq: UInt64, access: TopicAccess
    ) async throws(RallyClientError) -> Result<WireEnvelope, Problem> {
        let link: any RelayLink
        do {
            link = try await context.links.connected()
        } catch {
            throw .relay(error)
        }
        let events = await link.subscribe(topic: topic, after: seq - 1, access: access)
        do {
            for try await event in events {
                await link.unsubscribe(topic: topic)
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
}
