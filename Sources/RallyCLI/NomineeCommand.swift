import ArgumentParser
import Foundation
import RallyCore
import RallyCrypto

struct NomineeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nominee",
        abstract: "Invite nominees to a vault; accept or decline an invitation.",
        discussion:
            "The owner invites (an interactive \"🔐 Vault Invitation\" message with a single-use token bound to the invitee), the invitee accepts or declines, the owner confirms (the vault key is sealed to the nominee) or revokes (the token dies and the vault moves to a new key).",
        subcommands: [
            Invite.self, List.self, Confirm.self, Revoke.self, Invitations.self, Accept.self, Decline.self,
            EmergencyCommand.self,
        ])

    struct Invite: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Invite someone to a vault as a nominee.",
            discussion:
                "Without VAULT, takes the vault the app handed over (`rally vault share`) and clears it; with none handed over, or an unknown one, the first vault you own."
        )

        @OptionGroup var options: ClientOptions
        @Argument(help: "The vault's name or id (default: the one handed over).") var vault: String?
        @Option(help: "The invitee's inbox id.") var to: String
        @Option(help: "The invitee's name (required).") var name: String
        @Option(help: "The invitee's phone number.") var phone: String?
        @Option(help: "The invitee's email address.") var email: String?
        @Option(help: "Expire after a duration: 30m, 12h, 7d, or seconds (default 7d).") var expires: String?
        @Option(
            help:
                "Give emergency access instead of the key: once confirmed, the nominee may ask, and gets the vault after this wait (1m to 90d) unless you reject."
        )
        var emergencyWait: String?
        @Option(name: .customLong("app-id"), help: "The app id of the shared container's suite, group.<app id>.")
        var appID = SharedContainer.defaultAppID

        func run() async throws {
            let invitee: InboxID
            do {
                invitee = try InboxID(validating: to)
            } catch {
                throw ValidationError(error.description)
            }
            let lifetime = try expires.map { Duration.seconds(try InviteCommand.Create.duration($0)) }
            let wait = try emergencyWait.map {
                Duration.seconds(try InviteCommand.Create.duration($0, option: "--emergency-wait"))
            }
            let client = try options.openClient()
            let target: String
            if let vault {
                target = vault
            } else {
                target = try await Self.handedOver(client, options: options, appID: appID)
            }
            let sent = try await client.inviteNominee(
                to: target, invitee: invitee, name: name, phone: phone, email: email,
                lifetime: lifetime ?? RallyClient.nomineeInvitationLifetime, emergencyWait: wait)
            await client.disconnect()
            options.output.emit(sent) {
                """
                invited \(sent.nominee.name.terminalSafe) to the vault: 🔐 Vault Invitation sent to \(sent.nominee.inbox) (pending, expires \(ISO8601DateFormatter.rally.string(from: sent.nominee.expiresAt)))\(EmergencyCommand.offer(sent.nominee.emergencyAccess))
                link (works only for them): \(sent.link)
                """
            }
        }

        /// The extension's side of the hand-off: the vault the app handed
        /// over, read and cleared; else the first vault this home owns.
        static func handedOver(_ client: RallyClient, options: ClientOptions, appID: String) async throws -> String {
            let pending = try VaultHandoff(container: SharedContainer.default(home: options.homeURL, appID: appID))
                .take()
            let owned = try await client.vaultList().filter(\.isOwner)
            guard let chosen = VaultHandoff.preselect(pending: pending, vaults: owned, id: \.id) else {
                throw ValidationError("you own no vault to invite to: create one with `rally vault create NAME`")
            }
            if let pending, pending.vaultID != chosen.id {
                Output.warn("the vault handed over is not one you own; using \(chosen.name.terminalSafe)")
            }
            return chosen.id
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "A vault's nominees and their status.")

        @OptionGroup var options: ClientOptions
        @Argument(help: "The vault's name or id.") var vault: String

        func run() async throws {
            let client = try options.openClient()
            let nominees = try await client.nominees(of: vault)
            await client.disconnect()
            options.output.emit(nominees) {
                guard !nominees.isEmpty else { return "no nominees: invite one with `rally nominee invite`" }
                return nominees.map {
                    "\($0.name.terminalSafe)  \($0.status.rawValue)  \($0.inbox)  \($0.id)"
                        + EmergencyCommand.ownerNote($0.emergencyAccess)
                }
                .joined(separator: "\n")
            }
        }
    }

    struct Confirm: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Give a nominee who accepted the vault key (status active).")

        @OptionGroup var options: ClientOptions
        @Argument(help: "The vault's name or id.") var vault: String
        @Argument(help: "The nominee's name, inbox id or id.") var nominee: String

        func run() async throws {
            let client = try options.openClient()
            let confirmed = try await client.confirmNominee(nominee, of: vault)
            await client.disconnect()
            options.output.emit(confirmed) {
                if let emergency = confirmed.emergencyAccess {
                    return
                        "\(confirmed.name.terminalSafe) is active with emergency access: they may ask for the vault and get it \(EmergencyCommand.wait(emergency.waitMs)) later unless you reject (`rally nominee emergency reject`)"
                }
                return "\(confirmed.name.terminalSafe) is active: they can read the vault's documents"
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke a nominee: their token dies and the vault moves to a new key.")

        @OptionGroup var options: ClientOptions
        @Argument(help: "The vault's name or id.") var vault: String
        @Argument(help: "The nominee's name, inbox id or id.") var nominee: String

        func run() async throws {
            let client = try options.openClient()
            let revoked = try await client.revokeNominee(nominee, of: vault)
            await client.disconnect()
            options.output.emit(revoked) {
                "revoked \(revoked.name.terminalSafe): documents added from now on are out of their reach"
            }
        }
    }

    struct Invitations: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The vault invitations you received.")

        @OptionGroup var options: ClientOptions

        func run() async throws {
            let client = try options.openClient()
            let invitations = try await client.vaultInvitations()
            await client.disconnect()
            options.output.emit(invitations) {
                guard !invitations.isEmpty else { return "no vault invitations" }
                return invitations.map(NomineeCommand.human).joined(separator: "\n")
            }
        }
    }

    struct Accept: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Accept a vault invitation.")

        @OptionGroup var options: ClientOptions
        @Argument(help: "The invitation's token or rally://nominee/invite link.") var tokenOrLink: String

        func run() async throws {
            try await NomineeCommand.respond(tokenOrLink, accept: true, options: options)
        }
    }

    struct Decline: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Decline a vault invitation.")

        @OptionGroup var options: ClientOptions
        @Argument(help: "The invitation's token or rally://nominee/invite link.") var tokenOrLink: String

        func run() async throws {
            try await NomineeCommand.respond(tokenOrLink, accept: false, options: options)
        }
    }

    static func respond(_ tokenOrLink: String, accept: Bool, options: ClientOptions) async throws {
        let client = try options.openClient()
        try await respond(tokenOrLink, accept: accept, client: client, options: options)
    }

    static func respond(_ tokenOrLink: String, accept: Bool, client: RallyClient, options: ClientOptions) async throws {
        let response =
            accept
            ? try await client.acceptVaultInvitation(tokenOrLink) : try await client.declineVaultInvitation(tokenOrLink)
        await client.disconnect()
        options.output.emit(response) {
            var lines = [human(response.invitation)]
            if let link = response.link { lines.append("deep link: \(link)") }
            if accept { lines.append("the owner gives you the vault key when they confirm") }
            return lines.joined(separator: "\n")
        }
    }

    static func human(_ invitation: VaultInvitationSummary) -> String {
        var line =
            "\(invitation.title) \"\(invitation.vaultName.terminalSafe)\" from \(invitation.ownerName.terminalSafe) (\(invitation.ownerInbox)): \(invitation.status.rawValue)"
        if let refusal = invitation.refusal { line += " — \(refusal.terminalSafe)" }
        if let emergency = invitation.emergencyAccess {
            line +=
                emergency.escrowCreated
                ? " (emergency access: `rally nominee emergency request \(invitation.vaultName.terminalSafe)`, granted \(EmergencyCommand.wait(emergency.waitMs)) after asking unless the owner rejects)"
                : " (emergency access after a wait of \(EmergencyCommand.wait(emergency.waitMs)))"
        }
        return line
    }
}
