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
public final class GroupInfoViewModel {
    /// One row of the member list.
    public struct Member: Sendable, Equatable, Identifiable {
        public let inboxID: InboxID
        public let name: String
        public let role: GroupRole
        /// "active" or "blocked" (blocked by an admin, for all).
        public let status: String
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
    public private(set) var isWorking = false
    public private(set) var errorMessage: String?

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

    private func run(_ operation: @escaping () async throws(RallyClientError) -> Void) async {
        isWorking = true
        defer { isWorking = false }
        do {
            try await operation()
            errorMessage = nil
        } catch {
            errorMessage = error.description
        }
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
        members = state.sortedMembers.map {
            Member(
                inboxID: $0.inboxID, name: $0.identity.displayName, role: $0.role,
                status: state.blocked.contains($0.inboxID) ? "blocked" : "active", isMe: $0.inboxID == me)
        }
    }
}
