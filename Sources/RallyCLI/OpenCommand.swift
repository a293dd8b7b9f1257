import ArgumentParser
import Foundation
import RallyCore

/// `rally open LINK`: any link Rally handles, through the SDK's
/// ``DeepLinkRouter``. The link is read before the home is opened, so a
/// malformed one exits 1 with the router's error on stderr and touches
/// nothing.
struct OpenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open", abstract: "Open a Rally link: an invite (rally://join/…) or a nominee invitation.",
        discussion: """
            An invite link does exactly what `rally join LINK` does (same output and exit status). \
            A malformed link exits 1 and says what is wrong with it.
            """)

    @OptionGroup var options: ClientOptions
    @Argument(
        help: "rally://join/<slug>, https://<host>/join#<slug>, or rally://nominee/invite?token=…&vault=…&status=…")
    var link: String
    @Flag(help: "Invite links: send the request and return; check later with `rally join status`.")
    var noWait = false
    @Option(help: "Invite links: stop waiting after this many seconds (the join stays under way).")
    var timeout: Double?

    /// Why `rally open` could not act on a well-formed link.
    enum Failure: Error, CustomStringConvertible {
        case nomineeLinksNotYetSupported

        var description: String {
            switch self {
            case .nomineeLinksNotYetSupported: "nominee links are handled once vault sharing lands"
            }
        }
    }

    func run() async throws {
        switch try DeepLinkRouter.parse(link) {
        case .join:
            try await JoinCommand.Start.join(link, options: options, noWait: noWait, timeout: timeout)
        case .nomineeInvite(let invitation):
            try await Self.openNomineeLink(invitation, options: options)
        }
    }

    /// Acts on a nominee invitation for this home.
    static func openNomineeLink(_ link: NomineeInviteLink, options: ClientOptions) async throws {
        // Replaced when vault sharing lands (accepting or declining with the
        // nominee SDK).
        throw Failure.nomineeLinksNotYetSupported
    }
}
