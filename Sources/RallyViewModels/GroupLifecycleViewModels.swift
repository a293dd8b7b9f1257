import Foundation
public import Observation
public import RallyCore
public import RallyCrypto

/// Runs one action of a view model: `isWorking` while it runs, the refusal
/// in words after, and the view refreshed either way.
@MainActor
protocol RefreshingViewModel: AnyObject {
    var isWorking: Bool { get set }
    var errorMessage: String? { get set }
    func reload() async
}

extension RefreshingViewModel {
    func run(_ operation: () async throws(RallyClientError) -> Void) async {
        isWorking = true
        defer { isWorking = false }
        do {
            try await operation()
            errorMessage = nil
        } catch {
            errorMessage = error.description
        }
        await reload()
    }
}

/// The seed's chat list for groups: every group with this device's
/// standing in it, and the invitations waiting for an answer.
@MainActor
@Observable
public final class GroupListViewModel: RefreshingViewModel {
    public struct Row: Sendable, Equatable, Identifiable {
        public let groupID: String
        public let name: String
        public let status: GroupRecord.Status
        public let myRole: GroupRole?
        public let memberCount: Int
        /// Joiners waiting for approval, for a moderator or above.
        public let waitingForApproval: Int
        public var id: String { groupID }
    }

    public private(set) var groups: [Row] = []
    /// Invitations not answered yet.
    public private(set) var invitations: [ReceivedInvitation] = []
    public internal(set) var isWorking = false
    public internal(set) var errorMessage: String?

    private let client: RallyClient

    public init(client: RallyClient) { self.client = client }

    /// Picks up welcomes and invitations, and reads every active group.
    public func refresh() async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.syncInbox()
            for group in try await self.client.groups() where group.status == .active {
                try await self.client.syncGroup(group.groupID)
            }
        }
    }

    /// Accepts an invitation: the join request goes out and the group
    /// appears once an admin's client has admitted this member (see
    /// ``JoinFlowViewModel`` to follow a join step by step).
    public func accept(_ invitation: ReceivedInvitation) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.groupInvitations.accept(invitation.id)
        }
    }

    public func decline(_ invitation: ReceivedInvitation) async {
        await run { () async throws(RallyClientError) in try await self.client.groupInvitations.decline(invitation.id) }
    }

    func reload() async {
        let me = client.inboxID
        groups = ((try? await client.groups()) ?? []).map { record in
            let role = record.state.role(of: me)
            return Row(
                groupID: record.groupID, name: record.state.profile.name, status: record.status, myRole: role,
                memberCount: record.state.members.count,
                waitingForApproval: (role ?? .observer) >= .moderator ? record.state.pending.count : 0)
        }
        invitations = ((try? client.groupInvitations.received()) ?? []).filter { $0.answer == .open }
    }
}

/// The seed's member admission screen: the group's admission setting, the
/// joiners waiting for approval, and the support chat with each.
@MainActor
@Observable
public final class MemberAdmissionViewModel: RefreshingViewModel {
    public let groupID: String
    public private(set) var admission: GroupAdmission = .auto
    public private(set) var pending: [PendingMember] = []
    /// The support chat with the selected joiner, oldest first.
    public private(set) var selected: InboxID?
    public private(set) var supportChat: [SupportMessage] = []
    public private(set) var permissions = GroupPermissions(role: nil)
    public internal(set) var isWorking = false
    public internal(set) var errorMessage: String?

    private let client: RallyClient

    public init(client: RallyClient, groupID: String) {
        self.client = client
        self.groupID = groupID
    }

    public func refresh() async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.syncInbox()
            _ = try await self.client.syncGroup(self.groupID)
        }
    }

    public func setAdmission(_ admission: GroupAdmission) async {
        await run { () async throws(RallyClientError) in
            try await self.client.groupAdmission.setAdmission(admission, in: self.groupID)
        }
    }

    /// Opens the support chat with a waiting joiner.
    public func select(_ joiner: InboxID?) async {
        selected = joiner
        await reload()
    }

    public func sendSupport(_ text: String) async {
        guard let selected else { return }
        await run { () async throws(RallyClientError) in
            _ = try await self.client.groupAdmission.sendSupport(text, in: self.groupID, member: selected)
        }
    }

    /// Admits a waiting joiner, with the role they asked for unless `role`.
    public func admit(_ joiner: PendingMember, as role: GroupRole? = nil) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.groupAdmission.admit(joiner.inboxID, role: role, in: self.groupID)
        }
    }

    public func reject(_ joiner: PendingMember) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.groupAdmission.reject(joiner.inboxID, in: self.groupID)
        }
    }

    func reload() async {
        guard let record = try? await client.group(groupID) else { return }
        admission = record.state.admission
        pending = record.state.pending.values.sorted { $0.inboxID < $1.inboxID }
        permissions = GroupPermissions(of: client.inboxID, in: record.state)
        supportChat = selected.flatMap { try? client.groupAdmission.support(in: groupID, member: $0) } ?? []
    }
}

/// The seed's group link screen: the link (or none), its role and
/// admission, and create, change, delete.
@MainActor
@Observable
public final class GroupLinkViewModel: RefreshingViewModel {
    public let groupID: String
    /// nil: the group has no link (group_link_not_found).
    public private(set) var link: GroupLink?
    public private(set) var appLink: String?
    public private(set) var webLink: String?
    public private(set) var canManage = false
    public internal(set) var isWorking = false
    public internal(set) var errorMessage: String?

    private let client: RallyClient

    public init(client: RallyClient, groupID: String) {
        self.client = client
        self.groupID = groupID
    }

    public func refresh() async {
        await run { () async throws(RallyClientError) in _ = try await self.client.syncGroup(self.groupID) }
    }

    public func create(role: GroupRole = .member, admission: GroupAdmission = .auto) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.groupLinks.create(in: self.groupID, role: role, admission: admission)
        }
    }

    public func change(role: GroupRole? = nil, admission: GroupAdmission? = nil) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.groupLinks.change(in: self.groupID, role: role, admission: admission)
        }
    }

    public func delete() async {
        await run { () async throws(RallyClientError) in try await self.client.groupLinks.delete(in: self.groupID) }
    }

    func reload() async {
        guard let record = try? await client.group(groupID) else { return }
        link = record.state.groupLink
        let links = link.map { client.groupLinks.links(for: $0) }
        appLink = links?.app
        webLink = links?.web
        canManage = GroupPermissions(of: client.inboxID, in: record.state).canManageLink
    }
}

/// The seed's group preferences screen: every preference with its value,
/// editable by the owner.
@MainActor
@Observable
public final class GroupPreferencesViewModel: RefreshingViewModel {
    public struct Row: Sendable, Equatable, Identifiable {
        public let key: GroupPreferences.Key
        public let value: GroupPreference
        public var id: String { key.rawValue }
    }

    public let groupID: String
    public private(set) var rows: [Row] = []
    public private(set) var canEdit = false
    public internal(set) var isWorking = false
    public internal(set) var errorMessage: String?

    private let client: RallyClient

    public init(client: RallyClient, groupID: String) {
        self.client = client
        self.groupID = groupID
    }

    public func refresh() async {
        await run { () async throws(RallyClientError) in _ = try await self.client.syncGroup(self.groupID) }
    }

    public func set(_ key: GroupPreferences.Key, to value: GroupPreference) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.setGroupPreferences([key: value], in: self.groupID)
        }
    }

    func reload() async {
        guard let record = try? await client.group(groupID) else { return }
        let preferences = record.state.preferences
        rows = GroupPreferences.Key.allCases.map { Row(key: $0, value: preferences[$0]) }
        canEdit = GroupPermissions(of: client.inboxID, in: record.state).canSetPreferences
    }
}
