import Foundation
import RallyCrypto
import RallyTestSupport
import RallyViewModels
import RallyWire
import Testing

@testable import RallyCore

@Suite("JoinFlowViewModel against a real relay", .timeLimit(.minutes(2)))
@MainActor
struct JoinFlowViewModelTests {
    @Test("Joined: validating → joining → joined, with the messages a view shows")
    func joined() async throws {
        let (w, invite) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        let model = JoinFlowViewModel(client: bob, timeout: .seconds(30))
        #expect(model.userMessage == nil)
        await model.start(invite.appLink)
        #expect(model.state == .joining(model.attempt!.invite))
        #expect(model.userMessage == "Waiting for an admin of the group to answer")
        #expect(model.canCancel)
        #expect(!model.canRetryWithNewInvite)
        _ = try await w.owner.processJoinRequests()
        await model.waitForOutcome()
        #expect(model.state == .joined(groupID: w.groupID, existing: false))
        #expect(model.userMessage == "Joined")
        #expect(model.errorType == nil)
        #expect(!model.isWaiting)
        #expect(!model.canCancel)
        await w.world.stop([w.owner, bob])
    }

    @Test("Already a member: joined (existing)")
    func existing() async throws {
        let (w, invite) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        _ = try await w.owner.addMember(bob.inboxID, to: w.groupID)
        _ = try await bob.syncInbox()
        let model = JoinFlowViewModel(client: bob, timeout: .seconds(30))
        await model.start(invite.slug)
        _ = try await w.owner.processJoinRequests()
        await model.waitForOutcome()
        #expect(model.state == .joined(groupID: w.groupID, existing: true))
        #expect(model.userMessage == "You are already in this conversation")
        await w.world.stop([w.owner, bob])
    }

    @Test("Each refusal: error type and the seed's message with the guidance, then retry with a new invite")
    func refusalsThenRetry() async throws {
        let (w, invite) = try await InviteWorld.start(options: InviteOptions(singleUse: true))
        let bob = try await w.user("bob")
        let carol = try await w.user("carol")
        let first = JoinFlowViewModel(client: bob, timeout: .seconds(30))
        await first.start(invite.appLink)
        _ = try await w.owner.processJoinRequests()
        await first.waitForOutcome()

        let model = JoinFlowViewModel(client: carol, timeout: .seconds(30))
        await model.start(invite.appLink)
        _ = try await w.owner.processJoinRequests()
        await model.waitForOutcome()
        #expect(model.errorType == .singleUseConsumed)
        #expect(
            model.userMessage
                == "This invite was already used by someone else. Ask the person who invited you for a new invite.")
        #expect(model.canRetryWithNewInvite)
        #expect(!model.canCancel)

        try await w.owner.revokeInvites(in: w.groupID)
        let another = try await w.owner.createInvite(in: w.groupID)
        // The old invite again: revoked now.
        await model.retry(withNewInvite: invite.webLink)
        _ = try await w.owner.processJoinRequests()
        await model.waitForOutcome()
        #expect(model.errorType == .inviteRevoked)
        #expect(model.userMessage == "This invite is no longer valid. Ask the person who invited you for a new invite.")

        try await w.owner.explodeGroup(w.groupID)
        await model.retry(withNewInvite: another.appLink)
        _ = try await w.owner.processJoinRequests()
        await model.waitForOutcome()
        #expect(model.errorType == .conversationExpired)
        #expect(
            model.userMessage
                == "This conversation is no longer available. Ask the person who invited you for a new invite.")
        await w.world.stop([w.owner, bob, carol])
    }

    @Test("A new invite after a refusal joins")
    func retrySucceeds() async throws {
        let (w, invite) = try await InviteWorld.start()
        try await w.owner.revokeInvites(in: w.groupID)
        let bob = try await w.user("bob")
        let model = JoinFlowViewModel(client: bob, timeout: .seconds(30))
        await model.start(invite.appLink)
        _ = try await w.owner.processJoinRequests()
        await model.waitForOutcome()
        #expect(model.errorType == .inviteRevoked)
        let fresh = try await w.owner.createInvite(in: w.groupID)
        await model.retry(withNewInvite: fresh.appLink)
        #expect(model.isWaiting)
        _ = try await w.owner.processJoinRequests()
        await model.waitForOutcome()
        #expect(model.state == .joined(groupID: w.groupID, existing: false))
        await w.world.stop([w.owner, bob])
    }

    @Test("An invalid invite fails at once with its reason; nothing is sent")
    func invalidInvite() async throws {
        let (w, _) = try await InviteWorld.start()
        let bob = try await w.user("bob")
        let model = JoinFlowViewModel(client: bob, timeout: .seconds(30))
        await model.join("rally://join/AAAA")
        guard case .joinFailed(.invalidInvite) = model.state else {
            Issue.record("expected a local validation failure, got \(model.state)")
            return
        }
        #expect(model.userMessage?.isEmpty == false)
        #expect(model.attempt == nil)
        #expect(model.canRetryWithNewInvite)
        #expect(try await w.owner.processJoinRequests().isEmpty)
        await w.world.stop([w.owner, bob])
    }

    @Test("Cancelled while waiting: the later error is dropped")
    func cancel() async throws {
        let (w, invite) = try await InviteWorld.start()
        try await w.owner.explodeGroup(w.groupID)
        let bob = try await w.user("bob")
        let model = JoinFlowViewModel(client: bob, timeout: .seconds(30))
        await model.start(invite.appLink)
        await model.cancel()
        #expect(model.state == .cancelled)
        #expect(model.userMessage == "Join cancelled")
        _ = try await w.owner.processJoinRequests()
        await model.refresh()
        #expect(model.state == .cancelled)
        #expect(model.errorType == nil)
        await w.world.stop([w.owner, bob])
    }

    @Test("Offline while refused: refresh picks the error up")
    func refreshAfterOffline() async throws {
        let (w, invite) = try await InviteWorld.start()
        try await w.owner.revokeInvites(in: w.groupID)
        let bob = try await w.user("bob")
        let model = JoinFlowViewModel(client: bob, timeout: .seconds(30))
        await model.start(invite.appLink)
        await bob.disconnect()
        _ = try await w.owner.processJoinRequests()
        await model.refresh()
        #expect(model.errorType == .inviteRevoked)
        await w.world.stop([w.owner, bob])
    }
}
