import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

/// Member admission and the group link through a real relay: the approval
/// queue, its support chat, moderators' decisions, and the group's one link.
@Suite("Group admission and link through a real relay", .timeLimit(.minutes(3)))
struct GroupAdmissionTests {
    /// Olive owns "Hikers" (with an image); Max is a moderator, Ann a member.
    struct Club {
        let world: GroupWorld
        let owner: RallyClient
        let moderator: RallyClient
        let member: RallyClient
        let groupID: String

        static func start(admission: GroupAdmission = .auto) async throws -> Club {
            let world = try await GroupWorld.start()
            let owner = try await world.user("olive")
            let group = try await owner.createGroup(
                name: "Hikers", description: "Sunday walks", fullName: "", image: GroupImage(sniffing: png))
            let moderator = try await world.user("max")
            let member = try await world.user("ann")
            _ = try await owner.addMember(moderator.inboxID, role: .moderator, to: group.groupID)
            _ = try await owner.addMember(member.inboxID, to: group.groupID)
            if admission == .approval { try await owner.groupAdmission.setAdmission(.approval, in: group.groupID) }
            for client in [moderator, member] { try await catchUp(client, group.groupID) }
            return Club(world: world, owner: owner, moderator: moderator, member: member, groupID: group.groupID)
        }

        func stop(_ others: [RallyClient] = []) async { await world.stop([owner, moderator, member] + others) }
    }

    static let png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 3, count: 64))

    @Test(
        "approval: the joiner waits (awaitingApproval), talks with a moderator in the support chat only they read, and is admitted with the role the moderator gives"
    )
    func approvalWithSupportChat() async throws {
        let c = try await Club.start(admission: .approval)
        let invite = try await c.owner.createInvite(in: c.groupID)
        let dan = try await c.world.user("dan")
        let attempt = try await requestJoin(dan, invite.appLink)
        let reports = try await c.owner.processJoinRequests()
        guard case .admit(let queued)? = reports.first?.decision else {
            Issue.record("not queued: \(reports)")
            return
        }
        #expect(queued.approval)
        let waiting = try await joinState(dan, attempt)
        #expect(waiting.phase == .awaitingApproval && waiting.userMessage == "Waiting for approval")
        #expect(waiting.groupID == c.groupID)
        #expect(Set(waiting.invite.approval?.approvers ?? []) == [c.owner.inboxID, c.moderator.inboxID])

        // The queue is group state: the moderator sees it, not as a member.
        let pending = try await c.moderator.groupAdmission.pending(in: c.groupID)
        #expect(pending.map(\.inboxID) == [dan.inboxID] && pending.first?.role == .member)
        try await catchUp(c.member, c.groupID)
        #expect(try await c.member.group(c.groupID).state.members[dan.inboxID] == nil)

        // The support chat: the joiner and the moderators and above.
        _ = try await dan.groupAdmission.sendSupport("Hi, I walk every Sunday", in: c.groupID, member: dan.inboxID)
        _ = try await c.moderator.syncInbox()
        #expect(
            try c.moderator.groupAdmission.support(in: c.groupID, member: dan.inboxID).map(\.text) == [
                "Hi, I walk every Sunday"
            ])
        _ = try await c.moderator.groupAdmission.sendSupport(
            "Welcome! Boots needed", in: c.groupID, member: dan.inboxID)
        _ = try await dan.syncInbox()
        _ = try await c.owner.syncInbox()
        let seenByDan = try dan.groupAdmission.support(in: c.groupID, member: dan.inboxID)
        #expect(seenByDan.map(\.text) == ["Hi, I walk every Sunday", "Welcome! Boots needed"])
        #expect(seenByDan.map(\.outgoing) == [true, false])
        #expect(
            try c.owner.groupAdmission.support(in: c.groupID, member: dan.inboxID).map(\.text) == [
                "Hi, I walk every Sunday", "Welcome! Boots needed",
            ])
        // A member below moderator has no part in it, and got nothing.
        _ = try await c.member.syncInbox()
        await #expect(throws: RallyClientError.group(.supportNotAllowed(c.groupID))) {
            try await c.member.groupAdmission.sendSupport("me too", in: c.groupID, member: dan.inboxID)
        }
        #expect(try c.member.store.messages(contentType: GroupSupportCodec.contentType.description).isEmpty)

        // The moderator admits as observer; the welcome ends the join.
        let record = try await c.moderator.groupAdmission.admit(dan.inboxID, role: .observer, in: c.groupID)
        #expect(record.state.role(of: dan.inboxID) == .observer && record.state.pending.isEmpty)
        let joined = try await joinState(dan, attempt)
        #expect(joined.phase == .joined && joined.groupID == c.groupID)
        #expect(try await dan.group(c.groupID).state.role(of: dan.inboxID) == .observer)
        await c.stop([dan])
    }

    @Test("a moderator turns a joiner away: the joiner is told, and two moderators deciding at once give one outcome")
    func rejectionAndRace() async throws {
        let c = try await Club.start(admission: .approval)
        _ = try await c.owner.changeRoles(of: [c.member.inboxID], to: .moderator, in: c.groupID)
        try await catchUp(c.member, c.groupID)
        let invite = try await c.owner.createInvite(in: c.groupID)
        let eve = try await c.world.user("eve")
        let fay = try await c.world.user("fay")
        let eveAttempt = try await requestJoin(eve, invite.appLink)
        let fayAttempt = try await requestJoin(fay, invite.appLink)
        _ = try await c.owner.processJoinRequests()
        #expect(try await joinState(eve, eveAttempt).phase == .awaitingApproval)

        _ = try await c.moderator.groupAdmission.reject(eve.inboxID, in: c.groupID)
        let refused = try await joinState(eve, eveAttempt)
        #expect(refused.phase == .failed && refused.errorType == .requestRejected)
        #expect(refused.userMessage.hasPrefix("A moderator of the group declined your request to join"))

        // Max admits Fay while Ann turns her away: the log orders them, the
        // second finds her no longer pending.
        let max = c.moderator
        let ann = c.member
        let groupID = c.groupID
        async let admitted = Self.outcome { () async throws(RallyClientError) in
            try await max.groupAdmission.admit(fay.inboxID, role: nil, in: groupID)
        }
        async let rejected = Self.outcome { () async throws(RallyClientError) in
            try await ann.groupAdmission.reject(fay.inboxID, in: groupID)
        }
        let outcomes: [RallyClientError?] = await [admitted, rejected]
        #expect(outcomes.filter { $0 == nil }.count == 1, "\(outcomes)")
        #expect(outcomes.contains(RallyClientError.group(.commitRejected(.notPending(fay.inboxID)))))
        for client in [c.owner, c.moderator, c.member] { try await catchUp(client, c.groupID) }
        let states = try await [c.owner, c.moderator, c.member].asyncMap { try await $0.group(c.groupID).state }
        #expect(states.allSatisfy { $0 == states[0] } && states[0].pending.isEmpty)
        let fayState = try await joinState(fay, fayAttempt)
        if states[0].members[fay.inboxID] != nil {
            #expect(fayState.phase == .joined)
        } else {
            #expect(fayState.phase == .failed && fayState.errorType == .requestRejected)
        }
        await c.stop([eve, fay])
    }

    static func outcome(_ body: () async throws(RallyClientError) -> GroupRecord) async -> RallyClientError? {
        do {
            _ = try await body()
            return nil
        } catch {
            return error
        }
    }

    @Test(
        "the group link: one per group, the same for every admin, a preview before joining, its role, and deleting it refuses it at once"
    )
    func groupLink() async throws {
        let c = try await Club.start()
        let link = try await c.owner.groupLinks.create(in: c.groupID, role: .member)
        await #expect(throws: RallyClientError.group(.commitRejected(.duplicateGroupLink))) {
            try await c.owner.groupLinks.create(in: c.groupID)
        }
        // Another admin sees the same link.
        let ann = c.member
        _ = try await c.owner.changeRoles(of: [ann.inboxID], to: .admin, in: c.groupID)
        try await catchUp(ann, c.groupID)
        #expect(try await ann.groupLinks.show(in: c.groupID) == link)

        // The preview: name, description and the image's digest.
        let preview = try Invite.parse(c.owner.groupLinks.links(for: link).web, now: Date())
        #expect(preview.payload.name == "Hikers" && preview.payload.description_p == "Sunday walks")
        #expect(preview.payload.imageSha256.hexString == GroupImage(sniffing: Self.png)?.digest)

        // A joiner through the link gets its role; the admin's change of
        // the role holds for the next one.
        let dan = try await c.world.user("dan")
        let danJoin = try await requestJoin(dan, link.slug)
        _ = try await ann.processJoinRequests()
        #expect(try await joinState(dan, danJoin).phase == .joined)
        _ = try await ann.groupLinks.change(in: c.groupID, role: .observer)
        let eve = try await c.world.user("eve")
        let eveJoin = try await requestJoin(eve, link.slug)
        _ = try await c.owner.processJoinRequests()
        #expect(try await joinState(eve, eveJoin).phase == .joined)
        let state = try await c.owner.group(c.groupID).state
        #expect(state.role(of: dan.inboxID) == .member && state.role(of: eve.inboxID) == .observer)

        // Deleted by one admin: the other's client refuses it.
        try await c.owner.groupLinks.delete(in: c.groupID)
        let fay = try await c.world.user("fay")
        let fayJoin = try await requestJoin(fay, link.slug)
        let reports = try await ann.processJoinRequests()
        #expect(decisions(reports).contains(.reject(.inviteRevoked, reason: "the invite was revoked")))
        #expect(try await joinState(fay, fayJoin).errorType == .inviteRevoked)
        await #expect(throws: RallyClientError.group(.commitRejected(.groupLinkNotFound))) {
            try await ann.groupLinks.show(in: c.groupID)
        }
        // A new link is a new tag: the old one stays dead.
        let fresh = try await c.owner.groupLinks.create(in: c.groupID, admission: .approval)
        #expect(fresh.tag != link.tag && fresh.admission == .approval)
        await c.stop([dan, eve, fay])
    }
    @Test(
        "invitations: invited until accepted (no approval needed); withdrawn is invitation_removed; declined is recorded; a deleted group is group_not_found"
    )
    func invitations() async throws {
        let c = try await Club.start(admission: .approval)
        let (dan, eve, fay, gus) = try await (
            c.world.user("dan"), c.world.user("eve"), c.world.user("fay"), c.world.user("gus")
        )
        let record = try await c.owner.groupInvitations.invite(
            [dan.inboxID, eve.inboxID, fay.inboxID], role: .moderator, to: c.groupID)
        #expect(Set(record.state.invited.keys) == [dan.inboxID, eve.inboxID, fay.inboxID])
        #expect(record.state.roster.filter { $0.status == .invited }.count == 3)
        await #expect(throws: RallyClientError.group(.commitRejected(.alreadyInvited(dan.inboxID)))) {
            try await c.owner.groupInvitations.invite([dan.inboxID], to: c.groupID)
        }
        // The invitee sees it, then accepts: joined as invited.
        _ = try await dan.syncInbox()
        let received = try dan.groupInvitations.received()
        #expect(received.map(\.groupName) == ["Hikers"] && received.first?.answer == .open)
        #expect(received.first?.role == .moderator && received.first?.invitedBy.inboxID == c.owner.inboxID)
        let accepted = try await dan.groupInvitations.accept("Hikers")
        _ = try await c.owner.processJoinRequests()
        #expect(try await joinState(dan, accepted).phase == .joined)
        let state = try await c.owner.group(c.groupID).state
        #expect(state.role(of: dan.inboxID) == .moderator && state.invited[dan.inboxID] == nil)

        // Withdrawn before Eve accepts: invitation_removed.
        _ = try await c.owner.removeMembers([eve.inboxID], from: c.groupID)
        _ = try await eve.syncInbox()
        let late = try await eve.groupInvitations.accept("Hikers")
        let reports = try await c.owner.processJoinRequests()
        #expect(decisions(reports) == [.reject(.invitationRemoved, reason: "the invitation was withdrawn")])
        let removed = try await joinState(eve, late)
        #expect(removed.phase == .failed && removed.errorType == .invitationRemoved)
        guard case .accepted(let attempt)? = try eve.groupInvitations.received().first?.answer else {
            Issue.record("Eve's invitation is not shown as accepted")
            return
        }
        #expect(attempt.errorType == .invitationRemoved)

        // Fay declines: an admin's client withdraws it for the group.
        _ = try await fay.syncInbox()
        try await fay.groupInvitations.decline("Hikers")
        #expect(try fay.groupInvitations.received().first?.answer == .declined)
        _ = try await c.owner.processJoinRequests()
        #expect(try await c.owner.group(c.groupID).state.invited.isEmpty)

        // Invited to a group the owner then deletes: group_not_found.
        _ = try await c.owner.groupInvitations.invite([gus.inboxID], to: c.groupID)
        try await c.owner.deleteGroup(c.groupID)
        _ = try await gus.syncInbox()
        let gone = try await gus.groupInvitations.accept("Hikers")
        _ = try await c.owner.processJoinRequests()
        #expect(try await joinState(gus, gone).errorType == .conversationNotFound)
        await c.stop([dan, eve, fay, gus])
    }
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var mapped: [T] = []
        for element in self { mapped.append(try await transform(element)) }
        return mapped
    }
}
