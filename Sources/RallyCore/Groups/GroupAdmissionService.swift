public import Foundation
public import RallyCrypto
import RallyWire

/// One message of a pending joiner's support chat, as shown.
public struct SupportMessage: Sendable, Equatable {
    public let id: String
    public let sender: InboxID
    public let senderName: String
    public let text: String
    public let sentAt: Date
    public let outgoing: Bool
}

/// Member admission (the seed's section 4): the group's admission setting,
/// the pending queue that moderators and above decide on, and the support
/// chat between them and one pending joiner. Admins' clients fill the queue
/// when they answer join requests. Reached as
/// ``RallyClient/groupAdmission``.
public struct GroupAdmissionService: Sendable {
    let context: ClientContext
    let log: GroupLog
    let committer: GroupCommitter
    let welcomes: GroupWelcomes
    let messages: DirectMessageService

    /// Sets whether joiners wait for approval (owner).
    public func setAdmission(_ admission: GroupAdmission, in reference: String) async throws(RallyClientError) {
        let groupID = try log.group(reference).groupID
        let committer = self.committer
        try await committer.commit(groupID) { state throws(RallyClientError) in
            var commit = committer.newCommit(on: state)
            commit.setAdmission.admission = admission.wire
            return commit
        }
    }

    /// The joiners waiting for approval, as the log has them now.
    public func pending(in reference: String) async throws(RallyClientError) -> [PendingMember] {
        let groupID = try log.group(reference).groupID
        try await log.sync(groupID)
        let state = try log.group(groupID).state
        return state.pending.values.sorted { $0.inboxID < $1.inboxID }
    }

    /// Admits a pending joiner (moderator and above), with the role they
    /// asked for unless `role` says otherwise, and sends their welcome.
    /// Two moderators deciding at once: the log orders the commits and the
    /// second finds the joiner no longer pending.
    public func admit(
        _ inbox: InboxID, role: GroupRole?, in reference: String
    ) async throws(RallyClientError) -> GroupRecord {
        let (groupID, decided) = try await decide(inbox, in: reference) { commit, waiting in
            commit.admitPending.inboxID = inbox.rawValue
            commit.admitPending.role = (role ?? waiting.role).wire
        }
        if let (committed, waiting) = decided {
            try await welcomes.send(
                to: waiting.identity, groupID: groupID, admission: committed,
                invite: .init(tag: waiting.inviteTag, keys: nil, requestID: waiting.joinRequestID))
        }
        return try log.group(groupID)
    }

    /// Turns a pending joiner away (moderator and above); they are told
    /// with a `request_rejected` join error that answers their request.
    public func reject(_ inbox: InboxID, in reference: String) async throws(RallyClientError) -> GroupRecord {
        let (groupID, decided) = try await decide(inbox, in: reference) { commit, _ in
            commit.rejectPending.inboxID = inbox.rawValue
        }
        if let (_, waiting) = decided {
            let error = InviteJoinError(
                errorType: .requestRejected, inviteTag: waiting.inviteTag.hexString, timestamp: context.clock.now(),
                reason: "a moderator declined your request to join")
            do {
                _ = try await messages.send(
                    error, codec: InviteJoinErrorCodec(), to: inbox,
                    messageID: InviteJoinError.messageID(forRequest: waiting.joinRequestID), keepCopy: false)
            } catch {
                context.logger.warning("turned \(inbox) away from \(groupID) but could not tell them: \(error)")
            }
        }
        return try log.group(groupID)
    }

    /// Commits a decision on a pending joiner, drafted by `fill` on the
    /// latest state (read first: the decision is checked on the queue as
    /// the log has it now). Returns the commit id and the joiner it
    /// decided on, or nil when nothing was committed.
    private func decide(
        _ inbox: InboxID, in reference: String, _ fill: (inout WireGroupCommit, PendingMember) -> Void
    ) async throws(RallyClientError) -> (String, (Data, PendingMember)?) {
        let groupID = try log.group(reference).groupID
        try await log.sync(groupID)
        let committer = self.committer
        var waiting: PendingMember?
        let committed = try await committer.commit(groupID) { state throws(RallyClientError) in
            guard let found = state.pending[inbox] else { throw .group(.commitRejected(.notPending(inbox))) }
            waiting = found
            var commit = committer.newCommit(on: state)
            fill(&commit, found)
            return commit
        }
        guard let committed, let waiting else { return (groupID, nil) }
        return (groupID, (committed, waiting))
    }

    // MARK: Support chat

    /// Where this client stands in a support chat: a moderator (or above)
    /// of the group, or the pending joiner itself.
    private enum Side {
        case moderator(groupID: String, state: GroupState)
        case joiner(groupID: String, approvers: [InboxID])
    }

    private func side(_ reference: String, member: InboxID) throws(RallyClientError) -> Side {
        let me = context.identity.inboxID
        if let record = try? log.group(reference), let role = record.state.role(of: me), role >= .moderator {
            return .moderator(groupID: record.groupID, state: record.state)
        }
        guard member == me else { throw .group(.supportNotAllowed(reference)) }
        let attempts = try context.stored { () throws(LocalStoreError) in try context.store.joinAttempts() }
        let queued = attempts.compactMap { attempt in
            attempt.phase == .awaitingApproval ? attempt.invite.approval : nil
        }.filter { $0.groupID.hasPrefix(reference.lowercased()) }
        guard let approval = queued.first else { throw .group(.supportNotAllowed(reference)) }
        return .joiner(groupID: approval.groupID, approvers: approval.approvers)
    }

    /// Sends one support message: a moderator's reaches the pending joiner
    /// and the other moderators and above; the joiner's reaches the
    /// approvers its notice named. Each copy is a direct message sealed to
    /// its reader, so nobody else (no member below moderator, not the
    /// relay) reads the chat.
    public func sendSupport(
        _ text: String, in reference: String, member: InboxID
    ) async throws(RallyClientError)
        -> SupportMessage
    {
        let me = context.identity.inboxID
        let groupID: String
        var recipients: [InboxID]
        if let record = try? log.group(reference), record.status == .active { try await log.sync(record.groupID) }
        switch try side(reference, member: member) {
        case .moderator(let id, let state):
            guard state.pending[member] != nil else { throw .group(.commitRejected(.notPending(member))) }
            groupID = id
            recipients = [member] + state.sortedMembers.filter { $0.role >= .moderator }.map(\.inboxID)
        case .joiner(let id, let approvers):
            groupID = id
            recipients = approvers
        }
        recipients.removeAll { $0 == me }
        var body = WireGroupSupportMessage()
        body.groupID = groupID
        body.member = member.rawValue
        body.text = text
        let messageID = MessageSealing.newMessageID()
        var sent: StoredMessage?
        for recipient in recipients {
            do {
                let copy = try await messages.send(
                    body, codec: GroupSupportCodec(), to: recipient, messageID: messageID, keepCopy: sent == nil)
                if sent == nil { sent = copy }
            } catch .content(let error) {
                throw .content(error)
            } catch {
                // One unreachable moderator does not silence the rest.
                context.logger.warning("support message to \(recipient) in \(groupID) not sent: \(error)")
            }
        }
        guard let sent else { throw .group(.supportNotAllowed(reference)) }
        return SupportMessage(
            id: sent.id, sender: me, senderName: context.identity.displayName, text: text, sentAt: sent.sentAt,
            outgoing: true)
    }

    /// The support chat of one pending joiner, oldest first: only messages
    /// from that joiner or from moderators and above (as this side knows
    /// them) count.
    public func support(in reference: String, member: InboxID) throws(RallyClientError) -> [SupportMessage] {
        let me = context.identity.inboxID
        let groupID: String
        let mayWrite: (InboxID) -> Bool
        switch try side(reference, member: member) {
        case .moderator(let id, let state):
            groupID = id
            mayWrite = { $0 == member || $0 == me || (state.role(of: $0) ?? .observer) >= .moderator }
        case .joiner(let id, let approvers):
            groupID = id
            mayWrite = { $0 == me || approvers.contains($0) }
        }
        let stored = try context.stored { () throws(LocalStoreError) in
            try context.store.messages(contentType: GroupSupportCodec.contentType.description)
        }
        var seen: Set<String> = []
        return stored.compactMap { message -> SupportMessage? in
            guard seen.insert(message.id).inserted, mayWrite(message.sender),
                let content = try? WireEncodedContent(serializedBytes: message.encodedContent),
                let body = context.codecs.decode(content).value as? WireGroupSupportMessage,
                body.groupID == groupID, body.member == member.rawValue
            else { return nil }
            return SupportMessage(
                id: message.id, sender: message.sender, senderName: message.senderName, text: body.text,
                sentAt: message.sentAt, outgoing: message.outgoing)
        }
    }
}
