import Foundation
import RallyCrypto
import RallyWire

/// The joiner's side of invites: check an invite, send the join request,
/// follow the answer (welcome, typed error) through the join state
/// machine, cancel.
struct JoinService: Sendable {
    let context: ClientContext
    let messages: DirectMessageService

    private var store: LocalStore { context.store }

    /// Validates an invite locally and, if it holds, sends a join request
    /// to its join inbox. An invalid invite fails at once and sends
    /// nothing. Starting again with the same invite while a join is under
    /// way resends the same request (the group handles it once).
    func start(_ text: String, now: Date) async throws(RallyClientError) -> JoinAttempt {
        let slug: String
        let invite: Invite
        do {
            slug = try InviteLink.slug(from: text)
            invite = try Invite.verify(InviteSlug.decode(slug), now: now)
        } catch {
            throw .invite(.invalidInvite(error))
        }
        // Invite.verify checked the join inbox id.
        let joinInbox = try! InboxID(validating: invite.payload.joinInboxID)
        let pending = try context.stored { () throws(LocalStoreError) in try store.joinAttempts(tag: invite.tagText) }
            .first { $0.slug == slug && !$0.isFinal }
        do {
            _ = try await messages.keys.lookUp(joinInbox)
        } catch .unknownRecipient {
            throw .invite(.joinInboxUnknown(joinInbox))
        }
        let attempt =
            pending
            ?? JoinAttempt(
                requestID: MessageSealing.newMessageID().hexString,
                invite: .init(tag: invite.tagText, inviterInbox: joinInbox, name: invite.payload.name),
                slug: slug, phase: .validated, groupID: nil, existing: false, errorType: nil, reason: nil,
                startedAt: now, updatedAt: now)
        if pending == nil { try context.stored { () throws(LocalStoreError) in try store.saveJoinAttempt(attempt) } }
        var request = WireJoinRequest()
        request.invite = invite.signed
        request.requestID = Data(hexString: attempt.requestID) ?? Data()
        _ = try await messages.send(
            request, codec: JoinRequestCodec(), to: joinInbox, messageID: request.requestID, keepCopy: false)
        let sentAt = context.clock.now()
        return try context.stored { () throws(LocalStoreError) in
            try store.updateJoinAttempt(requestID: attempt.requestID, .requestSent, now: sentAt)
        } ?? attempt
    }

    static let declinedReason = "declined"

    /// Turns a personal invitation down: a join request marked `decline`
    /// goes to the group's join inbox, and the attempt is kept as
    /// cancelled ("declined"), so the invitation shows as answered.
    func decline(_ invite: Invite, now: Date) async throws(RallyClientError) {
        let joinInbox = try! InboxID(validating: invite.payload.joinInboxID)
        let slug = InviteSlug.encode(invite.signed)
        let requestID = MessageSealing.newMessageID()
        var request = WireJoinRequest()
        request.invite = invite.signed
        request.requestID = requestID
        request.decline = true
        _ = try await messages.send(
            request, codec: JoinRequestCodec(), to: joinInbox, messageID: requestID, keepCopy: false)
        let attempt = JoinAttempt(
            requestID: requestID.hexString,
            invite: .init(tag: invite.tagText, inviterInbox: joinInbox, name: invite.payload.name), slug: slug,
            phase: .cancelled, groupID: nil, existing: false, errorType: nil, reason: Self.declinedReason,
            startedAt: now, updatedAt: now)
        try context.stored { () throws(LocalStoreError) in try store.saveJoinAttempt(attempt) }
    }

    /// Join attempts, newest first.
    func attempts() throws(RallyClientError) -> [JoinAttempt] {
        try context.stored { () throws(LocalStoreError) in try store.joinAttempts() }
    }

    /// The attempt with this request id (or a unique prefix of it).
    func attempt(_ requestID: String) throws(RallyClientError) -> JoinAttempt {
        // Two are enough to tell a unique prefix from an ambiguous one.
        let matches = try context.stored { () throws(LocalStoreError) in
            try store.joinAttempts(requestIDPrefix: requestID.lowercased(), limit: 2)
        }
        guard matches.count == 1, let attempt = matches.first else {
            throw .invite(.noJoin(matches.isEmpty ? "\"\(requestID)\"" : "matches \"\(requestID)\" uniquely"))
        }
        return attempt
    }

    /// Cancels a join under way; an answer arriving later is dropped.
    func cancel(_ requestID: String) throws(RallyClientError) -> JoinAttempt {
        let attempt = try attempt(requestID)
        let now = context.clock.now()
        return try context.stored { () throws(LocalStoreError) in
            try store.updateJoinAttempt(requestID: attempt.requestID, .cancel, now: now)
        } ?? attempt
    }

    /// Waits until the join ends (joined, failed or cancelled) or `timeout`
    /// passes, while `follow` keeps the inbox flowing and signals each new
    /// message; `onChange` sees every new state. Returns the attempt as it
    /// stands.
    func wait(
        for requestID: String, timeout: Duration?, onChange: @escaping @Sendable (JoinAttempt) async -> Void,
        follow: @escaping @Sendable (_ tick: @escaping @Sendable () -> Void) async throws -> Void
    ) async throws(RallyClientError) -> JoinAttempt {
        var last = try attempt(requestID)
        if last.isFinal { return last }
        let (ticks, tick) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let follower = Task { () throws -> Void in
            defer { tick.finish() }
            try await follow { tick.yield() }
        }
        let clock = context.clock
        // True when the timeout ended the wait.
        let timer = timeout.map { limit in
            Task { () -> Bool in
                do {
                    try await clock.sleep(limit)
                } catch {
                    return false
                }
                tick.finish()
                return true
            }
        }
        defer {
            follower.cancel()
            timer?.cancel()
        }
        for await _ in ticks {
            let now = try attempt(requestID)
            if now != last {
                last = now
                await onChange(now)
            }
            if now.isFinal { return now }
        }
        // The ticks ended: the timeout passed (the join is still under way),
        // or the follower stopped on an error, which is the caller's to know.
        timer?.cancel()
        let timedOut = await timer?.value ?? false
        follower.cancel()
        if !timedOut, case .failure(let error as RallyClientError) = await follower.result { throw error }
        return try attempt(requestID)
    }

    // MARK: Answers arriving in the inbox

    /// The join answer a received message carries, for the store to apply
    /// with the message. A join error counts only as the answer to the
    /// request whose id its message id is derived from: an old answer
    /// replayed for a later request with the same invite is dropped.
    func answer(in message: StoredMessage) -> JoinEventForStore? {
        if message.contentType == JoinPendingNoticeCodec.contentType.description { return pendingNotice(in: message) }
        guard message.contentType == InviteJoinErrorCodec.contentType.description,
            let content = try? WireEncodedContent(serializedBytes: message.encodedContent),
            let error = context.codecs.decode(content).value as? InviteJoinError,
            let attempts = try? store.joinAttempts(tag: error.inviteTag),
            attempts.contains(where: { attempt in
                !attempt.isFinal
                    && Data(hexString: attempt.requestID).map {
                        InviteJoinError.messageID(forRequest: $0).hexString
                    } == message.id
            })
        else { return nil }
        return JoinEventForStore(tag: error.inviteTag, event: .errorReceived(error, from: message.sender))
    }

    /// The group put a join of this client's in its approval queue: counts
    /// only as the answer to the request its message id derives from (and
    /// the state machine takes it only from the invite's identity).
    private func pendingNotice(in message: StoredMessage) -> JoinEventForStore? {
        guard let content = try? WireEncodedContent(serializedBytes: message.encodedContent),
            let notice = context.codecs.decode(content).value as? WireJoinPendingNotice,
            let attempts = try? store.joinAttempts(tag: notice.inviteTag),
            attempts.contains(where: { attempt in
                !attempt.isFinal
                    && Data(hexString: attempt.requestID).map {
                        JoinPendingNoticeCodec.messageID(forRequest: $0).hexString
                    } == message.id
            })
        else { return nil }
        let approvers = notice.approvers.compactMap { try? InboxID(validating: $0) }
        return JoinEventForStore(
            tag: notice.inviteTag,
            event: .approvalPending(
                tag: notice.inviteTag, from: message.sender,
                approval: .init(groupID: notice.groupID, approvers: approvers)))
    }

    /// How a welcome relates to this client's joins: one that names an
    /// invite tag answers a join only when signed by that invite's
    /// identity (which only the group's admins hold) for this group, this
    /// member and that request.
    func match(_ welcome: WireGroupWelcome, from sender: InboxID) -> WelcomeJoinMatch {
        guard !welcome.inviteTag.isEmpty else { return .notAJoinAnswer }
        guard let tag = Data(hexString: welcome.inviteTag),
            let attempts = try? store.joinAttempts(tag: welcome.inviteTag)
        else {
            return .unasked
        }
        for attempt in attempts where Data(hexString: attempt.requestID) == welcome.joinRequestID {
            guard attempt.phase != .joined, attempt.phase != .failed else { continue }
            // An admin's welcome is proven by the invite identity; after
            // approval a moderator's (who holds no invite keys) counts when
            // it comes from one of the approvers the group named, for the
            // group it named. Either way the welcome is then checked
            // against the group's own log before it opens anything.
            let proven =
                (try? store.contact(attempt.invite.inviterInbox)).map { inviteIdentity in
                    InviteKeys.isValidWelcomeProof(
                        welcome.inviteProof, by: inviteIdentity, tag: tag, groupID: welcome.groupID,
                        newcomer: context.identity.inboxID, requestID: welcome.joinRequestID)
                } ?? false
            let approved =
                attempt.invite.approval.map { $0.groupID == welcome.groupID && $0.approvers.contains(sender) }
                ?? false
            guard proven || approved else { continue }
            if attempt.phase == .cancelled { return .cancelled }
            return .underWay(
                JoinEventForStore(
                    tag: welcome.inviteTag,
                    event: .welcomeReceived(tag: welcome.inviteTag, groupID: welcome.groupID, from: sender)))
        }
        return .unasked
    }
}

/// Groups this client was admitted to after it cancelled the join: left
/// as soon as possible, retried on later syncs until it worked.
actor CancelledJoinLeaves {
    private(set) var pending: Set<String> = []

    func add(_ groupID: String) { pending.insert(groupID) }
    func done(_ groupID: String) { pending.remove(groupID) }
}
