import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import RallyViewModels
import Testing

@Suite("Nominee view models against a real relay", .timeLimit(.minutes(2)))
@MainActor
struct NomineeViewModelTests {
    @Test(
        "Manage Nominees and the invitation message: invite, Accept, the owner confirms, statuses follow; Decline and revoke"
    )
    func flow() async throws {
        let world = try await NomineeWorld.start()
        let owner = try await world.client("owner")
        let sam = try await world.client("sam")
        let dee = try await world.client("dee")
        let vault = try await owner.createVault(name: "Family Papers")

        let manage = NomineeManagementViewModel(client: owner, vaultID: vault.id)
        await manage.refresh()
        #expect(manage.nominees.isEmpty && manage.errorMessage == nil)
        await manage.invite(sam.inboxID, name: "Sam", email: "sam@example.org")
        await manage.invite(dee.inboxID, name: "Dee")
        #expect(manage.nominees.map(\.status) == [.pending, .pending])
        #expect(manage.lastInvitationLink?.hasPrefix("rally://nominee/invite?") == true)

        // Sam's message: details, Accept / Decline, then accepted.
        let received = try #require(try await sam.vaultInvitations().first)
        let message = VaultInvitationViewModel(client: sam, invitation: received)
        #expect(message.title == "🔐 Vault Invitation")
        #expect(message.vaultName == "Family Papers" && message.ownerName == "owner")
        #expect(message.canRespond)
        await message.accept()
        #expect(message.title == "✅ Vault Access Accepted")
        #expect(!message.canRespond)
        #expect(message.acceptedLink?.contains("status=accepted") == true)

        // Dee declines; the owner sees both answers.
        let deeMessage = VaultInvitationViewModel(
            client: dee, invitation: try #require(try await dee.vaultInvitations().first))
        await deeMessage.decline()
        #expect(deeMessage.invitation.status == .declined && deeMessage.acceptedLink == nil)
        await manage.refresh()
        #expect(manage.nominees.map(\.status) == [.accepted, .declined])
        #expect(manage.awaitingConfirmation.map(\.name) == ["Sam"])

        await manage.confirm(manage.awaitingConfirmation[0])
        #expect(manage.nominees.map(\.status) == [.active, .declined])
        await message.refresh()
        #expect(message.invitation.status == .active)

        // Confirming the one who declined is refused in words.
        await manage.confirm(manage.nominees[1])
        #expect(manage.errorMessage == "Dee cannot be confirmed: the invitation is declined")

        await manage.revoke(manage.nominees[0])
        #expect(manage.nominees.map(\.status) == [.revoked, .declined])
        await message.refresh()
        #expect(message.invitation.status == .revoked)
        #expect(message.title == "Vault Invitation Revoked")
        // Accepting again after the revocation: refused, and said so.
        await message.accept()
        #expect(message.errorMessage == "The owner revoked this invitation.")
        await owner.disconnect()
        await world.stop()
    }
}
