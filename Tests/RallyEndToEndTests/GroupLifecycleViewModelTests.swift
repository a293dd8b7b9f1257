import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import RallyViewModels
import Testing

@Suite("Group lifecycle view models against a real relay", .timeLimit(.minutes(3)))
@MainActor
struct GroupLifecycleViewModelTests {
    @Test("group list: invitations waiting for an answer, accept joins the group, decline answers it")
    func groupList() async throws {
        let world = try await GroupWorld.start()
        let olive = try await world.user("olive")
        let ann = try await world.user("ann")
        let group = try await olive.createGroup(name: "Hikers")
        let second = try await olive.createGroup(name: "Climbers")
        _ = try await olive.groupInvitations.invite([ann.inboxID], to: group.groupID)
        _ = try await olive.groupInvitations.invite([ann.inboxID], role: .observer, to: second.groupID)

        let list = GroupListViewModel(client: ann)
        await list.refresh()
        #expect(list.groups.isEmpty && list.invitations.map(\.groupName).sorted() == ["Climbers", "Hikers"])
        let hikers = try #require(list.invitations.first { $0.groupName == "Hikers" })
        await list.accept(hikers)
        #expect(list.errorMessage == nil, "\(list.errorMessage ?? "")")
        #expect(list.invitations.map(\.groupName) == ["Climbers"] && list.groups.isEmpty)
        // An admin's client admits Ann; her list then shows the group.
        _ = try await olive.processJoinRequests()
        await list.refresh()
        #expect(list.groups.map(\.name) == ["Hikers"] && list.groups.first?.myRole == .member)
        let climbers = try #require(list.invitations.first)
        await list.decline(climbers)
        #expect(list.invitations.isEmpty && list.groups.count == 1)
        _ = try await olive.processJoinRequests()
        #expect(try await olive.group(second.groupID).state.invited.isEmpty)
        await world.stop([olive, ann])
    }

    @Test("member admission: the queue, the support chat with a joiner, admit with a role")
    func memberAdmission() async throws {
        let world = try await GroupWorld.start()
        let olive = try await world.user("olive")
        let max = try await world.user("max")
        let dan = try await world.user("dan")
        let group = try await olive.createGroup(name: "Hikers")
        _ = try await olive.addMember(max.inboxID, role: .moderator, to: group.groupID)
        try await catchUp(max, group.groupID)

        let ownerView = MemberAdmissionViewModel(client: olive, groupID: group.groupID)
        await ownerView.setAdmission(.approval)
        #expect(ownerView.admission == .approval && ownerView.errorMessage == nil)
        let invite = try await olive.createInvite(in: group.groupID)
        let attempt = try await requestJoin(dan, invite.appLink)
        _ = try await olive.processJoinRequests()
        #expect(try await joinState(dan, attempt).phase == .awaitingApproval)
        _ = try await dan.groupAdmission.sendSupport("May I join?", in: group.groupID, member: dan.inboxID)

        let moderatorView = MemberAdmissionViewModel(client: max, groupID: group.groupID)
        await moderatorView.refresh()
        #expect(moderatorView.permissions.canReviewPending && moderatorView.pending.map(\.inboxID) == [dan.inboxID])
        await moderatorView.select(dan.inboxID)
        #expect(moderatorView.supportChat.map(\.text) == ["May I join?"])
        await moderatorView.sendSupport("Of course")
        #expect(moderatorView.supportChat.map(\.text) == ["May I join?", "Of course"])
        // Admitting someone who is not waiting is refused in words.
        let pendingDan = try #require(moderatorView.pending.first)
        await moderatorView.admit(pendingDan, as: .observer)
        #expect(moderatorView.pending.isEmpty && moderatorView.errorMessage == nil)
        await moderatorView.reject(pendingDan)
        #expect(moderatorView.errorMessage?.contains("is not waiting for approval") == true)
        #expect(try await joinState(dan, attempt).phase == .joined)
        await world.stop([olive, max, dan])
    }

    @Test("group link: none, then one; a second is refused as duplicate_group_link; role change; delete")
    func groupLink() async throws {
        let world = try await GroupWorld.start()
        let olive = try await world.user("olive")
        let ann = try await world.user("ann")
        let group = try await olive.createGroup(name: "Hikers")
        _ = try await olive.addMember(ann.inboxID, to: group.groupID)
        try await catchUp(ann, group.groupID)

        let view = GroupLinkViewModel(client: olive, groupID: group.groupID)
        await view.refresh()
        #expect(view.link == nil && view.canManage)
        await view.create(role: .member)
        #expect(view.link?.role == .member && view.webLink?.contains("/join#") == true)
        await view.create()
        #expect(view.errorMessage?.hasPrefix("the group refused the change: duplicate_group_link") == true)
        await view.change(role: .observer)
        #expect(view.link?.role == .observer && view.errorMessage == nil)
        await view.delete()
        #expect(view.link == nil && view.appLink == nil)

        let annView = GroupLinkViewModel(client: ann, groupID: group.groupID)
        await annView.refresh()
        #expect(!annView.canManage)
        await annView.create()
        #expect(annView.errorMessage != nil && annView.link == nil)
        await world.stop([olive, ann])
    }

    @Test("preferences: every key with its value; the owner edits, a member may not")
    func preferences() async throws {
        let world = try await GroupWorld.start()
        let olive = try await world.user("olive")
        let ann = try await world.user("ann")
        let group = try await olive.createGroup(name: "Hikers")
        _ = try await olive.addMember(ann.inboxID, to: group.groupID)
        try await catchUp(ann, group.groupID)

        let ownerView = GroupPreferencesViewModel(client: olive, groupID: group.groupID)
        await ownerView.refresh()
        #expect(ownerView.canEdit && ownerView.rows.count == GroupPreferences.Key.allCases.count)
        #expect(ownerView.rows.first { $0.key == .reactions }?.value.enabled == true)
        await ownerView.set(.timedMessages, to: GroupPreference(enabled: true, ttlSeconds: 3600))
        #expect(ownerView.rows.first { $0.key == .timedMessages }?.value.ttlSeconds == 3600)

        let annView = GroupPreferencesViewModel(client: ann, groupID: group.groupID)
        await annView.refresh()
        #expect(!annView.canEdit && annView.rows.first { $0.key == .timedMessages }?.value.enabled == true)
        await annView.set(.reactions, to: GroupPreference(enabled: false))
        #expect(annView.errorMessage?.contains("needs role owner") == true)
        #expect(annView.rows.first { $0.key == .reactions }?.value.enabled == true)
        await world.stop([olive, ann])
    }
}
