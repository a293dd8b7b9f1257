import Foundation
import RallyTestSupport
import Testing

@testable import RallyCore

/// Join requests answered in batches: every request waiting in the invite
/// inbox goes into one commit and one round of welcomes, with use limits
/// exact however the requests are batched and however many admins answer.
@Suite("Admissions in batches through a real relay", .timeLimit(.minutes(3)))
struct BatchAdmissionTests {
    static func joiners(_ w: InviteWorld, _ count: Int) async throws -> [RallyClient] {
        var joiners: [RallyClient] = []
        for index in 0..<count { joiners.append(try await w.user("joiner\(index)")) }
        return joiners
    }

    static func admitted(_ reports: [JoinRequestReport]) -> [JoinRequestDecision.Admission] {
        reports.compactMap { report in
            if case .admit(let admission)? = report.decision { admission } else { nil }
        }
    }

    @Test("requests that waited while the admin was away are admitted by one commit, and each joiner's welcome works")
    func backlogInOneCommit() async throws {
        let (w, invite) = try await InviteWorld.start()
        let joiners = try await Self.joiners(w, 10)
        var attempts: [JoinAttempt] = []
        for joiner in joiners { attempts.append(try await requestJoin(joiner, invite.appLink)) }
        let before = try await w.owner.group(w.groupID).state

        let reports = try await w.owner.processJoinRequests()
        #expect(Self.admitted(reports).count == joiners.count)
        let after = try await w.owner.group(w.groupID).state
        #expect(after.epoch == before.epoch + 1)
        #expect(after.members.count == 1 + joiners.count)
        #expect(Set(after.admittedJoinRequests.map(\.hexString)) == Set(attempts.map(\.requestID)))

        _ = try await w.owner.sendGroupText("welcome, all ten", to: w.groupID)
        for (joiner, attempt) in zip(joiners, attempts) {
            #expect(try await joinState(joiner, attempt).phase == .joined)
            let read = try await joiner.syncGroup(w.groupID)
            #expect(read.messages.map(\.displayText) == ["welcome, all ten"])
            #expect(try await joiner.group(w.groupID).state == after)
        }
        await w.world.stop([w.owner] + joiners)
    }

    @Test(
        "a single-use invite answered in a batch admits one joiner; each of the others is told single_use_consumed once"
    )
    func singleUseInABatch() async throws {
        let (w, invite) = try await InviteWorld.start(options: InviteOptions(singleUse: true))
        let joiners = try await Self.joiners(w, 6)
        var attempts: [JoinAttempt] = []
        for joiner in joiners { attempts.append(try await requestJoin(joiner, invite.appLink)) }

        let reports = try await w.owner.processJoinRequests()
        #expect(Self.admitted(reports).map(\.joiner.inboxID) == [joiners[0].inboxID])
        #expect(
            reports.dropFirst().map(\.decision)
                == Array(repeating: .reject(.singleUseConsumed, reason: "the single-use invite was used"), count: 5))
        #expect(try await w.owner.group(w.groupID).state.members.count == 2)
        #expect(try await joinState(joiners[0], attempts[0]).phase == .joined)
        for (joiner, attempt) in zip(joiners, attempts).dropFirst() {
            #expect(try await joinState(joiner, attempt).errorType == .singleUseConsumed)
            #expect(try joinErrors(in: joiner).count == 1)
        }
        await w.world.stop([w.owner] + joiners)
    }

    @Test("two admins answer the same requests at once: a four-use invite admits exactly four of nine, and both agree")
    func twoAdminsOneLimit() async throws {
        let (w, invite) = try await InviteWorld.start(options: InviteOptions(maxUses: 4))
        let dave = try await w.user("dave")
        _ = try await w.owner.addMember(dave.inboxID, role: .admin, to: w.groupID)
        _ = try await catchUp(dave, w.groupID)
        let joiners = try await Self.joiners(w, 9)
        var attempts: [JoinAttempt] = []
        for joiner in joiners { attempts.append(try await requestJoin(joiner, invite.appLink)) }

        async let fromOwner = w.owner.processJoinRequests()
        async let fromDave = dave.processJoinRequests()
        let all = try await fromOwner + fromDave
        #expect(Self.admitted(all).count == 4)
        _ = try await w.owner.syncGroup(w.groupID)
        _ = try await dave.syncGroup(w.groupID)
        let state = try await w.owner.group(w.groupID).state
        #expect(state == (try await dave.group(w.groupID).state))
        #expect(state.members.count == 2 + 4)
        var phases: [JoinAttempt.Phase] = []
        for (joiner, attempt) in zip(joiners, attempts) {
            let outcome = try await joinState(joiner, attempt)
            phases.append(outcome.phase)
            if outcome.phase == .failed { #expect(outcome.errorType == .singleUseConsumed) }
            #expect(try joinErrors(in: joiner).count == (outcome.phase == .failed ? 1 : 0))
        }
        #expect(phases.filter { $0 == .joined }.count == 4)
        #expect(phases.filter { $0 == .failed }.count == 5)
        await w.world.stop([w.owner, dave] + joiners)
    }

    @Test("joiners to a group that wants approval are queued by one commit, and each is told it waits")
    func approvalQueueInOneCommit() async throws {
        let (w, invite) = try await InviteWorld.start(options: InviteOptions(admission: .approval))
        let joiners = try await Self.joiners(w, 4)
        var attempts: [JoinAttempt] = []
        for joiner in joiners { attempts.append(try await requestJoin(joiner, invite.appLink)) }
        let before = try await w.owner.group(w.groupID).state

        let reports = try await w.owner.processJoinRequests()
        #expect(Self.admitted(reports).filter(\.approval).count == 4)
        let after = try await w.owner.group(w.groupID).state
        #expect(after.epoch == before.epoch + 1)
        #expect(Set(after.pending.keys) == Set(joiners.map(\.inboxID)))
        for (joiner, attempt) in zip(joiners, attempts) {
            #expect(try await joinState(joiner, attempt).phase == .awaitingApproval)
        }
        await w.world.stop([w.owner] + joiners)
    }
}
