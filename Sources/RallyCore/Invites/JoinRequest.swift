import Crypto
public import Foundation
public import RallyCrypto
public import RallyWire

/// `rally.dev/invite_join_request:1.0`: what a joiner sends to an invite's
/// join inbox.
public struct JoinRequestCodec: ContentCodec {
    public static let contentType = ContentTypeID(
        authority: "rally.dev", type: "invite_join_request", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    /// A request is an invite (at most a slug's worth) plus an id.
    public static let maxBodyBytes = InviteSlug.maxInflatedBytes + 64

    public init() {}

    public func encode(_ value: WireJoinRequest) throws(ContentError) -> WireEncodedContent {
        var content = WireEncodedContent()
        content.type = contentType.wire
        content.content = FrameCodec.encode(value)
        return content
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> WireJoinRequest {
        guard content.content.count <= Self.maxBodyBytes else {
            throw .tooLarge(size: content.content.count, limit: Self.maxBodyBytes)
        }
        return try ContentError.decoding(contentType) { () throws(FrameDecodingError) in
            try FrameCodec.decode(WireJoinRequest.self, from: content.content, limit: Self.maxBodyBytes)
        }
    }

    public func fallback(for value: WireJoinRequest) -> String? { "Asked to join with an invite" }
    public func shouldPush(_ value: WireJoinRequest) -> Bool { true }
    public func summary(of value: WireJoinRequest) -> String { "asked to join with an invite" }
}

/// The inviter side's decision for one join request, in the order of
/// checks the product requires. Pure: the shell looks things up, performs
/// the decision and records it.
public enum JoinRequestDecision: Sendable, Equatable {
    /// Handled before (by this client, or admitted by another admin): no
    /// answer, ever again.
    case duplicate
    /// From an inbox this admin blocked: dropped silently.
    case ignoredBlockedSender
    /// Malformed or forged: never answered, and the sender is blocked.
    case block(reason: String)
    /// Answered with a typed join error.
    case reject(JoinErrorType, reason: String)
    /// The joiner is a member already: send a welcome again, so its join
    /// ends as joined.
    case alreadyMember(groupID: String, tag: Data)
    /// The joiner waits in the approval queue already: tell it again.
    case awaitingApproval(groupID: String, tag: Data)
    /// The invitee turned its invitation down: withdraw it, answer nothing.
    case declineInvitation(groupID: String)
    /// Admit, or with `approval` put the joiner in the approval queue.
    case admit(Admission)
    /// This client is no longer an admin of the group; another admin
    /// answers.
    case notForThisClient(reason: String)

    public var isAdmission: Bool {
        if case .admit = self { return true }
        return false
    }

    /// What the admin's store records of it, with the reason if any.
    public var recorded: (outcome: JoinRequestOutcome, detail: String?) {
        switch self {
        case .duplicate, .ignoredBlockedSender, .notForThisClient: (.ignored, nil)
        case .block(let reason): (.blocked, reason)
        case .reject(let type, let reason): (.rejected, "\(type.rawValue): \(reason)")
        case .alreadyMember: (.alreadyMember, nil)
        case .awaitingApproval: (.pending, nil)
        case .declineInvitation: (.declined, nil)
        case .admit(let admission): (admission.approval ? .pending : .admitted, nil)
        }
    }

    public struct Admission: Sendable, Equatable {
        public let groupID: String
        public let joiner: PublicIdentity
        public let role: GroupRole
        public let tag: Data
        public let inviteID: Data
        public let maxUses: UInt32
        public let requestID: Data
        /// The group, invite or link wants a moderator's approval first.
        public var approval = false
        /// An accepted personal invitation: admitted as the admin invited
        /// them, judged by the group's invitees rather than its invite tag.
        public var invitation = false
        /// This client's own commit admitted the request already, but its
        /// answer never went out (the client stopped, or lost the relay,
        /// between the commit and the welcome): only the answer is left.
        public var committed = false

        /// The admission as the commit that carries it names it.
        public var wire: WireInviteAdmission {
            var admission = WireInviteAdmission()
            admission.inviteID = inviteID
            admission.inviteTag = tag
            admission.maxUses = maxUses
            admission.joinRequestID = requestID
            return admission
        }
    }
}

public enum JoinRequestPolicy {
    /// The facts a decision needs, gathered by the shell.
    public struct Context: Sendable {
        public let requestID: Data
        public let sender: PublicIdentity
        /// The request's content as received; nil if it is not a join
        /// request at all.
        public let request: WireJoinRequest?
        public let keys: InviteKeys
        /// The group this invite inbox belongs to.
        public let groupID: String
        /// The group as this client knows it; nil when it is not on this
        /// device.
        public let group: GroupRecord?
        public let me: InboxID
        public let seenBefore: Bool
        public let senderBlocked: Bool
        public let now: Date

        public init(
            requestID: Data, sender: PublicIdentity, request: WireJoinRequest?, keys: InviteKeys, groupID: String,
            group: GroupRecord?, me: InboxID, seenBefore: Bool, senderBlocked: Bool, now: Date
        ) {
            self.requestID = requestID
            self.sender = sender
            self.request = request
            self.keys = keys
            self.groupID = groupID
            self.group = group
            self.me = me
            self.seenBefore = seenBefore
            self.senderBlocked = senderBlocked
            self.now = now
        }
    }

    /// What a request brought, apart from the group facts a decision also
    /// needs: the shell decides it once, and again on every rebuild of an
    /// admission.
    public struct Asked: Sendable {
        public let requestID: Data
        public let sender: PublicIdentity
        public let request: WireJoinRequest?
        public let keys: InviteKeys

        public func decide(
            groupID: String, group: GroupRecord?, me: InboxID, seenBefore: Bool, senderBlocked: Bool, now: Date
        ) -> JoinRequestDecision {
            JoinRequestPolicy.decide(
                Context(
                    requestID: requestID, sender: sender, request: request, keys: keys, groupID: groupID,
                    group: group, me: me, seenBefore: seenBefore, senderBlocked: senderBlocked, now: now))
        }
    }

    /// The id of an invite for use counting: the first 16 bytes of the
    /// SHA-256 of its signed payload.
    public static func inviteID(of signed: WireSignedInvite) -> Data {
        Data(SHA256.hash(data: signed.payload).prefix(16))
    }

    static let adminLeftReason = "an admin left, which revoked every invite; ask for a new one"

    public static func decide(_ context: Context) -> JoinRequestDecision {
        // 1. Duplicate: handled once, ever.
        if context.seenBefore { return .duplicate }
        if context.group?.state.admittedJoinRequests.contains(context.requestID) == true {
            return unfinishedAdmission(context) ?? .duplicate
        }
        if context.senderBlocked { return .ignoredBlockedSender }
        // 2. Malformed or forged. Only what the sender itself signed can
        // get it blocked: a request that is not one, or whose id is not
        // the message's. An invite that fails (bad signature, another join
        // inbox, a group reference no admin made) may be someone else's
        // forgery handed to an innocent joiner: it is answered, never
        // blocked, so the victim can still join with a genuine invite.
        guard let request = context.request else { return .block(reason: "not a join request") }
        guard request.requestID == context.requestID else { return .block(reason: "request id does not match") }
        // Expiry is judged below, in its place in the order.
        let invite: Invite
        do {
            invite = try Invite.verify(request.invite, now: nil)
        } catch {
            return .reject(.genericFailure, reason: "the invite is not valid: \(error)")
        }
        guard invite.payload.joinInboxID == context.keys.identity.inboxID.rawValue else {
            return .reject(.genericFailure, reason: "the invite names another join inbox")
        }
        guard
            let groupID = context.keys.openReference(
                invite.payload.groupReference, tag: invite.tag, issuer: invite.issuer.inboxID),
            groupID == context.groupID
        else {
            return .reject(.genericFailure, reason: "the invite was not made by an admin of this group")
        }
        // 3. Expired.
        if let expiresAt = invite.expiresAt, expiresAt <= context.now {
            return .reject(.genericFailure, reason: "the invite expired")
        }
        if !invite.payload.invitee.isEmpty {
            return decideInvitation(context, invite: invite, request: request, groupID: groupID)
        }
        if request.decline { return .reject(.genericFailure, reason: "only an invitation can be declined") }
        // 5 before 4 where it must: without the group, revocation is unknowable.
        guard let group = context.group else {
            return .reject(.conversationNotFound, reason: "the group is not known here")
        }
        let state = group.state
        if group.status == .deleted || state.deleted {
            return Self.answer(to: .deleted, groupID: groupID, tag: invite.tag, maxUses: 0)
        }
        guard group.status == .active, let myRole = state.role(of: context.me), myRole >= .admin else {
            return .notForThisClient(reason: "this client is not an admin of the group")
        }
        let joiner = context.sender
        let inviteID = inviteID(of: request.invite)
        let maxUses: UInt32 = invite.payload.singleUse ? 1 : invite.payload.maxUses
        let admission = JoinRequestDecision.Admission(
            groupID: groupID, joiner: joiner, role: .member, tag: invite.tag, inviteID: inviteID, maxUses: maxUses,
            requestID: context.requestID)
        // The group's own admission rules (tag, rotation, uses, bans): the
        // ones every member applies to the admission commit.
        let ruling = GroupRules.checkAdmission(admission.wire, of: joiner.inboxID, against: state)
        func answer(_ rejection: GroupRejection) -> JoinRequestDecision {
            Self.answer(to: rejection, groupID: groupID, tag: invite.tag, maxUses: maxUses)
        }
        // 4. Revoked: a rotated tag, an issuer who is no longer an admin,
        // or an admin who left holding the seed.
        if case .failure(.inviteRevoked) = ruling { return answer(.inviteRevoked) }
        guard let issuerRole = state.role(of: invite.issuer.inboxID), issuerRole >= .admin else {
            return .reject(.inviteRevoked, reason: "whoever issued the invite is no longer an admin")
        }
        if case .failure(let rejection) = ruling, rejection == .inviteRotationPending || rejection == .invitesNotSetUp {
            return answer(rejection)
        }
        // 5. Deleted or exploded.
        if state.exploded { return answer(.exploded) }
        if let member = state.members[joiner.inboxID], member.identity.hasSameKeys(as: joiner) {
            return .alreadyMember(groupID: groupID, tag: invite.tag)
        }
        if let waiting = state.pending[joiner.inboxID], waiting.identity.hasSameKeys(as: joiner) {
            return .awaitingApproval(groupID: groupID, tag: invite.tag)
        }
        // 6. Used up, 7. banned (and anything else the rules refuse).
        if case .failure(let rejection) = ruling { return answer(rejection) }
        // 8. Admit (or queue for approval), with the invite's role, or the
        // link's, but never above the admitting admin's.
        let link = state.groupLink.flatMap { $0.tag == invite.tag ? $0 : nil }
        let granted = link?.role ?? GroupRole(wire: invite.payload.role) ?? .member
        let role = min(max(granted, .observer), myRole, issuerRole)
        let asked: GroupAdmission = link?.admission ?? (invite.payload.requiresApproval ? .approval : .auto)
        var admit = JoinRequestDecision.Admission(
            groupID: groupID, joiner: joiner, role: role, tag: invite.tag, inviteID: inviteID,
            maxUses: maxUses, requestID: context.requestID)
        admit.approval = GroupAdmission.effective(state.admission, asked) == .approval
        return .admit(admit)
    }

    /// A request the group admitted, that this client never recorded as
    /// answered, whose joiner this client's own commit added: the handling
    /// was cut off after the commit. The admission again, marked
    /// `committed`, so the handler sends the answer without a second
    /// commit. Nil for anything else (another admin's admission is that
    /// admin's to answer).
    static func unfinishedAdmission(_ context: Context) -> JoinRequestDecision? {
        guard let request = context.request, request.requestID == context.requestID,
            let state = context.group?.state,
            let invite = try? Invite.verify(request.invite, now: nil)
        else { return nil }
        let joiner = context.sender
        let role: GroupRole
        let approval: Bool
        if let member = state.members[joiner.inboxID], member.identity.hasSameKeys(as: joiner),
            member.addedBy == context.me
        {
            (role, approval) = (member.role, false)
        } else if let waiting = state.pending[joiner.inboxID], waiting.identity.hasSameKeys(as: joiner),
            waiting.addedBy == context.me
        {
            (role, approval) = (waiting.role, true)
        } else {
            return nil
        }
        var admit = JoinRequestDecision.Admission(
            groupID: context.groupID, joiner: joiner, role: role, tag: invite.tag,
            inviteID: inviteID(of: request.invite), maxUses: invite.payload.singleUse ? 1 : invite.payload.maxUses,
            requestID: context.requestID)
        admit.approval = approval
        admit.invitation = !invite.payload.invitee.isEmpty
        admit.committed = true
        return .admit(admit)
    }

    /// A personal invitation (`rally group add`) is judged by the group's
    /// list of invitees, not by its invite tag: only the invitee may use
    /// it, and only while the invitation stands (else
    /// `invitation_removed`); it admits without approval, as the admin who
    /// invited chose.
    static func decideInvitation(
        _ context: Context, invite: Invite, request: WireJoinRequest, groupID: String
    ) -> JoinRequestDecision {
        let joiner = context.sender
        guard invite.payload.invitee == joiner.inboxID.rawValue else {
            return .reject(.genericFailure, reason: "this invitation is for someone else")
        }
        guard let group = context.group else {
            return .reject(.conversationNotFound, reason: "the group is not known here")
        }
        let state = group.state
        if group.status == .deleted || state.deleted {
            return answer(to: .deleted, groupID: groupID, tag: invite.tag, maxUses: 1)
        }
        guard group.status == .active, let myRole = state.role(of: context.me), myRole >= .admin else {
            return .notForThisClient(reason: "this client is not an admin of the group")
        }
        if state.exploded { return answer(to: .exploded, groupID: groupID, tag: invite.tag, maxUses: 1) }
        let invitee = state.invited[joiner.inboxID].flatMap { $0.identity.hasSameKeys(as: joiner) ? $0 : nil }
        if request.decline { return invitee == nil ? .duplicate : .declineInvitation(groupID: groupID) }
        if let member = state.members[joiner.inboxID], member.identity.hasSameKeys(as: joiner) {
            return .alreadyMember(groupID: groupID, tag: invite.tag)
        }
        guard let invitee else { return .reject(.invitationRemoved, reason: "the invitation was withdrawn") }
        var admit = JoinRequestDecision.Admission(
            groupID: groupID, joiner: joiner, role: min(invitee.role, myRole), tag: invite.tag,
            inviteID: inviteID(of: request.invite), maxUses: 1, requestID: context.requestID)
        admit.invitation = true
        return .admit(admit)
    }

    /// The answer a joiner gets when the group's admission rules refuse
    /// its admission: when deciding, and when the rules refuse the
    /// admission commit itself (a race inside one epoch).
    public static func answer(
        to rejection: GroupRejection, groupID: String, tag: Data, maxUses: UInt32
    ) -> JoinRequestDecision {
        switch rejection {
        case .joinRequestAlreadyAdmitted: .duplicate
        case .alreadyMember: .alreadyMember(groupID: groupID, tag: tag)
        case .alreadyPending: .awaitingApproval(groupID: groupID, tag: tag)
        case .inviteRevoked, .invalidInviteTag: .reject(.inviteRevoked, reason: "the invite was revoked")
        case .inviteRotationPending, .invitesNotSetUp: .reject(.inviteRevoked, reason: adminLeftReason)
        case .exploded: .reject(.conversationExpired, reason: "the group was exploded")
        case .deleted: .reject(.conversationNotFound, reason: "the group was deleted")
        case .inviteUsedUp:
            .reject(
                .singleUseConsumed,
                reason: maxUses == 1 ? "the single-use invite was used" : "the invite's \(maxUses) uses are used up")
        case .banned: .reject(.genericFailure, reason: "not allowed to join")
        default: .reject(.genericFailure, reason: rejection.description)
        }
    }
}

/// What an admin's client did with one join request, kept so a request is
/// handled once, ever.
public enum JoinRequestOutcome: String, Sendable, Codable {
    case admitted, alreadyMember, rejected, blocked, ignored
    /// Put in (or still in) the approval queue.
    case pending
    /// An invitee turned its invitation down.
    case declined
}
