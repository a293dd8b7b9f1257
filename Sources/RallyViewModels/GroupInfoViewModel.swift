import Foundation
public import Observation
public import RallyCore
public import RallyCrypto

/// The seed's group info screen: the profile, the members with their role
/// and status, what the current user may do, and the lifecycle actions
/// (profile, roles in batch, removal, block for all, welcome message,
/// leave), with the last refusal in words.
@MainActor
@Observable
public final class GroupInfoViewModel: RefreshingViewModel {
    /// One row of the member list.
    public struct Member: Sendable, Equatable, Identifiable {
        public let inboxID: InboxID
        public let name: String
        public let role: GroupRole
        /// connected, blocked (by an admin, for all), pending approval or
        /// invited.
        public let status: GroupMemberStatus
        public let isMe: Bool
        public var id: String { inboxID.rawValue }
    }

    public let groupID: String
    public private(set) var profile = GroupProfile(name: "", description: "")
    public private(set) var welcomeMessage = ""
    public private(set) var members: [Member] = []
    public private(set) var permissions = GroupPermissions(role: nil)
    public private(set) var canLeave = false
    /// This device's standing in the group: active, left, removed, …
    public private(set) var status: GroupRecord.Status?
    public internal(set) var isWorking = false
    public internal(set) var errorMessage: String?

    private let client: RallyClient

    public init(client: RallyClient, groupID: String) {
        self.client = client
        self.groupID = groupID
    }

    /// Reads the group's log and shows where it stands.
    public func refresh() async {
        await run { () async throws(RallyClientError) in _ = try await self.client.syncGroup(self.groupID) }
    }

    public func updateProfile(
        name: String? = nil, fullName: String? = nil, description: String? = nil, image: GroupImage? = nil
    ) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.updateGroupProfile(
                self.groupID, name: name, fullName: fullName, description: description, image: image)
        }
    }

    public func changeRole(of members: [Member], to role: GroupRole) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.changeRoles(of: members.map(\.inboxID), to: role, in: self.groupID)
        }
    }

    public func remove(_ members: [Member], withMessages: Bool = false, ban: Bool = false) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.removeMembers(
                members.map(\.inboxID), from: self.groupID, ban: ban, withMessages: withMessages)
        }
    }

    public func block(_ members: [Member], blocked: Bool = true) async {
        await run { () async throws(RallyClientError) in
            try await self.client.blockMembers(members.map(\.inboxID), in: self.groupID, blocked: blocked)
        }
    }

    public func setWelcomeMessage(_ text: String) async {
        await run { () async throws(RallyClientError) in try await self.client.setWelcomeMessage(text, in: self.groupID)
        }
    }

    public func leave() async {
        await run { () async throws(RallyClientError) in try await self.client.leaveGroup(self.groupID) }
    }

    /// Invites people; they show as invited until they accept.
    public func invite(_ inboxes: [InboxID], role: GroupRole = .member) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.groupInvitations.invite(inboxes, role: role, to: self.groupID)
        }
    }

    /// Deletes the group for every member (owner).
    public func delete() async {
        await run { () async throws(RallyClientError) in try await self.client.deleteGroup(self.groupID) }
    }

    func reload() async {
        if let record = try? await client.group(groupID) { show(record) }
    }

    private func show(_ record: GroupRecord) {
        let state = record.state
        let me = client.inboxID
        profile = state.profile
        welcomeMessage = state.welcomeMessage
        status = record.status
        permissions = GroupPermissions(of: me, in: state)
        canLeave = record.status == .active && GroupPermissions.canLeave(me, in: state)
        members = state.roster.map {
            Member(
                inboxID: $0.inboxID, name: $0.identity.displayName, role: $0.role, status: $0.status,
                isMe: $0.inboxID == me)
        }
    }
}
