public import Foundation
public import RallyCrypto
public import RallyWire

/// `rally.dev/group_invitation:1.0`: an admin's personal invitation.
public struct GroupInvitationCodec: ContentCodec {
    public static let contentType = ContentTypeID(
        authority: "rally.dev", type: "group_invitation", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    public static let maxBodyBytes = InviteSlug.maxInflatedBytes + 64

    public init() {}

    public func encode(_ value: WireGroupInvitation) throws(ContentError) -> WireEncodedContent {
        NomineeContent.encode(FrameCodec.encode(value), type: contentType, fallback: fallback(for: value))
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> WireGroupInvitation {
        guard content.content.count <= Self.maxBodyBytes else {
            throw .tooLarge(size: content.content.count, limit: Self.maxBodyBytes)
        }
        return try ContentError.decoding(contentType) { () throws(FrameDecodingError) in
            try FrameCodec.decode(WireGroupInvitation.self, from: content.content, limit: Self.maxBodyBytes)
        }
    }

    public func fallback(for value: WireGroupInvitation) -> String? {
        let name =
            (try? FrameCodec.decode(
                WireInvitePayload.self, from: value.invite.payload, limit: InviteSlug.maxInflatedBytes))?.name ?? ""
        return "📨 Invitation to join \"\(name)\": `rally group accept` or `rally group decline`"
    }
    public func shouldPush(_ value: WireGroupInvitation) -> Bool { true }
    public func summary(of value: WireGroupInvitation) -> String { fallback(for: value) ?? "" }
}

/// A personal invitation this identity received, and what became of it.
public struct ReceivedInvitation: Sendable, Equatable {
    public enum Answer: Sendable, Equatable {
        case open
        /// Accepted: the join as it stands (joined, failed with
        /// `invitation_removed` or `conversation_not_found`, …).
        case accepted(JoinAttempt)
        case declined
    }

    /// The invitation message's id.
    public let id: String
    public let invite: Invite
    public let receivedAt: Date
    public let answer: Answer

    public var groupName: String { invite.payload.name }
    public var role: GroupRole { GroupRole(wire: invite.payload.role) ?? .member }
    public var invitedBy: PublicIdentity { invite.issuer }
}

/// Invitations a person accepts (the seed's section 2): an admin invites
/// (`rally group add`), the invitee is `invited` in the group state until it
/// accepts, which joins it through the group's invite identity like any
/// join request, or declines. Reached as ``RallyClient/groupInvitations``.
public struct GroupInvitations: Sendable {
    let desk: InviterDesk
    let joins: JoinService
    let messages: DirectMessageService

    private var context: ClientContext { desk.context }

    /// Invites people (admin): one commit each records them as invited,
    /// then each gets a personal invitation by direct message.
    public func invite(
        _ inboxes: [InboxID], role: GroupRole = .member, to reference: String
    ) async throws(RallyClientError) -> GroupRecord {
        let (record, keys) = try await desk.readyToInvite(reference, granting: role)
        let groupID = record.groupID
        let committer = desk.committer
        for inbox in inboxes {
            let invitee = try await messages.keys.lookUp(inbox)
            try await committer.commit(groupID) { state throws(RallyClientError) in
                var commit = committer.newCommit(on: state)
                commit.inviteMember.member = invitee.wireBundle
                commit.inviteMember.role = role.wire
                return commit
            }
            let current = try desk.log.group(groupID)
            var payload = desk.payload(tag: current.state.inviteTag, record: current, keys: keys)
            payload.invitee = inbox.rawValue
            payload.name = current.state.profile.name
            payload.description_p = current.state.profile.description
            payload.role = role.wire
            payload.singleUse = true
            payload.maxUses = 1
            payload.createdAtMs = ClientClock.millis(context.clock.now())
            var invitation = WireGroupInvitation()
            invitation.invite = Invite.sign(payload, by: context.identity)
            _ = try await messages.send(
                invitation, codec: GroupInvitationCodec(), to: inbox, messageID: nil, keepCopy: false)
        }
        return try desk.log.group(groupID)
    }

    /// Withdraws an invitation (admin): accepting it afterwards is
    /// answered `invitation_removed`.
    public func withdraw(_ inbox: InboxID, in reference: String) async throws(RallyClientError) {
        try await desk.committer.withdrawInvitation(of: inbox, in: desk.log.group(reference).groupID)
    }

    /// The invitations this identity received, newest first (after
    /// reading the inbox, which the caller does).
    public func received() throws(RallyClientError) -> [ReceivedInvitation] {
        let store = context.store
        let me = context.identity.inboxID
        let (stored, attempts) = try context.stored { () throws(LocalStoreError) in
            (
                try store.messages(contentType: GroupInvitationCodec.contentType.description),
                try store.joinAttempts()
            )
        }
        return stored.reversed().compactMap { message -> ReceivedInvitation? in
            guard !message.outgoing, let content = try? WireEncodedContent(serializedBytes: message.encodedContent),
                let body = context.codecs.decode(content).value as? WireGroupInvitation,
                let invite = try? Invite.verify(body.invite, now: nil), invite.payload.invitee == me.rawValue,
                invite.issuer.inboxID == message.sender
            else { return nil }
            let slug = InviteSlug.encode(invite.signed)
            let answer: ReceivedInvitation.Answer
            if let attempt = attempts.first(where: { $0.slug == slug }) {
                answer =
                    attempt.phase == .cancelled && attempt.reason == JoinService.declinedReason
                    ? .declined : .accepted(attempt)
            } else {
                answer = .open
            }
            return ReceivedInvitation(id: message.id, invite: invite, receivedAt: message.receivedAt, answer: answer)
        }
    }

    /// The invitation `reference` names: its id (or a prefix), or the
    /// group's name; an open one wins over answered ones.
    public func invitation(_ reference: String) throws(RallyClientError) -> ReceivedInvitation {
        let all = try received()
        let lowered = reference.lowercased()
        let matches = all.filter { $0.id.hasPrefix(lowered) || $0.groupName == reference }
        let open = matches.filter { $0.answer == .open }
        guard let found = open.first ?? matches.first else { throw .invite(.noInvitation(reference)) }
        return found
    }

    /// Accepts an invitation: a join request through the group's invite
    /// identity. Follow it with ``RallyClient/waitForJoin(requestID:timeout:onChange:)``:
    /// it ends joined, or failed with `invitation_removed` (withdrawn
    /// meanwhile) or `conversation_not_found` (the group is gone).
    public func accept(_ reference: String) async throws(RallyClientError) -> JoinAttempt {
        let invitation = try invitation(reference)
        return try await joins.start(InviteSlug.encode(invitation.invite.signed), now: context.clock.now())
    }

    /// Declines an invitation: an admin's client withdraws it for the
    /// group (`declined`).
    public func decline(_ reference: String) async throws(RallyClientError) {
        let invitation = try invitation(reference)
        try await joins.decline(invitation.invite, now: context.clock.now())
    }
}
