import Foundation
import RallyCrypto
import RallyTestSupport
import Testing

@testable import RallyCore

@Suite(
    "Group lifecycle through a real relay: profile, batch roles and removals, block for all, welcome, leave",
    .timeLimit(.minutes(3)))
struct GroupLifecycleTests {
    static let png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 7, count: 100))

    /// Olive owns "Hikers"; Ann, Bob and Cy are members who caught up.
    struct Hikers {
        let world: GroupWorld
        let owner: RallyClient
        let members: [RallyClient]
        let groupID: String

        static func start() async throws -> Hikers {
            let world = try await GroupWorld.start()
            let owner = try await world.user("olive")
            let group = try await owner.createGroup(
                name: "Hikers", description: "Sunday walks", fullName: "The Sunday Hikers",
                image: GroupImage(sniffing: GroupLifecycleTests.png))
            var members: [RallyClient] = []
            for name in ["ann", "bob", "cy"] {
                let member = try await world.user(name)
                _ = try await owner.addMember(member.inboxID, to: group.groupID)
                members.append(member)
            }
            for member in members { try await catchUp(member, group.groupID) }
            return Hikers(world: world, owner: owner, members: members, groupID: group.groupID)
        }

        func stop() async { await world.stop([owner] + members) }
    }

    @Test("the profile (full name, description, image) reaches every member, and so does the owner's change")
    func profile() async throws {
        let h = try await Hikers.start()
        let ann = h.members[0]
        let seen = try await ann.group(h.groupID).state.profile
        #expect(seen.fullName == "The Sunday Hikers" && seen.description == "Sunday walks")
        #expect(seen.image?.data == Self.png && seen.image?.mediaType == "image/png")

        _ = try await h.owner.updateGroupProfile(h.groupID, name: "Hikers+", description: "Sunday and Wednesday walks")
        try await catchUp(ann, h.groupID)
        let changed = try await ann.group(h.groupID).state.profile
        #expect(changed.name == "Hikers+" && changed.description == "Sunday and Wednesday walks")
        #expect(changed.fullName == "The Sunday Hikers" && changed.image?.data == Self.png)

        // Only the owner changes it; a member is told which role it takes.
        await #expect(
            throws: RallyClientError.group(.commitRejected(.insufficientRole(needed: .owner, actual: .member)))
        ) {
            try await ann.updateGroupProfile(h.groupID, name: "Mine")
        }
        await h.stop()
    }

    @Test("roles in batch: one change gives several members a role; the role rule holds for each")
    func batchRoles() async throws {
        let h = try await Hikers.start()
        let (ann, bob, cy) = (h.members[0], h.members[1], h.members[2])
        let before = try await h.owner.group(h.groupID).state.epoch
        let record = try await h.owner.changeRoles(of: [ann.inboxID, bob.inboxID], to: .admin, in: h.groupID)
        #expect(record.state.epoch == before + 1)
        try await catchUp(cy, h.groupID)
        let state = try await cy.group(h.groupID).state
        #expect(state.role(of: ann.inboxID) == .admin && state.role(of: bob.inboxID) == .admin)

        // An admin cannot make an owner, and the whole batch is refused.
        try await catchUp(ann, h.groupID)
        await #expect(
            throws: RallyClientError.group(.commitRejected(.insufficientRole(needed: .owner, actual: .admin)))
        ) {
            try await ann.changeRoles(of: [cy.inboxID], to: .owner, in: h.groupID)
        }
        await h.stop()
    }

    @Test("remove in batch with messages: every member's device deletes the removed members' messages")
    func batchRemovalWithMessages() async throws {
        let h = try await Hikers.start()
        let (ann, bob, cy) = (h.members[0], h.members[1], h.members[2])
        _ = try await bob.sendGroupText("spam from bob", to: h.groupID)
        _ = try await cy.sendGroupText("spam from cy", to: h.groupID)
        _ = try await ann.sendGroupText("hello from ann", to: h.groupID)
        try await catchUp(ann, h.groupID)
        #expect(try await ann.groupMessages(in: h.groupID).map(\.displayText).count == 3)

        let record = try await h.owner.removeMembers(
            [bob.inboxID, cy.inboxID], from: h.groupID, ban: true, withMessages: true)
        #expect(record.state.members.count == 2 && record.state.banned == [bob.inboxID, cy.inboxID])
        try await catchUp(ann, h.groupID)
        #expect(try await ann.groupMessages(in: h.groupID).map(\.displayText) == ["hello from ann"])
        #expect(try await h.owner.groupMessages(in: h.groupID).map(\.displayText) == ["hello from ann"])
        // The removed members hold no key to what comes next.
        _ = try await ann.sendGroupText("after", to: h.groupID)
        try await catchUp(bob, h.groupID)
        #expect(try await bob.group(h.groupID).status == .removed)
        #expect(!(try await bob.groupMessages(in: h.groupID).map(\.displayText).contains("after")))
        await h.stop()
    }

    @Test(
        "block for all: a moderator blocks a member, every member is shown it as blocked by an admin, until unblocked")
    func blockForAll() async throws {
        let h = try await Hikers.start()
        let (ann, bob, cy) = (h.members[0], h.members[1], h.members[2])
        _ = try await h.owner.changeRole(of: ann.inboxID, to: .moderator, in: h.groupID)
        try await catchUp(ann, h.groupID)
        _ = try await bob.sendGroupText("rude words", to: h.groupID)
        try await ann.blockMembers([bob.inboxID], in: h.groupID)
        try await catchUp(cy, h.groupID)
        let shown = try await cy.groupMessages(in: h.groupID)
        #expect(shown.map(\.displayText) == [GroupService.blockedText])
        #expect(try await cy.group(h.groupID).state.blocked == [bob.inboxID])
        // A member cannot block; the refusal names the role needed.
        await #expect(
            throws: RallyClientError.group(.commitRejected(.insufficientRole(needed: .moderator, actual: .member)))
        ) {
            try await cy.blockMembers([bob.inboxID], in: h.groupID, blocked: false)
        }
        try await ann.blockMembers([bob.inboxID], in: h.groupID, blocked: false)
        try await catchUp(cy, h.groupID)
        #expect(try await cy.groupMessages(in: h.groupID).map(\.displayText) == ["rude words"])
        await h.stop()
    }

    @Test("the owner's welcome message is shown to each new member when they join")
    func welcomeMessage() async throws {
        let h = try await Hikers.start()
        try await h.owner.setWelcomeMessage("Boots on, phones off.", in: h.groupID)
        let dee = try await h.world.user("dee")
        _ = try await h.owner.addMember(dee.inboxID, to: h.groupID)
        try await catchUp(dee, h.groupID)
        #expect(try await dee.group(h.groupID).state.welcomeMessage == "Boots on, phones off.")
        let welcome = try #require(try await dee.directMessageHistory().last)
        #expect(welcome.displayText.hasSuffix("Welcome message: Boots on, phones off."))
        await dee.disconnect()
        await h.stop()
    }

    @Test(
        "leave: the leaver keeps its history but cannot send; the others move to a key it never gets; the last owner cannot leave"
    )
    func leave() async throws {
        let h = try await Hikers.start()
        let (ann, bob) = (h.members[0], h.members[1])
        _ = try await bob.sendGroupText("before", to: h.groupID)
        try await catchUp(ann, h.groupID)
        try await ann.leaveGroup(h.groupID)
        #expect(try await ann.group(h.groupID).status == .left)
        #expect(try await ann.groupMessages(in: h.groupID).map(\.displayText) == ["before"])
        await #expect(throws: RallyClientError.self) { try await ann.sendGroupText("still here?", to: h.groupID) }

        _ = try await bob.sendGroupText("after", to: h.groupID)
        try await catchUp(ann, h.groupID)
        #expect(try await ann.groupMessages(in: h.groupID).map(\.displayText) == ["before"])
        try await catchUp(h.owner, h.groupID)
        #expect(try await h.owner.groupMessages(in: h.groupID).map(\.displayText) == ["before", "after"])

        await #expect(throws: RallyClientError.group(.commitRejected(.lastOwner))) {
            try await h.owner.leaveGroup(h.groupID)
        }
        await h.stop()
    }

    @Test(
        "delete: every member drops the group and its messages, one who was away learns it from the relay, later joins get conversation_not_found"
    )
    func delete() async throws {
        let h = try await Hikers.start()
        let (ann, bob) = (h.members[0], h.members[1])
        let invite = try await h.owner.createInvite(in: h.groupID, options: InviteOptions())
        _ = try await h.owner.sendGroupText("see you on Sunday", to: h.groupID)
        try await catchUp(ann, h.groupID)
        #expect(try await ann.groupMessages(in: h.groupID).count == 1)
        await #expect(
            throws: RallyClientError.group(.commitRejected(.insufficientRole(needed: .owner, actual: .member)))
        ) {
            try await ann.deleteGroup(h.groupID)
        }

        try await h.owner.deleteGroup(h.groupID)
        // The owner applied its own delete commit: the group is gone here.
        #expect(try await h.owner.group(h.groupID).status == .deleted)
        #expect(try await h.owner.groupMessages(in: h.groupID).isEmpty)
        #expect(try h.owner.store.epochKey(group: h.groupID, epoch: 0) == nil)

        // Members who were away find the topic deleted on the relay.
        for member in [ann, bob] {
            let report = try await catchUp(member, h.groupID)
            #expect(report.events.contains { if case .deletedOnRelay = $0 { true } else { false } })
            #expect(try await member.group(h.groupID).status == .deleted)
            #expect(try await member.groupMessages(in: h.groupID).isEmpty)
            await #expect {
                try await member.sendGroupText("anyone?", to: h.groupID)
            } throws: { error in
                guard case RallyClientError.group(.notActive(_, .deleted)) = error else { return false }
                return "\(error)".contains("group_not_found")
            }
        }

        // A join with an invite from before is told the group was not found.
        let dan = try await h.world.user("dan")
        let attempt = try await requestJoin(dan, invite.appLink)
        let reports = try await h.owner.processJoinRequests()
        #expect(decisions(reports) == [.reject(.conversationNotFound, reason: "the group was deleted")])
        let answered = try await joinState(dan, attempt)
        #expect(answered.phase == .failed && answered.errorType == .conversationNotFound)

        // Deleting again (after a lost answer) retries the relay's part.
        try await h.owner.deleteGroup(h.groupID)
        await dan.disconnect()
        await h.stop()
    }
}
