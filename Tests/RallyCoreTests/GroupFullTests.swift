import Foundation
import RallyWire
import Testing

@testable import RallyCore

/// A group holds as many members as a welcome can carry: an admission that
/// would leave a member without its welcome is answered `group_full`
/// before anything is committed.
@Suite("A full group answers `group_full` instead of admitting a member it cannot welcome")
struct GroupFullTests {
    /// What the welcome budget is measured against: the group's snapshot
    /// compressed, as a welcome past the budget is checked.
    static func compressedSnapshotBytes(_ client: RallyClient, _ groupID: String) async throws -> Int {
        Deflate.compress(FrameCodec.encode(try await client.group(groupID).state.snapshot)).count
    }

    @Test(
        "Of a batch that would outgrow the welcome, the first requests that fit are admitted and the rest told the group is full"
    )
    func aBatchIsAdmittedUpToWhatAWelcomeCarries() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let owner = try await world.user("owner")
        let group = try await owner.createGroup(name: "Crowded")
        let invite = try await owner.createInvite(in: group.groupID)
        // Two members admitted one at a time: the second shows what one
        // more member adds (its keys, request id, the commit's id).
        var sizes: [Int] = []
        for name in ["joiner1", "joiner2"] {
            let joiner = try await world.user(name)
            let storedBefore = try #require(try owner.store.snapshotByteCount(group.groupID))
            _ = try await joiner.startJoin(invite.appLink)
            #expect(try await owner.processJoinRequests().map(\.decision?.isAdmission) == [true])
            sizes.append(try await Self.compressedSnapshotBytes(owner, group.groupID))
            // The bound that spares most batches an encoding of the group
            // holds: one admission grew the stored snapshot by less.
            let storedAfter = try #require(try owner.store.snapshotByteCount(group.groupID))
            let bound =
                GroupWelcomes.commitGrowthBound + GroupWelcomes.admissionGrowthBound
                + FrameCodec.encode(joiner.identity.publicIdentity.wireBundle).count
            #expect(storedAfter > storedBefore)
            #expect(storedAfter - storedBefore <= bound)
        }
        let perMember = sizes[1] - sizes[0]
        #expect(perMember > 64, "a member's record carries its two keys")

        // Room for one more member, not two.
        var desk = owner.inviterDesk
        desk.welcomes.budget = sizes[1] + perMember * 3 / 2
        let second = try await world.user("joiner3")
        let third = try await world.user("joiner4")
        let admitted = try await second.startJoin(invite.appLink)
        let refused = try await third.startJoin(invite.appLink)
        let topic = try await owner.group(group.groupID).topic
        let entriesBefore = await world.relay.entries(of: topic).count
        let reports = try await desk.processJoinRequests()
        #expect(reports.map(\.joiner) == [second.inboxID, third.inboxID])
        #expect(reports[0].decision?.isAdmission == true)
        #expect(
            reports[1].decision
                == .reject(.groupFull, reason: "the group holds as many members as a welcome can carry"))
        #expect(reports[1].errorSent)
        // One commit, for the one who fits, whose welcome the budget holds.
        #expect(await world.relay.entries(of: topic).count == entriesBefore + 1)
        #expect(
            try await world.members(owner, group.groupID) == [
                "joiner1:member", "joiner2:member", "joiner3:member", "owner:owner",
            ])
        #expect(GroupWelcomes.canCarry(try await owner.group(group.groupID).state, budget: desk.welcomes.budget))

        _ = try await second.syncInbox()
        #expect(try await second.joinAttempt(admitted.requestID).phase == .joined)
        _ = try await third.syncInbox()
        let failed = try await third.joinAttempt(refused.requestID)
        #expect(failed.phase == .failed)
        #expect(failed.errorType == .groupFull)
        #expect(failed.errorType?.userMessage == "This group is full")
        // No advice to ask for a new invite: any invite meets the same group.
        #expect(failed.userMessage == "This group is full.")
        #expect((try? await third.group(group.groupID)) == nil)
    }

    @Test("A group already past the budget commits nothing and tells every joiner it is full")
    func aGroupPastTheBudgetAdmitsNobody() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let (owner, joiner, group, attempt) = try await world.joinUnderWay()
        var desk = owner.inviterDesk
        desk.welcomes.budget = try await Self.compressedSnapshotBytes(owner, group.groupID) - 1
        let topic = try await owner.group(group.groupID).topic
        let entriesBefore = await world.relay.entries(of: topic).count
        let reports = try await desk.processJoinRequests()
        #expect(
            reports.map(\.decision)
                == [.reject(.groupFull, reason: "the group holds as many members as a welcome can carry")])
        #expect(await world.relay.entries(of: topic).count == entriesBefore)
        _ = try await joiner.syncInbox()
        #expect(try await joiner.joinAttempt(attempt.requestID).errorType == .groupFull)
        #expect(try await world.members(owner, group.groupID) == ["owner:owner"])
    }

    @Test("An admin adding a member to a full group is told so, and nothing is committed")
    func aDirectAddToAFullGroupIsRefused() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let owner = try await world.user("owner")
        let newcomer = try await world.user("newcomer")
        let group = try await owner.createGroup(name: "Crowded")
        let topic = try await owner.group(group.groupID).topic
        let entriesBefore = await world.relay.entries(of: topic).count
        var groups = owner.groupService
        groups.welcomes.budget = try await Self.compressedSnapshotBytes(owner, group.groupID) + 8
        do {
            _ = try await groups.addMember(newcomer.inboxID, role: .member, to: group.groupID)
            Issue.record("the add was expected to be refused")
        } catch {
            #expect(error == .group(.full(group.groupID)))
            #expect(error.description.hasPrefix("group_full: "))
        }
        #expect(await world.relay.entries(of: topic).count == entriesBefore)
        // Within the budget the same add goes through and welcomes.
        _ = try await owner.groupService.addMember(newcomer.inboxID, role: .member, to: group.groupID)
        _ = try await newcomer.syncInbox()
        #expect(try await world.members(newcomer, group.groupID) == ["newcomer:member", "owner:owner"])
    }

    @Test(
        "The welcome budget is the envelope less the sealing allowance, and the check reads the compressed snapshot past it"
    )
    func theCheckComparesTheSnapshotWithTheBudget() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let owner = try await world.user("owner")
        let group = try await owner.createGroup(name: "Sizes")
        let state = try await owner.group(group.groupID).state
        let encoded = FrameCodec.encode(state.snapshot).count
        let compressed = Deflate.compress(FrameCodec.encode(state.snapshot)).count
        #expect(GroupWelcomes.maxSnapshotBytes == WireLimits.maxPayloadBytes - GroupWelcomes.sealingAllowance)
        #expect(GroupWelcomes.canCarry(state, budget: GroupWelcomes.maxSnapshotBytes))
        #expect(GroupWelcomes.canCarry(state, budget: encoded))
        // Past the budget uncompressed, the compressed snapshot decides.
        try #require(compressed < encoded, "this snapshot compresses, so the compressed path is the one tested")
        #expect(GroupWelcomes.canCarry(state, budget: compressed))
        #expect(!GroupWelcomes.canCarry(state, budget: compressed - 1))
    }
}
