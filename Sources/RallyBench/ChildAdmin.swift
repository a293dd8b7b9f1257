import ArgumentParser
import Foundation
import Logging
import RallyCore

/// The admin a join bench measures against, in a process of its own as it
/// would be on its own device: it creates a group and an invite, prints the
/// invite, then admits join requests until it is interrupted. In the
/// bench's own process its work would wait in the same queue of Swift's
/// concurrency pool as fifty joiners' verification, which no real admin's
/// phone shares with its joiners.
struct ChildAdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "child-admin", abstract: "The group admin a join bench starts as its child process.",
        shouldDisplay: false)

    static let inviteLinePrefix = "invite: "

    @Option(help: "The admin's home directory.") var home: String
    @Option(help: "The relay's URL.") var relayURL: String

    func run() async throws {
        BenchChild.stopWhenParentIsGone()
        guard let url = URL(string: relayURL) else { throw ValidationError("--relay-url: not a URL") }
        var logger = Logger(label: "rally.bench.admin")
        logger.logLevel = .error
        let admin = try await RallyClient.create(
            home: URL(fileURLWithPath: home), relayURL: url, displayName: "admin", logger: logger)
        let group = try await admin.createGroup(name: "bench")
        let invite = try await admin.createInvite(in: group.groupID)
        // The parent reads this line, then starts timing joins.
        Output.write(Self.inviteLinePrefix + invite.appLink)
        try await admin.watch { _ in }
    }
}

/// A `child-admin` process started from this same executable.
struct ChildAdmin {
    let process: Process
    let inviteLink: String
    var pid: Int32 { process.processIdentifier }

    static func start(home: URL, relayURL: URL) throws -> ChildAdmin {
        let (process, link) = try BenchChild.start(
            [
                ChildAdminCommand.configuration.commandName!, "--home", home.path, "--relay-url",
                relayURL.absoluteString,
            ], failure: "the admin process exited before making an invite"
        ) { line -> String? in
            line.hasPrefix(ChildAdminCommand.inviteLinePrefix)
                ? String(line.dropFirst(ChildAdminCommand.inviteLinePrefix.count)) : nil
        }
        return ChildAdmin(process: process, inviteLink: link)
    }

    /// SIGTERM for the reason `ChildRelay.stop` gives.
    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}
