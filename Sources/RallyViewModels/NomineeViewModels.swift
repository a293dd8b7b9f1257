import Foundation
public import Observation
public import RallyCore
public import RallyCrypto

/// The seed's "Manage Nominees" screen for one vault: every nominee with
/// their status, inviting, confirming and revoking, and the last error in
/// words a user can act on.
@MainActor
@Observable
public final class NomineeManagementViewModel {
    public let vaultID: String
    public private(set) var nominees: [NomineeSummary] = []
    public private(set) var isWorking = false
    public private(set) var errorMessage: String?
    /// The link of the last invitation sent, to share by other means.
    public private(set) var lastInvitationLink: String?

    private let client: RallyClient

    public init(client: RallyClient, vaultID: String) {
        self.client = client
        self.vaultID = vaultID
    }

    /// Nominees who accepted and wait for the owner's confirmation.
    public var awaitingConfirmation: [NomineeSummary] { nominees.filter { $0.status == .accepted } }

    /// Reads the inbox (answers arrive there) and reloads the list.
    public func refresh() async {
        await run { () async throws(RallyClientError) in try await self.client.nominees(of: self.vaultID) }
    }

    /// Sends the interactive invitation ("🔐 Vault Invitation").
    public func invite(
        _ invitee: InboxID, name: String, phone: String? = nil, email: String? = nil,
        lifetime: Duration = RallyClient.nomineeInvitationLifetime
    ) async {
        await run { () async throws(RallyClientError) in
            let sent = try await self.client.inviteNominee(
                to: self.vaultID, invitee: invitee, name: name, phone: phone, email: email, lifetime: lifetime)
            self.lastInvitationLink = sent.link
            return try await self.client.nominees(of: self.vaultID)
        }
    }

    public func confirm(_ nominee: NomineeSummary) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.confirmNominee(nominee.id, of: self.vaultID)
            return try await self.client.nominees(of: self.vaultID)
        }
    }

    public func revoke(_ nominee: NomineeSummary) async {
        await run { () async throws(RallyClientError) in
            _ = try await self.client.revokeNominee(nominee.id, of: self.vaultID)
            return try await self.client.nominees(of: self.vaultID)
        }
    }

    private func run(_ operation: @escaping () async throws(RallyClientError) -> [NomineeSummary]) async {
        isWorking = true
        defer { isWorking = false }
        do {
            nominees = try await operation()
            errorMessage = nil
        } catch {
            errorMessage = error.description
        }
    }
}

/// One vault invitation as its recipient sees it: the seed's interactive
/// message with its details, Accept and Decline while it is pending, and
/// the status the owner's answers give it.
@MainActor
@Observable
public final class VaultInvitationViewModel {
    public private(set) var invitation: VaultInvitationSummary
    public private(set) var isWorking = false
    public private(set) var errorMessage: String?
    /// The deep link an acceptance yields
    /// (`rally://nominee/invite?…&status=accepted`), for the main app.
    public private(set) var acceptedLink: String?

    private let client: RallyClient
    private var token: String { invitation.id }

    /// `invitation`: one of `RallyClient.vaultInvitations()`.
    public init(client: RallyClient, invitation: VaultInvitationSummary) {
        self.client = client
        self.invitation = invitation
    }

    /// "🔐 Vault Invitation", then "✅ Vault Access Accepted", …
    public var title: String { invitation.title }
    public var vaultName: String { invitation.vaultName }
    public var ownerName: String { invitation.ownerName }
    /// Accept and Decline are offered only while it is pending.
    public var canRespond: Bool { invitation.status == .pending }

    public func accept() async {
        await respond(accept: true)
    }

    public func decline() async {
        await respond(accept: false)
    }

    /// Reads the inbox: the owner's confirmation, refusal or revocation.
    public func refresh() async {
        isWorking = true
        defer { isWorking = false }
        do {
            if let current = try await client.vaultInvitation(matching: token) { invitation = current }
            errorMessage = nil
        } catch {
            errorMessage = error.description
        }
    }

    private func respond(accept: Bool) async {
        isWorking = true
        defer { isWorking = false }
        do {
            let response =
                accept
                ? try await client.acceptVaultInvitation(token) : try await client.declineVaultInvitation(token)
            invitation = response.invitation
            acceptedLink = response.link
            errorMessage = nil
        } catch {
            errorMessage = error.description
            if let current = try? await client.vaultInvitation(matching: token) { invitation = current }
        }
    }
}
