import ArgumentParser
import Foundation
import Logging
import RallyCore
import RallyRelay

/// Starts a relay in this process on a free port with a temporary store and
/// walks two users through the main flows, printing what happens.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo", abstract: "Run an embedded relay and show two users exchanging encrypted messages.")

    @Option(help: "Keep the relay's data and the users' homes in this directory instead of a temporary one.")
    var data: String?

    func run() async throws {
        let root =
            data.map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("rally-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { if data == nil { try? FileManager.default.removeItem(at: root) } }
        var quiet = Logger(label: "rally.demo")
        quiet.logLevel = .error

        let relay = try await RunningRelay.start(
            configuration: RelayConfiguration(port: 0, dataDirectory: root.appendingPathComponent("relay")),
            logger: quiet)
        say("relay      listening on \(relay.url) (SQLite in \(root.appendingPathComponent("relay").path))")
        do {
            try await walkThrough(relayURL: relay.url, root: root, logger: quiet)
        } catch {
            await relay.stop()
            throw error
        }
        await relay.stop()
        say("relay      stopped; demo complete")
    }

    private func walkThrough(relayURL: URL, root: URL, logger: Logger) async throws {
        let alice = try await RallyClient.create(
            home: root.appendingPathComponent("alice"), relayURL: relayURL, displayName: "Alice", logger: logger)
        let bob = try await RallyClient.create(
            home: root.appendingPathComponent("bob"), relayURL: relayURL, displayName: "Bob", logger: logger)
        say("alice      created identity, inbox \(alice.inboxID)")
        say("bob        created identity, inbox \(bob.inboxID)")
        await bob.disconnect()
        say("bob        goes offline")

        for text in ["Hi Bob! Only you can read this.", "Rally seals each message to your key."] {
            let sent = try await alice.sendText(text, to: bob.inboxID)
            say("alice      → bob: \"\(text)\" (stored on the relay as seq \(sent.seq ?? 0), sealed)")
        }

        say("bob        comes back online and catches up from his cursor")
        let report = try await bob.syncInbox()
        for message in report.received {
            say("bob        ← \(message.senderName): \"\(message.displayText)\" (signature verified)")
        }
        let again = try await bob.syncInbox()
        say("bob        syncs again: \(again.received.count) new (each message arrives once)")

        _ = try await bob.sendText("Got both. Hi Alice!", to: alice.inboxID)
        say("bob        → alice: \"Got both. Hi Alice!\"")
        for message in try await alice.syncInbox().received {
            say("alice      ← \(message.senderName): \"\(message.displayText)\"")
        }

        let carol = try await RallyClient.create(
            home: root.appendingPathComponent("carol"), relayURL: relayURL, displayName: "Carol", logger: logger)
        say("carol      created identity, inbox \(carol.inboxID)")
        let group = try await alice.createGroup(name: "Picnic")
        say("alice      created group \"Picnic\" (\(group.groupID)), owner, epoch \(group.state.epoch)")
        for (member, name) in [(bob, "bob"), (carol, "carol")] {
            let state = try await alice.addMember(member.inboxID, to: group.groupID).state
            say("alice      added \(name); the welcome goes to \(name) by direct message (epoch \(state.epoch))")
            _ = try await member.syncInbox()
        }
        _ = try await alice.sendGroupText("Saturday at noon?", to: group.groupID)
        say("alice      → Picnic: \"Saturday at noon?\" (one envelope on the relay for everyone)")
        for (member, name) in [(bob, "bob"), (carol, "carol")] {
            for message in try await member.syncGroup(group.groupID).messages {
                say(
                    "\(name.padding(toLength: 10, withPad: " ", startingAt: 0)) ← Picnic/\(message.senderName): \"\(message.displayText)\""
                )
            }
        }
        let after = try await alice.removeMember(carol.inboxID, from: group.groupID).state
        say("alice      removed carol: new epoch \(after.epoch) with a fresh key sealed to alice and bob only")
        _ = try await alice.sendGroupText("Just us two now.", to: group.groupID)
        let carolReport = try await carol.syncGroup(group.groupID)
        say(
            "carol      reads the group: \(carolReport.messages.count) new messages (she has no key for epoch \(after.epoch))"
        )
        for message in try await bob.syncGroup(group.groupID).messages {
            say("bob        ← Picnic/\(message.senderName): \"\(message.displayText)\"")
        }
        let members = try await bob.group(group.groupID).state.sortedMembers
        say("bob        members: \(members.map { "\($0.identity.displayName) (\($0.role))" }.joined(separator: ", "))")
        for client in [alice, bob, carol] { await client.disconnect() }
    }

    private func say(_ line: String) {
        Output.write(line)
    }
}
