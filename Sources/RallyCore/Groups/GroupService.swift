import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// Groups as their members use them: create, change membership and roles,
/// replace the key, leave, end, send and read.
struct GroupService: Sendable {
    let context: ClientContext
    let log: GroupLog
    let committer: GroupCommitter
    var welcomes: GroupWelcomes
    let keys: KeyDirectory

    // MARK: Create

    /// Creates a group with this identity as its owner. Its first epoch key
    /// yields the topic's access key, the topic id names that key (nobody
    /// can claim the topic first) and the group id names the topic (a
    /// welcome cannot pass another topic off as this group).
    func create(_ profile: GroupProfile) async throws(RallyClientError) -> GroupRecord {
        let firstKey = EpochKeys.newKey()
        let access: TopicAccess
        do {
            access = try TopicAccess(secret: TopicAccess.secret(fromEpochKey: firstKey))
        } catch {
            throw .recipientKeysInvalid(context.identity.inboxID, reason: error.description)
        }
        let topicID = access.foundedTopicID
        let groupID = GroupRecord.groupID(forTopicID: topicID)
        let record = GroupRecord(
            groupID: groupID, topicID: topicID, state: GroupState(groupID: groupID), status: .creating,
            accessSecret: access.secretBytes)
        var commit = committer.newCommit(on: record.state)
        if let problem = GroupRules.profileProblem(profile) { throw .group(.commitRejected(.invalidProfile(problem))) }
        commit.create.profile = profile.wire
        let now = context.clock.now()
        try context.stored { () throws(LocalStoreError) in
            try context.store.saveNewGroup(record, epochKey: (0, firstKey), cursor: 0, now: now)
        }
        _ = try await committer.publish(commit, to: record)
        try await log.sync(groupID)
        try await committer.requireApplied(commit.commitID)
        return try log.group(groupID)
    }

    // MARK: Membership

    func addMember(
        _ inbox: InboxID, role: GroupRole, to reference: String
    ) async throws(RallyClientError)
        -> GroupRecord
    {
        let newcomer = try await keys.lookUp(inbox)
        let groupID = try log.group(reference).groupID
        let committer = self.committer
        let welcomes = self.welcomes
        let store = context.store
        let author = context.identity.publicIdentity
        let admission = try await committer.commit(groupID) { state throws(RallyClientError) in
            if state.members[inbox] != nil { throw .group(.commitRejected(.alreadyMember(inbox))) }
            var commit = committer.newCommit(on: state)
            commit.addMember.member = newcomer.wireBundle
            commit.addMember.role = role.wire
            // Refused here, before the commit, rather than admitted without
            // a welcome; the rules' own refusals come from the committer.
            var added = WireAddMembers()
            added.members = [commit.addMember]
            let fits = welcomes.canCarry(added, growingFrom: try? store.snapshotByteCount(groupID)) {
                let actor = state.role(of: author.inboxID) ?? .observer
                guard
                    case .success(let (mutation, _)) = GroupRules.checkAdd(
                        commit.addMember, actor: actor, author: author, against: state)
                else { return nil }
                var after = state
                after.mutate(mutation, author: author)
                return after
            }
            guard fits else { throw .group(.full(groupID)) }
            return commit
        }
        if let admission { try await welcomes.send(to: newcomer, groupID: groupID, admission: admission) }
        return try log.group(groupID)
    }

    /// Removes members in one commit: one fresh key for those who remain;
    /// with `withMessages` every member's client deletes their messages.
    /// Someone only invited has their invitation withdrawn instead.
    func removeMembers(
        _ inboxes: [InboxID], from reference: String, ban: Bool, withMessages: Bool
    ) async throws(RallyClientError) -> GroupRecord {
        let groupID = try log.group(reference).groupID
        let committer = self.committer
        try await log.sync(groupID)
        let known = try log.group(groupID).state
        let invitees = Set(inboxes.filter { known.invited[$0] != nil && known.members[$0] == nil })
        for inbox in inboxes where invitees.contains(inbox) {
            try await committer.withdrawInvitation(of: inbox, in: groupID)
        }
        let inboxes = inboxes.filter { !invitees.contains($0) }
        guard !inboxes.isEmpty else { return try log.group(groupID) }
        try await committer.commit(groupID) { state throws(RallyClientError) in
            let targets = try Self.members(inboxes, in: state)
            let removed = Set(targets.map(\.inboxID))
            var commit = committer.newCommit(on: state)
            commit.removeMembers.inboxIds = inboxes.map(\.rawValue)
            commit.removeMembers.ban = ban
            commit.removeMembers.withMessages = withMessages
            try committer.attachFreshKey(
                to: &commit, for: state.members.values.filter { !removed.contains($0.inboxID) }, state: state)
            if targets.contains(where: { $0.role >= .admin }) {
                try committer.attachInviteRotation(to: &commit, state: state, admins: state.admins.subtracting(removed))
            }
            return commit
        }
        return try log.group(groupID)
    }

    /// Gives members one role in one commit. Members promoted to admin get
    /// the invite seed; a demoted admin keeps the old one, so the invites
    /// move on.
    func changeRoles(
        of inboxes: [InboxID], to role: GroupRole, in reference: String
    ) async throws(RallyClientError) -> GroupRecord {
        let groupID = try log.group(reference).groupID
        let seed = try context.stored { () throws(LocalStoreError) in try context.store.inviteSeed(group: groupID) }
        let committer = self.committer
        try await committer.commit(groupID) { state throws(RallyClientError) in
            let targets = try Self.members(inboxes, in: state)
            var commit = committer.newCommit(on: state)
            commit.changeRoles.inboxIds = inboxes.map(\.rawValue)
            commit.changeRoles.role = role.wire
            let promoted = targets.filter { $0.role < .admin }
            if role >= .admin, let seed, state.inviteIdentity != nil, !promoted.isEmpty {
                commit.changeRoles.inviteSeeds = try committer.sealInviteSeed(
                    seed, to: promoted.map(\.identity), state: state)
            }
            let demoted = Set(targets.filter { $0.role >= .admin }.map(\.inboxID))
            if role < .admin, !demoted.isEmpty {
                try committer.attachInviteRotation(to: &commit, state: state, admins: state.admins.subtracting(demoted))
            }
            return commit
        }
        return try log.group(groupID)
    }

    /// Hides (or shows again) members' messages for every member.
    func block(_ inboxes: [InboxID], in reference: String, blocked: Bool) async throws(RallyClientError) {
        try await commit(reference) { commit, state throws(RallyClientError) in
            _ = try Self.members(inboxes, in: state)
            commit.blockMembers.inboxIds = inboxes.map(\.rawValue)
            commit.blockMembers.blocked = blocked
        }
    }

    /// Sets the owner's welcome message (empty: none).
    func setWelcome(_ text: String, in reference: String) async throws(RallyClientError) {
        try await commit(reference) { commit, _ in commit.setWelcome.text = text }
    }

    /// Changes the group's profile (owner).
    func updateProfile(
        in reference: String, _ change: (inout GroupProfile) -> Void
    ) async throws(RallyClientError) -> GroupRecord {
        let groupID = try log.group(reference).groupID
        try await commit(reference) { commit, state throws(RallyClientError) in
            var profile = state.profile
            change(&profile)
            if let problem = GroupRules.profileProblem(profile) {
                throw .group(.commitRejected(.invalidProfile(problem)))
            }
            commit.updateProfile.profile = profile.wire
        }
        return try log.group(groupID)
    }

    /// The members `inboxes` name, refused at once (nothing published) for
    /// an inbox that is no member.
    private static func members(_ inboxes: [InboxID], in state: GroupState) throws(RallyClientError) -> [GroupMember] {
        guard !inboxes.isEmpty else { throw .group(.commitRejected(.invalidTarget("name at least one member"))) }
        var found: [GroupMember] = []
        for inbox in inboxes {
            guard let member = state.members[inbox] else { throw .group(.commitRejected(.notAMemberTarget(inbox))) }
            found.append(member)
        }
        return found
    }

    /// Replaces the epoch key (after someone left, or on an admin's wish).
    func rekey(_ reference: String) async throws(RallyClientError) {
        let committer = self.committer
        try await commit(reference) { commit, state throws(RallyClientError) in
            commit.rekey = WireRekey()
            try committer.attachFreshKey(to: &commit, for: Array(state.members.values), state: state)
        }
    }

    /// Leaves a group. The remaining members replace the key before anyone
    /// sends again.
    func leave(_ reference: String) async throws(RallyClientError) {
        try await commit(reference) { commit, _ in commit.leave = WireLeaveGroup() }
    }

    /// Ends a group for good (owner only). Later join requests are
    /// answered `conversation_expired`.
    func explode(_ reference: String) async throws(RallyClientError) {
        try await commit(reference) { commit, _ in commit.explode = WireExplodeGroup() }
    }

    /// Deletes the group (owner): a commit every member applies (each drops
    /// the group's messages and keys), then the relay deletes the topic,
    /// proven by its current access key, and keeps only a tombstone that
    /// tells members who were away. Running it again after the commit
    /// landed retries the relay's part.
    func delete(_ reference: String) async throws(RallyClientError) {
        let groupID = try log.group(reference).groupID
        if try log.group(groupID).status != .deleted {
            try await commit(groupID) { commit, _ in commit.deleteGroup = WireDeleteGroup() }
        }
        let record = try log.group(groupID)
        guard let access = record.topicAccess else {
            throw .group(.noTopicAccess("\"\(record.state.profile.name)\" (\(groupID))"))
        }
        try await HTTPRelayLink.using(context.relayURL, identity: context.identity) { link throws(RallyClientError) in
            do throws(RelayClientError) {
                try await link.deleteTopic(record.topic, access: access)
            } catch {
                throw .relay(error)
            }
        }
    }

    /// Commits one action, drafted on the latest state by `fill`.
    private func commit(
        _ reference: String, _ fill: (inout WireGroupCommit, GroupState) throws(RallyClientError) -> Void
    ) async throws(RallyClientError) {
        let groupID = try log.group(reference).groupID
        let committer = self.committer
        try await committer.commit(groupID) { state throws(RallyClientError) in
            var commit = committer.newCommit(on: state)
            try fill(&commit, state)
            return commit
        }
    }

    /// Removes a group from this device only.
    func forget(_ reference: String) throws(RallyClientError) {
        let groupID = try log.group(reference).groupID
        try context.stored { () throws(LocalStoreError) in try context.store.forgetGroup(groupID) }
    }

    // MARK: Messages

    func sendText(_ text: String, to reference: String) async throws(RallyClientError) -> StoredMessage {
        let content: WireEncodedContent
        do {
            content = ContentCompression.compressedIfUseful(try TextCodec().encode(text))
        } catch {
            throw .content(error)
        }
        return try await send(content, to: reference)
    }

    /// Reacts to a message of the group, if the group's preferences let
    /// this member (else every member would reject it).
    func sendReaction(
        _ emoji: String, to messageID: String, in reference: String
    ) async throws(RallyClientError)
        -> StoredMessage
    {
        let content: WireEncodedContent
        do {
            content = try ReactionCodec().encode(Reaction(messageID: messageID, emoji: emoji))
        } catch {
            throw .content(error)
        }
        return try await send(content, to: reference)
    }

    /// Changes preferences (owner): each key given replaces that key.
    func setPreferences(
        _ changes: [String: GroupPreference], in reference: String
    ) async throws(RallyClientError) -> GroupRecord {
        let groupID = try log.group(reference).groupID
        try await commit(groupID) { commit, _ in
            commit.setPreferences.preferences = changes.sorted { $0.key < $1.key }.map(GroupPreferences.wire)
        }
        return try log.group(groupID)
    }

    /// Sends any content. `enforcingPreferences: false` is what a client
    /// that ignores the group's preferences (older, or hostile) would do:
    /// tests use it to show every member rejects what it sends.
    func send(
        _ content: WireEncodedContent, to reference: String, enforcingPreferences: Bool = true
    ) async throws(RallyClientError) -> StoredMessage {
        let groupID = try log.group(reference).groupID
        let messageID = MessageSealing.newMessageID()
        let sentAt = context.clock.now()
        do {
            _ = try await seal(
                content, messageID: messageID, sentAt: sentAt, into: groupID,
                enforcingPreferences: enforcingPreferences)
        } catch .relay(let error) where error.isTransient {
            // Out of reach: the message waits in the home and is sealed
            // when it is sent, under the group's state at that time.
            return try queue(content, messageID: messageID, sentAt: sentAt, in: groupID)
        }
        // Reading our own message back from the log stores it at its
        // position, exactly as the other members see it.
        let report = try await log.sync(groupID)
        let id = messageID.hexString
        if let mine = report.messages.first(where: { $0.id == id }) { return mine }
        if let stored = try? context.store.message(id: id), stored.conversation == groupID { return stored }
        throw .relay(.protocolViolation("sent group message did not come back from the log"))
    }

    /// Sends a message the outbox held (see ``queue(_:messageID:sentAt:in:)``).
    func sendQueued(_ item: OutboxRecord, groupID: String) async throws(RallyClientError) -> WirePublishAck {
        let content: WireEncodedContent
        do {
            content = try FrameCodec.decode(
                WireEncodedContent.self, from: item.payload, limit: WireLimits.maxFrameBytes)
        } catch {
            throw .store(.corrupt("queued group message \(item.messageID): \(error)"))
        }
        return try await seal(
            content, messageID: item.idempotencyKey,
            sentAt: Date(milliseconds: item.queuedAtMs),
            into: groupID)
    }

    /// Catches up with the log, signs and seals the message under the
    /// current epoch (replacing the key first if a member left) and
    /// publishes it; the message id is its idempotency key, so sending it
    /// again after a lost acknowledgement stores it once.
    private func seal(
        _ content: WireEncodedContent, messageID: Data, sentAt: Date, into groupID: String,
        enforcingPreferences: Bool = true
    ) async throws(RallyClientError) -> WirePublishAck {
        try await log.sync(groupID)
        var record = try log.activeGroup(groupID)
        if record.state.needsRekey {
            try await rekey(groupID)
            record = try log.activeGroup(groupID)
        }
        let identity = context.identity
        guard let role = record.state.role(of: identity.inboxID), role.canSend else {
            throw .group(.mayNotSend(record.state.role(of: identity.inboxID) ?? .observer))
        }
        if enforcingPreferences, let key = GroupPreferences.key(forContentType: content.type),
            !record.state.preferences.allows(key, role: role)
        {
            throw .group(.notAllowedByPreference(key, record.state.preferences[key]))
        }
        let epoch = record.state.epoch
        let key = try context.stored { () throws(LocalStoreError) in
            try context.store.epochKey(group: groupID, epoch: epoch)
        }
        guard let key else { throw .group(.missingEpochKey(epoch)) }
        var body = WireMessageBody()
        body.messageID = messageID
        body.sender = identity.publicIdentity.wireBundle
        body.recipient = groupID
        body.sentAtMs = ClientClock.millis(sentAt)
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
        // A timed message also carries a relay expiry, so the relay drops
        // it too (a little after the members, whose clocks start at send).
        let expiresAt = record.state.preferences.messageTTLSeconds.map {
            sentAt.addingTimeInterval(TimeInterval($0) + Self.relayExpiryGrace)
        }
        return try await committer.publishEntry(entry, to: record, key: messageID, expiresAt: expiresAt)
    }

    /// Keeps a message the relay could not take now: stored as outgoing
    /// without a place in the log, and queued in the same transaction.
    private func queue(
        _ content: WireEncodedContent, messageID: Data, sentAt: Date, in groupID: String
    ) throws(RallyClientError) -> StoredMessage {
        let record = try log.activeGroup(groupID)
        let identity = context.identity
        guard let role = record.state.role(of: identity.inboxID), role.canSend else {
            throw .group(.mayNotSend(record.state.role(of: identity.inboxID) ?? .observer))
        }
        let decoded = context.codecs.decode(content)
        let message = StoredMessage(
            id: messageID.hexString, conversation: groupID, outgoing: true, sender: identity.inboxID,
            senderName: identity.displayName, sentAt: sentAt, receivedAt: sentAt, topic: record.topic.rawValue,
            seq: nil, contentType: decoded.contentType.description, encodedContent: FrameCodec.encode(content),
            displayText: decoded.displayText, isKnownType: decoded.isKnown)
        let item = OutboxRecord(
            messageID: message.id, topic: record.topic.rawValue, payload: FrameCodec.encode(content),
            idempotencyKey: messageID, shouldPush: true, queuedAtMs: ClientClock.millis(sentAt), attempts: 0,
            groupID: groupID)
        try context.stored { () throws(LocalStoreError) in try context.store.queueOutgoing(message, item) }
        context.logger.info("group \(groupID): message \(message.id) queued until the relay is reachable")
        return message
    }

    /// What members are shown of a message its author (or a moderator)
    /// deleted while full deletion is off.
    static let deletedText = "🗑 message deleted"

    /// Deletes one of the group's messages: yours, or (moderator and
    /// above) anyone's. Every member's client removes it when the group
    /// allows full deletion, and otherwise shows it as deleted.
    func deleteMessage(_ messageID: String, in reference: String) async throws(RallyClientError) {
        let content: WireEncodedContent
        do {
            content = try MessageDeletionCodec().encode(MessageDeletion(messageID: messageID))
        } catch {
            throw .content(error)
        }
        _ = try await send(content, to: reference)
    }

    /// A direct message to another member, held by both sides to the
    /// group's `direct_messages` preference.
    func sendDirect(
        _ text: String, to member: InboxID, in reference: String, messages: DirectMessageService
    ) async throws(RallyClientError) -> StoredMessage {
        let groupID = try log.group(reference).groupID
        try await log.sync(groupID)
        let record = try log.activeGroup(groupID)
        let me = context.identity.inboxID
        guard record.state.members[member] != nil else { throw .group(.commitRejected(.notAMemberTarget(member))) }
        let role = record.state.role(of: me) ?? .observer
        guard record.state.preferences.allows(.directMessages, role: role) else {
            throw .group(.notAllowedByPreference(.directMessages, record.state.preferences[.directMessages]))
        }
        return try await messages.send(
            GroupDirectMessage(groupID: groupID, text: text), codec: GroupDirectCodec(), to: member, messageID: nil,
            keepCopy: true)
    }

    /// Whether a received direct message between members stands: the group
    /// is here, its sender a member, and its preference lets them.
    static func acceptsDirect(_ message: StoredMessage, codecs: CodecRegistry, store: LocalStore) -> Bool {
        guard message.contentType == GroupDirectCodec.contentType.description else { return true }
        guard let content = try? WireEncodedContent(serializedBytes: message.encodedContent),
            let direct = codecs.decode(content).value as? GroupDirectMessage,
            let record = try? store.group(direct.groupID), record.status == .active,
            let role = record.state.role(of: message.sender)
        else { return false }
        return record.state.preferences.allows(.directMessages, role: role)
    }

    /// How much longer the relay keeps a timed message than its members:
    /// a member whose clock runs a little behind still reads it.
    static let relayExpiryGrace: TimeInterval = 60

    /// What members are shown instead of a message from a member an
    /// admin blocked for all.
    static let blockedText = "🚫 blocked by an admin"

    /// The group's stored messages, oldest first, as members are shown
    /// them.
    func messages(in reference: String) throws(RallyClientError) -> [StoredMessage] {
        let record = try log.group(reference)
        try log.deleteExpiredMessages()
        return try context.stored { () throws(LocalStoreError) in
            try context.store.messages(conversation: record.groupID)
        }.map { Self.shown($0, in: record.state) }
    }

    /// A group message as members are shown it: under the name of its
    /// sender's member record (which the group's admins signed), or as
    /// stored when it was read, for a sender no longer in the group; and
    /// hidden when an admin blocked its sender for all.
    func asShown(_ message: StoredMessage) -> StoredMessage {
        if let record = try? context.store.group(message.conversation) {
            if record.state.members[message.sender] != nil { return Self.shown(message, in: record.state) }
        }
        if let stored = try? context.store.message(id: message.id), stored.conversation == message.conversation {
            return stored
        }
        return message
    }

    static func shown(_ message: StoredMessage, in state: GroupState) -> StoredMessage {
        let named = message.namedByMemberRecord(in: state)
        return state.blocked.contains(message.sender) ? named.withDisplayText(blockedText) : named
    }
}
