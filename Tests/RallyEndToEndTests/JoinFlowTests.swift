import Crypto
import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

/// An owner with a group and an invite, on a real relay.
struct InviteWorld {
    let world: GroupWorld
    let owner: RallyClient
    let groupID: String

    static func start(options: InviteOptions = InviteOptions()) async throws -> (InviteWorld, CreatedInvite) {
        let world = try await GroupWorld.start()
        let owner = try await world.user("olivia")
        let group = try await owner.createGroup(name: "Picnic")
        let invite = try await owner.createInvite(in: group.groupID, options: options)
        return (InviteWorld(world: world, owner: owner, groupID: group.groupID), invite)
    }

    func user(_ name: String) async throws -> RallyClient { try await world.user(name) }
}

/// Sends a join request and returns the attempt.
func requestJoin(_ client: RallyClient, _ link: String, now: Date = Date()) async throws -> JoinAttempt {
    let attempt = try await client.startJoin(link, now: now)
    #expect(attempt.phase == .joining)
    return attempt
}

/// Reads the joiner's inbox and returns its attempt as it now stands.
func joinState(_ client: RallyClient, _ attempt: JoinAttempt) async throws -> JoinAttempt {
    _ = try await client.syncInbox()
    return try await client.joinAttempt(attempt.requestID)
}

func joinErrors(in client: RallyClient) throws -> [InviteJoinError] {
    try client.store.messages(conversation: nil).compactMap { message in
        guard message.contentType == InviteJoinErrorCodec.contentType.description,
            let content = try? WireEncodedContent(serializedBytes: message.encodedContent)
        else { return nil }
        return CodecRegistry.standard.decode(content).value as? InviteJoinError
    }
}

func decisions(_ reports: [JoinRequestReport]) -> [JoinRequestDecision?] { reports.map(\.decision) }

@Suite("Joining by invite through a real relay", .timeLimit(.minutes(2)))
struct JoinFlowTests {
    @Test("A valid invite admits the joiner; the welcome finishes its join; joining again ends as joined (existing)")
    func admitAndRejoin() async throws {
        let (w, invite) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        #expect(attempt.invite.name == "Picnic")

        let reports = try await w.owner.processJoinRequests()
        #expect(reports.count == 1)
        guard case .admit(let admission)? = reports.first?.decision else {
            Issue.record("expected an admission, got \(reports)")
            return
        }
        #expect(admission.joiner.inboxID == bob.inboxID)
        #expect(admission.role == .member)

        let joined = try await joinState(bob, attempt)
        #expect(joined.phase == .joined)
        #expect(joined.groupID == w.groupID)
        #expect(joined.existing == false)
        #expect(try await bob.group(w.groupID).state.role(of: bob.inboxID) == .member)
        _ = try await w.owner.sendGroupText("welcome bob", to: w.groupID)
        #expect(try await bob.syncGroup(w.groupID).messages.map(\.displayText) == ["welcome bob"])

        // The web link of the same invite, once more: already a member.
        let again = try await requestJoin(bob, invite.webLink)
        #expect(again.requestID != attempt.requestID)
        let second = try await w.owner.processJoinRequests()
        #expect(decisions(second) == [.alreadyMember(groupID: w.groupID, tag: invite.invite.tag)])
        let existing = try await joinState(bob, again)
        #expect(existing.phase == .joined)
        #expect(existing.existing)
        #expect(try joinErrors(in: bob).isEmpty)
        await w.world.stop([w.owner, bob])
    }

    @Test("A stored welcome keeps the group's name, not its keys or state, on the joiner's device and the admin's")
    func storedWelcomesKeepNoKeys() async throws {
        let (w, invite) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        _ = try await w.owner.processJoinRequests()
        #expect(try await joinState(bob, attempt).phase == .joined)

        for client in [bob, w.owner] {
            let welcomes = try client.store.messages(conversation: nil).filter {
                $0.contentType == GroupWelcomeCodec.contentType.description
            }
            #expect(welcomes.count == 1)
            let message = try #require(welcomes.first)
            #expect(message.displayText.contains("\"Picnic\""))
            let content = try WireEncodedContent(serializedBytes: message.encodedContent)
            let kept = try #require(CodecRegistry.standard.decode(content).value as? WireGroupWelcome)
            #expect(kept.groupID == w.groupID)
            #expect(kept.epochKey.isEmpty && kept.admissionCommitKey.isEmpty && kept.topicAccessSecret.isEmpty)
            #expect(kept.inviteSeed.isEmpty && kept.epochLink.isEmpty && kept.topicID.isEmpty)
            // Of the state, the name and the welcome message; no member.
            let snapshot = try WireGroupSnapshot(serializedBytes: kept.snapshot)
            #expect(snapshot.profile.name == "Picnic" && snapshot.members.isEmpty && snapshot.transcript.isEmpty)
            #expect(GroupWelcomeCodec().summary(of: kept) == message.displayText)
        }
        // The keys are where keys live.
        let group = try await bob.group(w.groupID)
        #expect(try bob.store.epochKey(group: w.groupID, epoch: group.state.epoch) != nil)
        await w.world.stop([w.owner, bob])
    }

    @Test("An invite that fails local validation sends nothing")
    func invalidInviteSendsNothing() async throws {
        let (w, invite) = try await InviteWorld.start(options: InviteOptions(expiresIn: 60))
        let bob = try await w.user("bob")
        await #expect(throws: RallyClientError.self) {
            _ = try await bob.startJoin(invite.slug, now: Date().addingTimeInterval(120))
        }
        var flipped = Array(invite.slug)
        flipped[flipped.count / 2] = flipped[flipped.count / 2] == "A" ? "B" : "A"
        do {
            _ = try await bob.startJoin(String(flipped))
            Issue.record("a damaged slug was accepted")
        } catch .invite(.invalidInvite) {
        }
        #expect(try await bob.joinAttempts().isEmpty)
        #expect(try await w.owner.processJoinRequests().isEmpty)
        await w.world.stop([w.owner, bob])
    }

    @Test("Expired at the inviter: generic_failure reaches the joiner")
    func expiredAtInviter() async throws {
        let world = try await GroupWorld.start()
        let owner = try await world.user("olivia")
        let groupID = try await owner.createGroup(name: "Picnic").groupID
        let hourAgo = Date().addingTimeInterval(-3600)
        let invite = try await owner.createInvite(in: groupID, options: InviteOptions(expiresIn: 60), now: hourAgo)
        let bob = try await world.user("bob")
        // The joiner's clock is an hour behind: it still thinks the invite valid.
        let attempt = try await requestJoin(bob, invite.slug, now: hourAgo.addingTimeInterval(1))
        let reports = try await owner.processJoinRequests()
        #expect(decisions(reports) == [.reject(.genericFailure, reason: "the invite expired")])
        #expect(reports.first?.errorSent == true)
        let failed = try await joinState(bob, attempt)
        #expect(failed.phase == .failed)
        #expect(failed.errorType == .genericFailure)
        #expect(failed.userMessage == "Failed to join conversation. Ask the person who invited you for a new invite.")
        await world.stop([owner, bob])
    }

    @Test("Revoked invite: invite_revoked; a new invite still admits")
    func revoked() async throws {
        let (w, invite) = try await InviteWorld.start()
        try await w.owner.revokeInvites(in: w.groupID)
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        let reports = try await w.owner.processJoinRequests()
        #expect(decisions(reports) == [.reject(.inviteRevoked, reason: "the invite was revoked")])
        let failed = try await joinState(bob, attempt)
        #expect(failed.phase == .failed)
        #expect(failed.errorType == .inviteRevoked)

        let fresh = try await w.owner.createInvite(in: w.groupID)
        #expect(fresh.invite.tag != invite.invite.tag)
        let retry = try await requestJoin(bob, fresh.appLink)
        _ = try await w.owner.processJoinRequests()
        #expect(try await joinState(bob, retry).phase == .joined)
        await w.world.stop([w.owner, bob])
    }

    @Test("A replayed old join error does not end a later request made with the same invite")
    func replayedErrorIsIgnored() async throws {
        let (w, invite) = try await InviteWorld.start()
        try await w.owner.revokeInvites(in: w.groupID)
        let bob = try await w.user("bob")
        let first = try await requestJoin(bob, invite.appLink)
        _ = try await w.owner.processJoinRequests()
        #expect(try await joinState(bob, first).phase == .failed)
        let oldAnswer = try #require(
            try bob.store.messages(conversation: nil).first {
                $0.contentType == InviteJoinErrorCodec.contentType.description
            })
        // Bob tries again with the same invite: a new request.
        let second = try await requestJoin(bob, invite.appLink)
        #expect(second.requestID != first.requestID)
        // The old answer, delivered again (as a relay could), answers nothing now.
        #expect(bob.joins.answer(in: oldAnswer) == nil)
        // The answer to the new request does.
        let renamed = StoredMessage(
            id: InviteJoinError.messageID(forRequest: try #require(Data(hexString: second.requestID))).hexString,
            conversation: oldAnswer.conversation, outgoing: false, sender: oldAnswer.sender,
            senderName: oldAnswer.senderName, sentAt: oldAnswer.sentAt, receivedAt: oldAnswer.receivedAt,
            topic: oldAnswer.topic, seq: oldAnswer.seq, contentType: oldAnswer.contentType,
            encodedContent: oldAnswer.encodedContent, displayText: oldAnswer.displayText,
            isKnownType: oldAnswer.isKnownType)
        #expect(bob.joins.answer(in: renamed) != nil)
        await w.world.stop([w.owner, bob])
    }

    @Test("Exploded group: conversation_expired reaches the joiner's state machine")
    func exploded() async throws {
        let (w, invite) = try await InviteWorld.start()
        try await w.owner.explodeGroup(w.groupID)
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        let reports = try await w.owner.processJoinRequests()
        #expect(decisions(reports) == [.reject(.conversationExpired, reason: "the group was exploded")])
        let failed = try await joinState(bob, attempt)
        #expect(failed.machine.state == .joinFailed(.rejected(.conversationExpired, reason: "the group was exploded")))
        #expect(
            failed.userMessage
                == "This conversation is no longer available. Ask the person who invited you for a new invite.")
        await w.world.stop([w.owner, bob])
    }

    @Test("A group no longer on the admin's device: conversation_not_found")
    func unknownGroup() async throws {
        let (w, invite) = try await InviteWorld.start()
        try await w.owner.forgetGroup(w.groupID)
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        let reports = try await w.owner.processJoinRequests()
        #expect(decisions(reports) == [.reject(.conversationNotFound, reason: "the group is not known here")])
        #expect(try await joinState(bob, attempt).errorType == .conversationNotFound)
        await w.world.stop([w.owner, bob])
    }

    @Test("Single-use invite used by a second person: single_use_consumed")
    func singleUseConsumed() async throws {
        let (w, invite) = try await InviteWorld.start(options: InviteOptions(singleUse: true))
        let bob = try await w.user("bob")
        let carol = try await w.user("carol")
        let bobJoin = try await requestJoin(bob, invite.appLink)
        _ = try await w.owner.processJoinRequests()
        let carolJoin = try await requestJoin(carol, invite.appLink)
        let reports = try await w.owner.processJoinRequests()
        #expect(decisions(reports) == [.reject(.singleUseConsumed, reason: "the single-use invite was used")])
        #expect(try await joinState(bob, bobJoin).phase == .joined)
        let failed = try await joinState(carol, carolJoin)
        #expect(failed.errorType == .singleUseConsumed)
        #expect(
            failed.userMessage
                == "This invite was already used by someone else. Ask the person who invited you for a new invite.")
        #expect(try await w.owner.group(w.groupID).state.members.count == 2)
        await w.world.stop([w.owner, bob, carol])
    }

    @Test("A banned inbox is refused with generic_failure")
    func banned() async throws {
        let (w, invite) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        _ = try await w.owner.addMember(bob.inboxID, to: w.groupID)
        _ = try await w.owner.removeMember(bob.inboxID, from: w.groupID, ban: true)
        let attempt = try await requestJoin(bob, invite.appLink)
        let reports = try await w.owner.processJoinRequests()
        #expect(decisions(reports) == [.reject(.genericFailure, reason: "not allowed to join")])
        #expect(try await joinState(bob, attempt).errorType == .genericFailure)
        await w.world.stop([w.owner, bob])
    }

    @Test("A forged invite is refused, blocks nobody, and its victim still joins with a genuine invite")
    func forgedInviteBlocksNobody() async throws {
        let (w, invite) = try await InviteWorld.start()
        let mallory = try await w.user("mallory")
        let victim = try await w.user("victor")
        // Mallory signs her own invite aimed at the group's real join
        // inbox, with a group reference she made up, and hands it to Victor.
        var payload = invite.invite.payload
        payload.issuer = mallory.identity.publicIdentity.wireBundle
        payload.groupReference = Data(repeating: 7, count: 60)
        payload.role = GroupRole.admin.wire
        let forged = InviteSlug.encode(Invite.sign(payload, by: mallory.identity))
        let attempt = try await requestJoin(victim, forged)
        let reports = try await w.owner.processJoinRequests()
        #expect(
            decisions(reports) == [
                .reject(.genericFailure, reason: "the invite was not made by an admin of this group")
            ])
        #expect(try w.owner.store.blockedJoinSenders(group: w.groupID).isEmpty)
        // Victor is told, instead of waiting forever.
        #expect(try await joinState(victim, attempt).errorType == .genericFailure)

        // A genuine invite admits him.
        let second = try await requestJoin(victim, invite.appLink)
        _ = try await w.owner.processJoinRequests()
        #expect(try await joinState(victim, second).phase == .joined)
        #expect(try await w.owner.group(w.groupID).state.members[victim.inboxID] != nil)
        await w.world.stop([w.owner, mallory, victim])
    }

    @Test("A sender at fault is blocked for one group only, and an admin can lift the block")
    func blocksArePerGroupAndLiftable() async throws {
        let (w, invite) = try await InviteWorld.start()
        let mallory = try await w.user("mallory")
        let other = try await w.owner.createGroup(name: "Other")
        let otherInvite = try await w.owner.createInvite(in: other.groupID)
        // A request whose id is not its message id: only its sender made it.
        var request = WireJoinRequest()
        request.invite = invite.invite.signed
        request.requestID = Data(repeating: 9, count: 16)
        _ = try await mallory.send(
            request, codec: JoinRequestCodec(), to: try InboxID(validating: invite.invite.payload.joinInboxID),
            keepCopy: false)
        let reports = try await w.owner.processJoinRequests()
        guard case .block? = reports.first?.decision else {
            Issue.record("expected a block, got \(reports)")
            return
        }
        #expect(try w.owner.store.blockedJoinSenders(group: w.groupID).map(\.inbox) == [mallory.inboxID.rawValue])
        #expect(try w.owner.store.blockedJoinSenders(group: other.groupID).isEmpty)
        // Blocked in one group, she still joins another.
        let elsewhere = try await requestJoin(mallory, otherInvite.appLink)
        _ = try await w.owner.processJoinRequests()
        #expect(try await joinState(mallory, elsewhere).phase == .joined)
        // Lifted, her genuine request to the first group is answered again.
        #expect(try await w.owner.unblockJoinSender(mallory.inboxID, in: w.groupID))
        let again = try await requestJoin(mallory, invite.appLink)
        _ = try await w.owner.processJoinRequests()
        #expect(try await joinState(mallory, again).phase == .joined)
        await w.world.stop([w.owner, mallory])
    }

    @Test("A joiner offline while the error is sent gets it on reconnect")
    func offlineJoinerGetsError() async throws {
        let (w, invite) = try await InviteWorld.start()
        try await w.owner.revokeInvites(in: w.groupID)
        let bobHome = w.world.homes.path("bob")
        var bob: RallyClient? = try await w.user("bob")
        let attempt = try await requestJoin(bob!, invite.appLink)
        await bob?.disconnect()
        bob = nil
        let reports = try await w.owner.processJoinRequests()
        #expect(reports.first?.errorSent == true)
        let back = try RallyClient.open(home: bobHome, relayURL: w.world.relay.url, logger: TestLogger.quiet)
        #expect(try await back.joinAttempt(attempt.requestID).phase == .joining)
        let failed = try await back.waitForJoin(requestID: attempt.requestID, timeout: .seconds(30))
        #expect(failed.phase == .failed)
        #expect(failed.errorType == .inviteRevoked)
        await w.world.stop([w.owner, back])
    }

    @Test("With no admin online, a wait with a timeout returns the join still under way")
    func waitTimesOut() async throws {
        let (w, invite) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        await w.owner.disconnect()
        let waited = try await bob.waitForJoin(requestID: attempt.requestID, timeout: .milliseconds(300))
        #expect(waited.phase == .joining)
        // The join goes on: the admin answers later, and the next wait ends it.
        _ = try await w.owner.processJoinRequests()
        #expect(try await bob.waitForJoin(requestID: attempt.requestID, timeout: .seconds(60)).phase == .joined)
        await w.world.stop([w.owner, bob])
    }

    @Test("Cancelled before the error arrives: the error is dropped")
    func cancelledBeforeError() async throws {
        let (w, invite) = try await InviteWorld.start()
        try await w.owner.explodeGroup(w.groupID)
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        #expect(try await bob.cancelJoin(attempt.requestID).phase == .cancelled)
        _ = try await w.owner.processJoinRequests()
        let after = try await joinState(bob, attempt)
        #expect(after.phase == .cancelled)
        // The error did arrive; the cancelled join ignored it.
        #expect(try joinErrors(in: bob).map(\.errorType) == [.conversationExpired])
        await w.world.stop([w.owner, bob])
    }

    @Test("Admitted after cancelling: the joiner's client leaves the group; its join stays cancelled")
    func admittedAfterCancel() async throws {
        let (w, invite) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        _ = try await bob.cancelJoin(attempt.requestID)
        guard case .admit? = try await w.owner.processJoinRequests().first?.decision else {
            Issue.record("expected an admission")
            return
        }
        #expect(try await joinState(bob, attempt).phase == .cancelled)
        #expect(try await bob.group(w.groupID).status == .left)
        _ = try await w.owner.syncGroup(w.groupID)
        let state = try await w.owner.group(w.groupID).state
        #expect(state.members[bob.inboxID] == nil)
        #expect(state.needsRekey)
        await w.world.stop([w.owner, bob])
    }

    @Test("Answers from anyone but the invite's join inbox are dropped; a welcome without proof opens nothing")
    func answersFromOthersDropped() async throws {
        let (w, invite) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        let mallory = try await w.user("mallory")
        let attempt = try await requestJoin(bob, invite.appLink)
        let spoof = InviteJoinError(
            errorType: .conversationExpired, inviteTag: invite.invite.tagText, timestamp: Date())
        _ = try await mallory.send(spoof, codec: InviteJoinErrorCodec(), to: bob.inboxID)
        // Mallory's own group, dressed up as the answer to Bob's invite.
        let decoy = try await mallory.createGroup(name: "Picnic")
        _ = try await mallory.addMember(bob.inboxID, to: decoy.groupID)
        var welcome = WireGroupWelcome()
        welcome.groupID = decoy.groupID
        welcome.topicID = decoy.topicID
        welcome.snapshot = FrameCodec.encode(try await mallory.group(decoy.groupID).state.snapshot)
        welcome.epochKey = Data(repeating: 1, count: 32)
        welcome.inviteTag = invite.invite.tagText
        welcome.inviteProof = Data(repeating: 2, count: 64)
        // Bob accepts that ordinary add; his device then forgets the group.
        _ = try await bob.syncInbox()
        try bob.store.forgetGroup(decoy.groupID)
        _ = try await mallory.send(welcome, codec: GroupWelcomeCodec(), to: bob.inboxID)
        let still = try await joinState(bob, attempt)
        #expect(still.phase == .joining)
        #expect(try bob.store.group(decoy.groupID) == nil)
        _ = try await w.owner.processJoinRequests()
        #expect(try await joinState(bob, attempt).groupID == w.groupID)
        await w.world.stop([w.owner, bob, mallory])
    }

    @Test("A join request delivered twice produces one member; a refused one produces one error")
    func duplicateRequests() async throws {
        let (w, invite) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        let inviteInbox = try await bob.lookUp(attempt.invite.inviterInbox)
        // Replay the request's exact bytes under another idempotency key,
        // as a second delivery would look.
        try await replay(from: bob, to: inviteInbox)
        let reports = try await w.owner.processJoinRequests()
        #expect(reports.count == 2)
        #expect(reports.compactMap(\.decision).filter { if case .admit = $0 { true } else { false } }.count == 1)
        #expect(reports.last?.decision == .duplicate)
        #expect(try await w.owner.group(w.groupID).state.members.count == 2)

        try await w.owner.revokeInvites(in: w.groupID)
        let carol = try await w.user("carol")
        _ = try await requestJoin(carol, invite.appLink)
        try await replay(from: carol, to: inviteInbox)
        let refused = try await w.owner.processJoinRequests()
        #expect(refused.filter(\.errorSent).count == 1)
        _ = try await carol.syncInbox()
        #expect(try joinErrors(in: carol).count == 1)
        await w.world.stop([w.owner, bob, carol])
    }

    @Test("Two admins online at once admit a single-use invite once")
    func twoAdminsSingleUse() async throws {
        let (w, invite) = try await InviteWorld.start(options: InviteOptions(singleUse: true))
        let dave = try await w.user("dave")
        _ = try await w.owner.addMember(dave.inboxID, role: .admin, to: w.groupID)
        _ = try await catchUp(dave, w.groupID)
        #expect(try dave.store.inviteSeed(group: w.groupID) != nil)
        let bob = try await w.user("bob")
        let carol = try await w.user("carol")
        let bobJoin = try await requestJoin(bob, invite.appLink)
        let carolJoin = try await requestJoin(carol, invite.appLink)
        async let fromOwner = w.owner.processJoinRequests()
        async let fromDave = dave.processJoinRequests()
        let all = try await fromOwner + fromDave
        let admitted = all.compactMap(\.decision).filter { if case .admit = $0 { true } else { false } }
        #expect(admitted.count == 1)
        _ = try await w.owner.syncGroup(w.groupID)
        _ = try await dave.syncGroup(w.groupID)
        let ownerState = try await w.owner.group(w.groupID).state
        #expect(ownerState == (try await dave.group(w.groupID).state))
        #expect(ownerState.members.count == 3)
        let outcomes = [try await joinState(bob, bobJoin), try await joinState(carol, carolJoin)]
        #expect(outcomes.map(\.phase).sorted { $0.rawValue < $1.rawValue } == [.failed, .joined])
        #expect(outcomes.compactMap(\.errorType) == [.singleUseConsumed])
        #expect(try joinErrors(in: bob).count + (try joinErrors(in: carol).count) == 1)
        await w.world.stop([w.owner, dave, bob, carol])
    }

    @Test("With the creator offline, another admin answers")
    func otherAdminAnswers() async throws {
        let (w, invite) = try await InviteWorld.start()
        let dave = try await w.user("dave")
        _ = try await w.owner.addMember(dave.inboxID, role: .admin, to: w.groupID)
        _ = try await catchUp(dave, w.groupID)
        await w.owner.disconnect()
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        let reports = try await dave.processJoinRequests()
        guard case .admit? = reports.first?.decision else {
            Issue.record("expected an admission, got \(reports)")
            return
        }
        #expect(try await joinState(bob, attempt).phase == .joined)
        // The creator comes back and finds the request handled.
        #expect(decisions(try await w.owner.processJoinRequests()) == [.duplicate])
        await w.world.stop([w.owner, dave, bob])
    }
}

/// Publishes the newest join request in `client`'s outbox again, byte for
/// byte, under a fresh idempotency key.
private func replay(from client: RallyClient, to inviteInbox: PublicIdentity) async throws {
    let attempt = try #require(try await client.joinAttempts().first)
    var request = WireJoinRequest()
    request.invite = try InviteSlug.decode(attempt.slug)
    request.requestID = try #require(Data(hexString: attempt.requestID))
    var body = WireMessageBody()
    body.messageID = request.requestID
    body.sender = client.identity.publicIdentity.wireBundle
    body.recipient = inviteInbox.inboxID.rawValue
    body.sentAtMs = ClientClock.millis(Date())
    body.content = try JoinRequestCodec().encode(request)
    let sealed = try MessageSealing.seal(MessageSealing.sign(body, by: client.identity), to: inviteInbox)
    let connection = try await client.connected()
    _ = try await connection.publish(
        topic: try TopicName.inbox(inviteInbox.inboxID.rawValue), payload: sealed,
        idempotencyKey: MessageSealing.newMessageID(), shouldPush: true)
}

@Suite("Watching admins answer by themselves", .timeLimit(.minutes(3)))
struct WatchTests {
    @Test("An admin's watch answers join requests as they arrive")
    func watchAnswers() async throws {
        let (w, invite) = try await InviteWorld.start()
        let (reports, report) = AsyncStream<JoinRequestReport>.makeStream()
        let watcher = Task {
            // If the watch ends, so does the stream: the test fails instead
            // of waiting forever.
            defer { report.finish() }
            try await w.owner.watch { event in
                if case .joinRequest(let handled) = event { report.yield(handled) }
            }
        }
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        var iterator = reports.makeAsyncIterator()
        let handled = await iterator.next()
        guard case .admit? = handled?.decision else {
            Issue.record("expected an admission, got \(String(describing: handled))")
            watcher.cancel()
            return
        }
        let joined = try await bob.waitForJoin(requestID: attempt.requestID, timeout: .seconds(60))
        #expect(joined.phase == .joined)
        watcher.cancel()
        _ = await watcher.result
        await w.world.stop([w.owner, bob])
    }
}

@Suite("Admins made later answer too", .timeLimit(.minutes(3)))
struct PromotedAdminTests {
    @Test("A member promoted to admin receives the invite seed and admits joiners")
    func promotedAdminAnswers() async throws {
        let (w, invite) = try await InviteWorld.start()
        let dave = try await w.user("dave")
        _ = try await w.owner.addMember(dave.inboxID, to: w.groupID)
        _ = try await catchUp(dave, w.groupID)
        #expect(try dave.store.inviteSeed(group: w.groupID) == nil)
        _ = try await w.owner.changeRole(of: dave.inboxID, to: .admin, in: w.groupID)
        _ = try await dave.syncGroup(w.groupID)
        #expect(try dave.store.inviteSeed(group: w.groupID) != nil)
        // The owner is offline; the new admin answers, and can invite too.
        await w.owner.disconnect()
        let bob = try await w.user("bob")
        let attempt = try await requestJoin(bob, invite.appLink)
        guard case .admit? = try await dave.processJoinRequests().first?.decision else {
            Issue.record("the promoted admin did not admit")
            return
        }
        #expect(try await joinState(bob, attempt).phase == .joined)
        let own = try await dave.createInvite(in: w.groupID)
        #expect(own.invite.issuer.inboxID == dave.inboxID)
        await w.world.stop([w.owner, dave, bob])
    }
}

@Suite("A watching admin outlives its relay's restart", .timeLimit(.minutes(3)))
struct WatchRecoveryTests {
    @Test("The relay is killed and restarted between two joins; the same watch answers both")
    func watchSurvivesRelayRestart() async throws {
        let homes = TemporaryDirectory("rally-watch-restart")
        defer { homes.remove() }
        let data = homes.path("relay")
        var relay = try await RelayProcess.start(dataDirectory: data)
        let url = relay.url
        func user(_ name: String) async throws -> RallyClient {
            try await RallyClient.create(
                home: homes.path(name), relayURL: url, displayName: name, logger: TestLogger.quiet)
        }
        let owner = try await user("olivia")
        let groupID = try await owner.createGroup(name: "Picnic").groupID
        let invite = try await owner.createInvite(in: groupID)
        let (reports, report) = AsyncStream<JoinRequestReport>.makeStream()
        let watcher = Task {
            defer { report.finish() }
            try await owner.watch { event in
                if case .joinRequest(let handled) = event { report.yield(handled) }
            }
        }
        var handled = reports.makeAsyncIterator()
        let bob = try await user("bob")
        let bobJoin = try await requestJoin(bob, invite.appLink)
        guard case .admit? = await handled.next()?.decision else {
            Issue.record("the watch did not admit bob")
            watcher.cancel()
            return
        }
        #expect(try await joinState(bob, bobJoin).phase == .joined)
        await bob.disconnect()

        await relay.kill()
        relay = try await RelayProcess.start(dataDirectory: data, port: relay.port)
        let carol = try await user("carol")
        let carolJoin = try await requestJoin(carol, invite.appLink)
        let carolReport = await handled.next()
        guard case .admit? = carolReport?.decision else {
            Issue.record("after the restart the watch did not admit carol: \(String(describing: carolReport))")
            watcher.cancel()
            await relay.kill()
            return
        }
        #expect(try await joinState(carol, carolJoin).phase == .joined)
        watcher.cancel()
        _ = await watcher.result
        for client in [owner, carol] { await client.disconnect() }
        await relay.kill()
    }
}
