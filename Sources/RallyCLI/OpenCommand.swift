import ArgumentParser
import Foundation
import RallyCore

/// `rally open LINK`: any link Rally handles, through the SDK's
/// ``DeepLinkRouter``. The link is read before the home is opened, so a
/// malformed one exits 1 with the router's error on stderr and touches
/// nothing.
struct OpenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open",
        abstract: "Open a Rally link: an invite (rally://join/…) or a vault invitation (rally://nominee/invite?…).",
        discussion: """
            An invite link does exactly what `rally join LINK` does (same output and exit status). \
            A nominee link accepts the vault invitation (declines it with status=declined), as \
            `rally nominee accept` does. A malformed link exits 1 and says what is wrong with it.
            """)

    @OptionGroup var options: ClientOptions
    @Argument(
        help: "rally://join/<slug>, https://<host>/join#<slug>, or rally://nominee/invite?token=…&vault=…&status=…")
    var link: String
    @Flag(help: "Invite links: send the request and return; check later with `rally join status`.")
    var noWait = false
    @Option(help: "Invite links: stop waiting after this many seconds (the join stays under way).")
    var timeout: Double?

    func run() async throws {
        switch try DeepLinkRouter.parse(link) {
        case .join:
            try await JoinCommand.Start.join(link, options: options, noWait: noWait, timeout: timeout)
        case .nomineeInvite(let invitation):
            try await Self.openNomineeLink(invitation, options: options)
        }
    }

    /// Acts on a nominee link for this home, as the seed's main app does:
    /// a declined link declines; any other accepts, and a link for an
    /// invitation accepted already shows where it stands.
    static func openNomineeLink(_ link: NomineeInviteLink, options: ClientOptions) async throws {
        let client = try options.openClient()
        if link.status != .declined, let known = try await client.vaultInvitation(matching: link.token.text),
            known.status == .accepted || known.status == .active
        {
            await client.disconnect()
            options.output.emit(NomineeResponse(invitation: known, link: link.url)) { NomineeCommand.human(known) }
            return
        }
        try await NomineeCommand.respond(
            link.token.text, accept: link.status != .declined, client: client, options: options)
    }
}
