import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import RallyViewModels
import Testing

@Suite("The group info view model against a real relay", .timeLimit(.minutes(2)))
@MainActor
struct GroupInfoViewModelTests {
    @Test("profile, members with role and status, what each may do, and the lifecycle actions with their refusals")
    func groupInfo() async throws {
        let world = try await GroupWorld.start()
        let olive = try await world.user("olive")
        let ann = try await world.user("ann")
        let bob = try await world.user("bob")
        let group = try await olive.createGroup(name: "Hikers", description: "Sunday walks")
        for member in [ann, bob] { _ = try await olive.addMember(member.inboxID, to: group.groupID) }
        for member in [ann, bob] { try await catchUp(member, group.groupID) }

        let owner = GroupInfoViewModel(client: olive, groupID: group.groupID)
        await owner.refresh()
        #expect(owner.profile.name == "Hikers" && owner.members.count == 3)
        #expect(owner.permissions.canEditProfile && owner.permissions.assignableRoles == GroupRole.allCases)
        #expect(!owner.canLeave)  // the last owner, with members

        let annView = GroupInfoViewModel(client: ann, groupID: group.groupID)
        await annView.refresh()
        #expect(!annView.permissions.canEditProfile && annView.permissions.assignableRoles.isEmpty)
        #expect(!annView.permissions.canBlock(.member) && annView.canLeave)
        // A refusal is shown in words, and nothing changes.
        await annView.updateProfile(name: "Mine")
        #expect(annView.errorMessage?.contains("needs role owner, author is member") == true)
        #expect(annView.profile.name == "Hikers")

        // The owner makes both moderators in one change, then Ann blocks Bob.
        let others = owner.members.filter { !$0.isMe }
        await owner.changeRole(of: others, to: .moderator)
        #expect(owner.errorMessage == nil && owner.members.filter { $0.role == .moderator }.count == 2)
        await annView.refresh()
        #expect(annView.permissions.canBlock(.moderator) && !annView.permissions.canBlock(.owner))
        let bobRow = try #require(annView.members.first { $0.inboxID == bob.inboxID })
        await annView.block([bobRow])
        #expect(annView.members.first { $0.inboxID == bob.inboxID }?.status == .blocked)

        await owner.setWelcomeMessage("Boots on.")
        await owner.updateProfile(fullName: "The Sunday Hikers")
        #expect(owner.welcomeMessage == "Boots on." && owner.profile.fullName == "The Sunday Hikers")

        await owner.remove([bobRow], withMessages: true)
        #expect(owner.members.count == 2 && owner.errorMessage == nil)
        await annView.leave()
        #expect(annView.status == .left && !annView.canLeave)
        await world.stop([olive, ann, bob])
    }
}
