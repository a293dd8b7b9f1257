import Crypto
import Foundation
import RallyCrypto
import RallyWire

public enum InviteClientError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidInvite(InviteError)
    case notAdmin(group: String)
    case noInviteKeys(group: String)
    case invitesNotSetUp(group: String)
    case joinInboxUnknown(InboxID)
    case noJoin(String)
    case invalidOptions(String)

    public var description: String {
        switch self {
        case .invalidInvite(let error): "\(error); nothing was sent"
        case .notAdmin(let group): "only admins of \(group) can manage its invites"
        case .noInviteKeys(let group):
            "this client does not hold the invite keys of \(group): they come with being made admin after invites were set up; ask an admin who has them to create the invite"
        case .invitesNotSetUp(let group): "\(group) has no invites yet: create one with `rally invite create`"
        case .joinInboxUnknown(let inbox):
            "the relay does not know this invite's join inbox (\(inbox)): the invite belongs to another relay; use --relay"
        case .noJoin(let what): "no join \(what): see `rally join status`"
        case .invalidOptions(let reason): reason
        }
    }
}

/// How an invite is made.
public struct InviteOptions: Sendable, Equatable {
    public var expiresIn: TimeInterval?
    public var singleUse = false
    /// 0 = unlimited.
    public var maxUses: UInt32 = 0
    public var role: GroupRole = .member
    /// Shown to the joiner before joining; defaults to the group's name.
    public var name: String?
    public var description: String?

    public init(
        expiresIn: TimeInterval? = nil, singleUse: Bool = false, maxUses: UInt32 = 0, role: GroupRole = .member,
        name: String? = nil, description: String? = nil
    ) {
        self.expiresIn = expiresIn
        self.singleUse = singleUse
        self.maxUses = maxUses
        self.role = role
        self.name = name
        self.description = description
    }
}

public struct CreatedInvite: Sendable, Equatable {
    public let invite: Invite
    public let slug: String
    public let appLink: String
    public let webLink: String
    public let groupID: String
}

/// What an admin's client did with one envelope of a group's invite inbox.
public struct JoinRequestReport: Sendable, Equatable {
    public let groupID: String
    public let seq: UInt64
    public let requestID: String?
    public let joiner: InboxID?
    public let decision: JoinRequestDecision?
    /// Whether a join error went out (sending one may fail; that is logged
    /// and blocks nothing).
    public let errorSent: Bool
}

extension RallyClient {
    // MARK: Inviter side

    /// Creates a signed invite to a group this identity administers. The
    /// first invite of a group sets invites up: a commit that names the
    /// group's invite identity and seals its seed to every admin.
    public func createInvite(
        in reference: String, options: InviteOptions = InviteOptions(), now: Date = Date()
    ) async throws(RallyClientError) -> CreatedInvite {
        guard !(options.singleUse && options.maxUses > 1) else {
            throw .invite(.invalidOptions("choose --single-use or --max-uses, not both"))
        }
        if let expiresIn = options.expiresIn, expiresIn <= 0 {
            throw .invite(.invalidOptions("the expiry must be in the future"))
        }
        let groupID = try group(reference).groupID
        _ = try await syncGroup(groupID)
        var record = try group(groupID)
        let label = "\"\(record.state.profile.name)\""
        guard let myRole = record.state.role(of: identity.inboxID), myRole >= .admin else {
            throw .invite(.notAdmin(group: label))
        }
        guard options.role <= myRole else {
            throw .invite(.invalidOptions("an invite cannot grant \(options.role), above your role \(myRole)"))
        }
        if record.state.inviteIdentity == nil || record.state.invitesNeedRotation {
            try await setUpInvites(groupID)
            record = try group(groupID)
        }
        let keys = try inviteKeys(groupID, label: label)
        // The identity may be new (set up, or rotated when an admin lost
        // their rights): joiners must find its key bundle.
        try await inviteClient(groupID, keys: keys).publishKeyBundle()
        var payload = WireInvitePayload()
        payload.inviteTag = record.state.inviteTag
        payload.issuer = identity.publicIdentity.wireBundle
        payload.groupReference = keys.sealReference(
            groupID: groupID, tag: record.state.inviteTag, issuer: identity.inboxID)
        payload.joinInboxID = keys.identity.inboxID.rawValue
        payload.name = options.name ?? record.state.profile.name
        payload.description_p = options.description ?? ""
        if let expiresIn = options.expiresIn {
            payload.expiresAtMs = LocalStore.millis(now.addingTimeInterval(expiresIn))
        }
        payload.singleUse = options.singleUse || options.maxUses == 1
        payload.maxUses = payload.singleUse ? 1 : options.maxUses
        payload.role = options.role.wire
        payload.createdAtMs = LocalStore.millis(now)
        let signed = Invite.sign(payload, by: identity)
        let slug = InviteSlug.encode(signed)
        let invite = Invite(payload: payload, issuer: identity.publicIdentity, signed: signed)
        let links = InviteLink.links(for: slug, relayURL: relayURL)
        return CreatedInvite(invite: invite, slug: slug, appLink: links.app, webLink: links.web, groupID: groupID)
    }

    /// Revokes every outstanding invite of a group by rotating its invite
    /// tag. Requests made with an older invite are answered
    /// `invite_revoked`.
    public func revokeInvites(in reference: String) async throws(RallyClientError) {
        let groupID = try group(reference).groupID
        try await commitWithRetries(groupID) { state throws(RallyClientError) in
            guard state.inviteIdentity != nil else {
                throw .invite(.invitesNotSetUp(group: "\"\(state.profile.name)\""))
            }
            var commit = self.newCommit(on: state)
            commit.rotateInviteTag.inviteTag = Self.randomBytes(16)
            return commit
        }
    }

    /// Ends a group for good (owner only). Later join requests are
    /// answered `conversation_expired`.
    public func explodeGroup(_ reference: String) async throws(RallyClientError) {
        let groupID = try group(reference).groupID
        try await commitWithRetries(groupID) { state throws(RallyClientError) in
            var commit = self.newCommit(on: state)
            commit.explode = WireExplodeGroup()
            return commit
        }
    }

    /// Lifts this client's block on an inbox's join requests to a group.
    /// Returns whether there was one.
    @discardableResult
    public func unblockJoinSender(_ inbox: InboxID, in reference: String) throws(RallyClientError) -> Bool {
        let groupID = try group(reference).groupID
        do {
            return try store.unblockJoinSender(inbox, group: groupID)
        } catch {
            throw .store(error)
        }
    }

    /// Who this client blocked from a group's join requests, and why.
    public func blockedJoinSenders(in reference: String) throws(RallyClientError) -> [(inbox: String, reason: String)] {
        let groupID = try group(reference).groupID
        do {
            return try store.blockedJoinSenders(group: groupID)
        } catch {
            throw .store(error)
        }
    }

    /// Removes a group from this device only.
    public func forgetGroup(_ reference: String) throws(RallyClientError) {
        let groupID = try group(reference).groupID
        do {
            try store.forgetGroup(groupID)
        } catch {
            throw .store(error)
        }
    }

    func setUpInvites(_ groupID: String) async throws(RallyClientError) {
        let seed = InviteKeys.newSeed()
        let keys: InviteKeys
        do {
            keys = try InviteKeys(seed: seed)
        } catch {
            throw .recipientKeysInvalid(identity.inboxID, reason: error.description)
        }
        // Published first, so a joiner can always seal a request to it.
        try await inviteClient(groupID, keys: keys).publishKeyBundle()
        let tag = Self.randomBytes(16)
        do {
            try await commitWithRetries(groupID) { state throws(RallyClientError) in
                if state.inviteIdentity != nil, !state.invitesNeedRotation {
                    throw .group(.commitRejected(.invitesAlreadySetUp))
                }
                var commit = self.newCommit(on: state)
                commit.setUpInvites.inviteIdentity = keys.identity.publicIdentity.wireBundle
                commit.setUpInvites.inviteTag = tag
                commit.setUpInvites.sealedSeeds = try self.sealInviteSeed(seed, toAdminsOf: state)
                return commit
            }
        } catch .group(.commitRejected(.invitesAlreadySetUp)) {
            // Another admin set them up meanwhile; their seed reached us
            // through the log.
        }
    }

    nonisolated func sealInviteSeed(
        _ seed: SymmetricKey, toAdminsOf state: GroupState
    ) throws(RallyClientError) -> [WireSealedEpochKey] {
        try sealInviteSeed(seed, to: state.members.values.filter { $0.role >= .admin }.map(\.identity), state: state)
    }

    /// Seals the invite seed for the commit built on `state` (members open
    /// it at the epoch that commit starts).
    nonisolated func sealInviteSeed(
        _ seed: SymmetricKey, to recipients: [PublicIdentity], state: GroupState
    ) throws(RallyClientError) -> [WireSealedEpochKey] {
        do {
            return try EpochKeys.seal(
                seed, to: recipients, groupID: state.groupID, epoch: state.epoch + 1, info: EpochKeys.inviteSeedInfo)
        } catch {
            throw .recipientKeysInvalid(identity.inboxID, reason: error.description)
        }
    }

    func inviteKeys(_ groupID: String, label: String) throws(RallyClientError) -> InviteKeys {
        let seed: SymmetricKey?
        do {
            seed = try store.inviteSeed(group: groupID)
        } catch {
            throw .store(error)
        }
        guard let seed, let keys = try? InviteKeys(seed: seed) else { throw .invite(.noInviteKeys(group: label)) }
        return keys
    }

    /// A client acting as the group's invite identity, sharing this
    /// client's store (its inbox cursor lives there) and relay.
    func inviteClient(_ groupID: String, keys: InviteKeys) -> RallyClient {
        if let existing = inviteClients[keys.identity.inboxID.rawValue] { return existing }
        let client = RallyClient(
            identity: keys.identity, store: store, relayURL: relayURL, codecs: codecs, logger: logger)
        inviteClients[keys.identity.inboxID.rawValue] = client
        return client
    }

    /// Reads every invite inbox this client holds keys for, up to its
    /// head, and answers each request.
    @discardableResult
    public func processJoinRequests() async throws(RallyClientError) -> [JoinRequestReport] {
        let seeds: [(groupID: String, seed: SymmetricKey)]
        do {
            seeds = try store.inviteSeeds()
        } catch {
            throw .store(error)
        }
        let collector = ReportCollector()
        for (groupID, seed) in seeds {
            try await followJoinRequests(groupID: groupID, seed: seed, untilCaughtUp: true) { report in
                await collector.add(report)
            }
        }
        return await collector.reports
    }

    /// Follows one group's invite inbox: every request is decided, acted on
    /// and recorded before `handler` sees the report.
    public func followJoinRequests(
        groupID: String, seed: SymmetricKey, untilCaughtUp: Bool,
        handler: @Sendable (JoinRequestReport) async -> Void
    ) async throws(RallyClientError) {
        guard let keys = try? InviteKeys(seed: seed) else { return }
        let inviteClient = inviteClient(groupID, keys: keys)
        let topic = inviteClient.inboxTopic
        try await inviteClient.followTopic(topic, untilCaughtUp: untilCaughtUp) { envelope throws(RallyClientError) in
            let report = try await self.handleJoinEnvelope(
                envelope, groupID: groupID, keys: keys, inviteClient: inviteClient, topic: topic)
            await handler(report)
        }
    }

    private func handleJoinEnvelope(
        _ envelope: WireEnvelope, groupID: String, keys: InviteKeys, inviteClient: RallyClient, topic: TopicName
    ) async throws(RallyClientError) -> JoinRequestReport {
        let verified: VerifiedMessage
        do {
            verified = try MessageSealing.open(envelope.payload, as: keys.identity)
        } catch {
            // No provable sender: nobody to answer or block.
            logger.warning("invite inbox of \(groupID): dropped envelope #\(envelope.seq): \(error)")
            try finish(nil, groupID, nil, .ignored, "\(error)", block: false, topic, envelope.seq)
            return JoinRequestReport(
                groupID: groupID, seq: envelope.seq, requestID: nil, joiner: nil, decision: nil, errorSent: false)
        }
        let requestID = verified.messageID
        let joiner = verified.sender
        let decoded = codecs.decode(verified.body.content)
        let request = decoded.contentType == JoinRequestCodec.contentType ? decoded.value as? WireJoinRequest : nil
        let asked = JoinRequestPolicy.Asked(requestID: requestID, sender: joiner, request: request, keys: keys)
        func decide() throws(RallyClientError) -> JoinRequestDecision {
            do {
                return asked.decide(
                    groupID: groupID, group: try store.group(groupID), me: identity.inboxID,
                    seenBefore: try store.joinRequestSeen(requestID.hexString),
                    senderBlocked: try store.isBlocked(joiner.inboxID, group: groupID))
            } catch {
                throw .store(error)
            }
        }
        var decision = try decide()
        // An admission reads the log to its head and decides again before
        // it commits; any other answer is final, so it is given on the group
        // as it is now (a revocation or an explosion may have just landed).
        if !decision.isAdmission, (try? store.group(groupID)) != nil {
            do {
                _ = try await syncGroup(groupID)
                decision = try decide()
            } catch {
                logger.warning("could not sync group \(groupID) before answering a join request: \(error)")
            }
        }
        let (final, errorSent) = try await perform(decision, asked: asked, inviteClient: inviteClient, groupID: groupID)
        let (outcome, detail) = final.recorded
        if outcome == .blocked { logger.warning("blocked \(joiner.inboxID): \(detail ?? "")") }
        // A duplicate keeps the record of the first handling.
        let record: String? = final == .duplicate ? nil : requestID.hexString
        try finish(record, groupID, joiner.inboxID, outcome, detail, block: outcome == .blocked, topic, envelope.seq)
        return JoinRequestReport(
            groupID: groupID, seq: envelope.seq, requestID: requestID.hexString, joiner: joiner.inboxID,
            decision: final, errorSent: errorSent)
    }

    private func finish(
        _ requestID: String?, _ groupID: String, _ joiner: InboxID?, _ outcome: JoinRequestOutcome,
        _ detail: String?, block: Bool, _ topic: TopicName, _ seq: UInt64
    ) throws(RallyClientError) {
        do {
            try store.finishJoinRequest(
                requestID: requestID, groupID: groupID, joiner: joiner, outcome: outcome, detail: detail,
                block: block, topic: topic, seq: seq)
        } catch {
            throw .store(error)
        }
    }

    /// Carries out a decision. An admission is committed on the latest
    /// state, deciding again on every rebuild, so a use taken meanwhile
    /// turns it into the matching error. Returns what was finally done.
    private func perform(
        _ decision: JoinRequestDecision, asked: JoinRequestPolicy.Asked, inviteClient: RallyClient, groupID: String
    ) async throws(RallyClientError) -> (JoinRequestDecision, Bool) {
        let joiner = asked.sender
        switch decision {
        case .duplicate, .ignoredBlockedSender, .block, .notForThisClient:
            return (decision, false)
        case .reject(let type, let reason):
            let sent = await sendJoinError(type, reason: reason, asked: asked, inviteClient: inviteClient)
            return (decision, sent)
        case .alreadyMember(let groupID, let tag):
            do {
                try await sendWelcome(
                    to: joiner, groupID: groupID, admission: nil,
                    invite: InviteWelcome(tag: tag, keys: asked.keys, requestID: asked.requestID))
            } catch {
                logger.warning("could not welcome \(joiner.inboxID) back into \(groupID): \(error)")
            }
            return (decision, false)
        case .admit(let admission):
            var overtaken: JoinRequestDecision = .duplicate
            let committed: Data?
            do {
                committed = try await commitWithRetries(groupID) { state throws(RallyClientError) in
                    let again = asked.decide(
                        groupID: groupID,
                        group: GroupRecord(groupID: groupID, topicID: "", state: state, status: .active),
                        me: self.identity.inboxID, seenBefore: false, senderBlocked: false)
                    guard case .admit(let current) = again else {
                        overtaken = again
                        return nil
                    }
                    var commit = self.newCommit(on: state)
                    commit.addMember.member = joiner.wireBundle
                    commit.addMember.role = current.role.wire
                    commit.addMember.viaInvite.inviteID = current.inviteID
                    commit.addMember.viaInvite.inviteTag = current.tag
                    commit.addMember.viaInvite.maxUses = current.maxUses
                    commit.addMember.viaInvite.joinRequestID = current.requestID
                    return commit
                }
            } catch .group(.commitRejected(let rejection)) {
                // The rules caught what the decision did not (a race inside
                // one epoch): answer as the rules say.
                let mapped: JoinRequestDecision =
                    switch rejection {
                    case .joinRequestAlreadyAdmitted: .duplicate
                    case .inviteUsedUp: .reject(.singleUseConsumed, reason: "the invite was used")
                    case .inviteRevoked: .reject(.inviteRevoked, reason: "the invite was revoked")
                    case .inviteRotationPending:
                        .reject(.inviteRevoked, reason: JoinRequestPolicy.adminLeftReason)
                    case .exploded: .reject(.conversationExpired, reason: "the group was exploded")
                    case .alreadyMember: .alreadyMember(groupID: groupID, tag: admission.tag)
                    default: .reject(.genericFailure, reason: rejection.description)
                    }
                return try await perform(mapped, asked: asked, inviteClient: inviteClient, groupID: groupID)
            }
            // The group changed under the admission: answer as it is now.
            guard let committed else {
                return try await perform(overtaken, asked: asked, inviteClient: inviteClient, groupID: groupID)
            }
            do {
                try await sendWelcome(
                    to: joiner, groupID: groupID, admission: committed,
                    invite: InviteWelcome(tag: admission.tag, keys: asked.keys, requestID: asked.requestID))
            } catch {
                logger.warning("admitted \(joiner.inboxID) to \(groupID) but could not send the welcome: \(error)")
            }
            return (decision, false)
        }
    }

    /// Sends a typed join error from the invite identity. Its message id is
    /// derived from the request id, so however many admins answer the same
    /// request, the joiner's inbox holds one error. A failure is logged and
    /// blocks nothing.
    private func sendJoinError(
        _ type: JoinErrorType, reason: String, asked: JoinRequestPolicy.Asked, inviteClient: RallyClient
    ) async -> Bool {
        // The decision verified this invite; only its tag is needed here.
        guard let request = asked.request,
            let payload = try? FrameCodec.decode(
                WireInvitePayload.self, from: request.invite.payload, limit: InviteSlug.maxInflatedBytes)
        else { return false }
        let error = InviteJoinError(
            errorType: type, inviteTag: payload.inviteTag.hexString, timestamp: Date(), reason: reason)
        let joiner = asked.sender.inboxID
        do {
            _ = try await inviteClient.send(
                error, codec: InviteJoinErrorCodec(), to: joiner, messageID: Self.joinErrorID(for: request.requestID),
                keepCopy: false)
            return true
        } catch {
            logger.error("could not send the join error \(type.rawValue) to \(joiner): \(error)")
            return false
        }
    }

    static func joinErrorID(for requestID: Data) -> Data {
        Data(SHA256.hash(data: Data("rally-join-error-v1".utf8) + requestID).prefix(16))
    }

    static func randomBytes(_ count: Int) -> Data {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }

    // MARK: Joiner side

    /// Validates an invite locally and, if it holds, sends a join request
    /// to its join inbox. An invalid invite fails at once and sends
    /// nothing. Starting again with the same invite while a join is under
    /// way resends the same request (the group handles it once).
    public func startJoin(_ text: String, now: Date = Date()) async throws(RallyClientError) -> JoinAttempt {
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
        let pending: JoinAttempt?
        do {
            pending = try store.joinAttempts().first {
                $0.invite.tag == invite.tagText && $0.slug == slug && !$0.isFinal
            }
        } catch {
            throw .store(error)
        }
        do {
            _ = try await lookUp(joinInbox)
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
        do {
            if pending == nil { try store.saveJoinAttempt(attempt) }
        } catch {
            throw .store(error)
        }
        var request = WireJoinRequest()
        request.invite = invite.signed
        request.requestID = Data(hexString: attempt.requestID) ?? Data()
        _ = try await send(
            request, codec: JoinRequestCodec(), to: joinInbox, messageID: request.requestID, keepCopy: false)
        do {
            return try store.updateJoinAttempt(requestID: attempt.requestID, .requestSent) ?? attempt
        } catch {
            throw .store(error)
        }
    }

    /// Follows the inbox until the join ends (joined, failed or cancelled)
    /// or `timeout` passes; `onChange` sees every new state. Returns the
    /// attempt as it stands.
    public func waitForJoin(
        requestID: String, timeout: Duration? = nil,
        onChange: @escaping @Sendable (JoinAttempt) async -> Void = { _ in }
    ) async throws(RallyClientError) -> JoinAttempt {
        var last = try joinAttempt(requestID)
        if last.isFinal { return last }
        let (ticks, tick) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let follower = Task { () throws -> Void in
            defer { tick.finish() }
            try await self.followInbox(untilCaughtUp: false) { _ in tick.yield() }
        }
        // True when the timeout ended the wait.
        let timer = timeout.map { limit in
            Task { () -> Bool in
                do {
                    try await Task.sleep(for: limit)
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
            let now = try joinAttempt(requestID)
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
        return try joinAttempt(requestID)
    }

    public func joinAttempts() throws(RallyClientError) -> [JoinAttempt] {
        do {
            return try store.joinAttempts()
        } catch {
            throw .store(error)
        }
    }

    /// The attempt with this request id (or a unique prefix of it).
    public func joinAttempt(_ requestID: String) throws(RallyClientError) -> JoinAttempt {
        let all = try joinAttempts()
        let matches = all.filter { $0.requestID.hasPrefix(requestID.lowercased()) }
        guard matches.count == 1, let attempt = matches.first else {
            throw .invite(.noJoin(matches.isEmpty ? "\"\(requestID)\"" : "matches \"\(requestID)\" uniquely"))
        }
        return attempt
    }

    /// The newest join that is still under way.
    public func currentJoin() throws(RallyClientError) -> JoinAttempt? {
        try joinAttempts().first { !$0.isFinal }
    }

    /// Cancels a join under way; an answer arriving later is dropped.
    public func cancelJoin(_ requestID: String) throws(RallyClientError) -> JoinAttempt {
        let attempt = try joinAttempt(requestID)
        do {
            return try store.updateJoinAttempt(requestID: attempt.requestID, .cancel) ?? attempt
        } catch {
            throw .store(error)
        }
    }

    /// The join answer a received message carries, for the store to apply
    /// with the message.
    /// A join error counts only as the answer to the request whose id its
    /// message id is derived from: an old answer replayed for a later
    /// request with the same invite is dropped.
    func joinEvent(in message: StoredMessage) -> JoinEventForStore? {
        guard message.contentType == InviteJoinErrorCodec.contentType.description,
            let content = try? WireEncodedContent(serializedBytes: message.encodedContent),
            let error = codecs.decode(content).value as? InviteJoinError,
            let attempts = try? store.joinAttempts(),
            attempts.contains(where: { attempt in
                !attempt.isFinal && attempt.invite.tag == error.inviteTag
                    && Data(hexString: attempt.requestID).map { Self.joinErrorID(for: $0).hexString } == message.id
            })
        else { return nil }
        return JoinEventForStore(tag: error.inviteTag, event: .errorReceived(error, from: message.sender))
    }
}

private actor ReportCollector {
    var reports: [JoinRequestReport] = []
    func add(_ report: JoinRequestReport) { reports.append(report) }
}
