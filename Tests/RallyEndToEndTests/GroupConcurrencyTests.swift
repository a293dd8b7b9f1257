import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import Testing

/// Lifecycle changes racing each other through a real relay: the relay
/// orders control entries (compare-and-set on the last one), the loser
/// rebuilds on the new state, and every member ends with the same group.
@Suite("Group lifecycle races through a real relay", .timeLimit(.minutes(3)))
struct GroupConcurrencyTests {
    /// Olive (owner) and Bob (admin) run "Hikers" with Ann and Cy.
    struct Club {
        let world: GroupWorld
        let olive: RallyClient
        let bob: RallyClient
        let ann: RallyClient
        let cy: RallyClient
        let groupID: String

        static func start() async throws -> Club {
            let world = try await GroupWorld.start()
            let olive = try await world.user("olive")
            let bob = try await world.user("bob")
            let ann = try await world.user("ann")
            let cy = try await world.user("cy")
            let groupID = try await olive.createGroup(name: "Hikers").groupID
            _ = try await olive.addMember(bob.inboxID, role: .admin, to: groupID)
            for member in [ann, cy] { _ = try await olive.addMember(member.inboxID, to: groupID) }
            for member in [bob, ann, cy] { try await catchUp(member, groupID) }
            return Club(world: world, olive: olive, bob: bob, ann: ann, cy: cy, groupID: groupID)
        }

        /// Every listed member caught up holds the same state.
        func converged(_ clients: [RallyClient]) async throws -> GroupState {
            for client in clients { try await catchUp(client, groupID) }
            var states: [GroupState] = []
            for client in clients { states.append(try await client.group(groupID).state) }
            #expect(states.allSatisfy { $0 == states[0] })
            return states[0]
        }

        func stop(_ others: [RallyClient] = []) async { await world.stop([olive, bob, ann, cy] + others) }
    }

    @Test("two admins change the same member's role at once: both changes apply in the relay's order, everyone agrees")
    func rolesAtOnce() async throws {
        let c = try await Club.start()
        let before = try await c.olive.group(c.groupID).state.epoch
        let (olive, bob, ann, groupID) = (c.olive, c.bob, c.ann, c.groupID)
        async let first = olive.changeRoles(of: [ann.inboxID], to: .moderator, in: groupID)
        async let second = bob.changeRoles(of: [ann.inboxID], to: .observer, in: groupID)
        _ = try await (first, second)
        let state = try await c.converged([c.olive, c.bob, c.ann, c.cy])
        #expect(state.epoch == before + 2)
        #expect([GroupRole.moderator, .observer].contains(state.role(of: ann.inboxID)))
        await c.stop()
    }

    @Test("a removal races an admission: both apply, the newcomer reads on past the removal, everyone agrees")
    func removalRacesAdmission() async throws {
        let c = try await Club.start()
        let invite = try await c.olive.createInvite(in: c.groupID)
        try await catchUp(c.bob, c.groupID)
        let dan = try await c.world.user("dan")
        let attempt = try await requestJoin(dan, invite.appLink)
        let (olive, bob, cy, groupID) = (c.olive, c.bob, c.cy, c.groupID)
        async let removed = olive.removeMembers([cy.inboxID], from: groupID)
        async let answered = bob.processJoinRequests()
        _ = try await (removed, answered)
        #expect(try await joinState(dan, attempt).phase == .joined)
        let state = try await c.converged([c.olive, c.bob, c.ann, dan])
        #expect(state.members[cy.inboxID] == nil && state.members[dan.inboxID] != nil)
        // The newcomer holds the current key: it reads what is sent now.
        _ = try await c.ann.sendGroupText("welcome, dan", to: c.groupID)
        #expect(try await dan.syncGroup(c.groupID).messages.map(\.displayText) == ["welcome, dan"])
        await c.stop([dan])
    }

    @Test("a leave races a message: the members who stay agree on the log, the leaver never gets a later key")
    func leaveRacesMessage() async throws {
        let c = try await Club.start()
        let (ann, cy, groupID) = (c.ann, c.cy, c.groupID)
        async let left: Void = ann.leaveGroup(groupID)
        async let sent = cy.sendGroupText("who is coming?", to: groupID)
        _ = try await (left, sent)
        _ = try await c.olive.sendGroupText("me", to: c.groupID)
        let state = try await c.converged([c.olive, c.bob, c.cy])
        #expect(state.members[ann.inboxID] == nil)
        var logs: [[String]] = []
        for client in [c.olive, c.bob, c.cy] {
            logs.append(try await client.groupMessages(in: c.groupID).map(\.displayText))
        }
        #expect(logs.allSatisfy { $0 == logs[0] } && logs[0].last == "me")
        // Ann left: whatever she read, "me" came under a key she never got.
        try await catchUp(c.ann, c.groupID)
        #expect(try await c.ann.groupMessages(in: c.groupID).map(\.displayText).contains("me") == false)
        await c.stop()
    }

    @Test("a batch that demotes two admins moves the invite identity: neither answers joins made afterwards")
    func batchDemotionCutsOutJoinProcessing() async throws {
        let c = try await Club.start()
        _ = try await c.olive.changeRoles(of: [c.ann.inboxID], to: .admin, in: c.groupID)
        let before = try await c.olive.createInvite(in: c.groupID)
        for client in [c.bob, c.ann] { try await catchUp(client, c.groupID) }
        _ = try await c.olive.changeRoles(of: [c.bob.inboxID, c.ann.inboxID], to: .member, in: c.groupID)
        let after = try await c.olive.createInvite(in: c.groupID)
        #expect(after.invite.payload.joinInboxID != before.invite.payload.joinInboxID)
        let dan = try await c.world.user("dan")
        let attempt = try await requestJoin(dan, after.appLink)
        for demoted in [c.bob, c.ann] {
            try await catchUp(demoted, c.groupID)
            let reports = try await demoted.processJoinRequests()
            #expect(reports.allSatisfy { $0.joiner != dan.inboxID })
        }
        #expect(try await joinState(dan, attempt).phase == .joining)
        _ = try await c.olive.processJoinRequests()
        #expect(try await joinState(dan, attempt).phase == .joined)
        await c.stop([dan])
    }

    @Test("a member offline through a batch of lifecycle commits catches up in one sync and holds the owner's state")
    func offlineMemberConverges() async throws {
        let c = try await Club.start()
        let dan = try await c.world.user("dan")
        // Cy stays away from here on.
        for round in 0..<6 {
            _ = try await c.olive.changeRoles(
                of: [c.ann.inboxID], to: round.isMultiple(of: 2) ? .moderator : .member, in: c.groupID)
            try await c.olive.setWelcomeMessage("round \(round)", in: c.groupID)
            try await c.olive.blockMembers([c.ann.inboxID], in: c.groupID, blocked: round.isMultiple(of: 2))
            _ = try await c.olive.setGroupPreferences(
                [.reactions: GroupPreference(enabled: !round.isMultiple(of: 2))], in: c.groupID)
        }
        _ = try await c.olive.groupLinks.create(in: c.groupID, role: .observer)
        try await c.olive.groupAdmission.setAdmission(.approval, in: c.groupID)
        _ = try await c.olive.groupInvitations.invite([dan.inboxID], to: c.groupID)
        _ = try await c.bob.syncGroup(c.groupID)
        _ = try await c.olive.removeMembers([c.bob.inboxID], from: c.groupID)
        _ = try await c.olive.sendGroupText("after all that", to: c.groupID)

        let report = try await c.cy.syncGroup(c.groupID)
        #expect(report.rejections.isEmpty)
        let owners = try await c.olive.group(c.groupID).state
        let cys = try await c.cy.group(c.groupID).state
        #expect(cys == owners)
        // Removing Bob, an admin, moved the invite identity: the link went
        // with it, for Cy as for everyone.
        #expect(cys.groupLink == nil && cys.retiredLinkTags.count == 1)
        #expect(cys.admission == .approval && cys.invited[dan.inboxID] != nil)
        #expect(try await c.cy.groupMessages(in: c.groupID).map(\.displayText) == ["after all that"])
        await c.stop([dan])
    }
}
