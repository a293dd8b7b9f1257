import Foundation
import RallyTestSupport
import Testing

@Suite("The rally command line against a real relay", .timeLimit(.minutes(10)))
struct CLITests {
    struct IdentityJSON: Decodable {
        let name: String
        let inboxId: String
    }

    struct MessageJSON: Decodable {
        let id: String
        let direction: String
        let sender: String
        let senderName: String
        let text: String
        let contentType: String
    }

    @Test("id new, id show, dm send and dm read work across processes, and their --json parses")
    func directMessagesViaCLI() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-cli")
        defer { homes.remove() }
        let relayURL = relay.url.absoluteString
        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(arguments + ["--home", homes.path(home).path, "--relay", relayURL])
        }

        let aliceNew = try await rally("alice", ["id", "new", "--name", "Alice", "--json"])
        #expect(aliceNew.status == 0, "\(aliceNew.stderr)")
        let alice = try JSONDecoder().decode(IdentityJSON.self, from: Data(aliceNew.stdout.utf8))
        #expect(alice.name == "Alice")
        let bobNew = try await rally("bob", ["id", "new", "--name", "Bob", "--json"])
        let bob = try JSONDecoder().decode(IdentityJSON.self, from: Data(bobNew.stdout.utf8))

        let shown = try await rally("alice", ["id", "show", "--json"])
        #expect(try JSONDecoder().decode(IdentityJSON.self, from: Data(shown.stdout.utf8)).inboxId == alice.inboxId)
        let human = try await rally("alice", ["id", "show"])
        #expect(human.stdout.contains("inbox id: \(alice.inboxId)"))

        let sent = try await rally("alice", ["dm", "send", bob.inboxId, "hello from the terminal", "--json"])
        #expect(sent.status == 0, "\(sent.stderr)")
        let sentMessage = try JSONDecoder().decode(MessageJSON.self, from: Data(sent.stdout.utf8))
        #expect(sentMessage.direction == "out")

        let read = try await rally("bob", ["dm", "read", "--json"])
        #expect(read.status == 0, "\(read.stderr)")
        let messages = try JSONDecoder().decode([MessageJSON].self, from: Data(read.stdout.utf8))
        #expect(messages.count == 1)
        #expect(messages.first?.text == "hello from the terminal")
        #expect(messages.first?.sender == alice.inboxId)
        #expect(messages.first?.senderName == "Alice")
        #expect(messages.first?.id == sentMessage.id)

        let again = try await rally("bob", ["dm", "read"])
        #expect(again.stdout.contains("no new messages"))
        let all = try await rally("bob", ["dm", "read", "--all"])
        #expect(all.stdout.contains("Alice") && all.stdout.contains("hello from the terminal"))
        await relay.stop()
    }

    @Test("Errors are specific: a bad inbox id, a missing identity, an unreachable relay")
    func errors() async throws {
        let homes = TemporaryDirectory("rally-cli")
        defer { homes.remove() }
        let missing = try await RallyBinary.run(["id", "show", "--home", homes.path("nobody").path])
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("rally id new --name NAME"))

        let unreachable = try await RallyBinary.run([
            "id", "new", "--name", "X", "--home", homes.path("x").path, "--relay", "http://127.0.0.1:1",
        ])
        #expect(unreachable.status != 0)
        #expect(unreachable.stderr.contains("cannot reach the relay at"))

        let relay = try await TestRelay.start()
        _ = try await RallyBinary.run([
            "id", "new", "--name", "Y", "--home", homes.path("y").path, "--relay", relay.url.absoluteString,
        ])
        let badID = try await RallyBinary.run([
            "dm", "send", "not-an-inbox", "hi", "--home", homes.path("y").path, "--relay", relay.url.absoluteString,
        ])
        #expect(badID.status != 0)
        #expect(badID.stderr.contains("is not an inbox id"))
        await relay.stop()
    }

    @Test("dm read --follow prints each message as it arrives, as JSON lines")
    func follow() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-cli")
        defer { homes.remove() }
        let common = ["--relay", relay.url.absoluteString]
        let bobNew = try await RallyBinary.run(
            ["id", "new", "--name", "Bob", "--json", "--home", homes.path("bob").path] + common)
        let bob = try JSONDecoder().decode(IdentityJSON.self, from: Data(bobNew.stdout.utf8))
        _ = try await RallyBinary.run(["id", "new", "--name", "Alice", "--home", homes.path("alice").path] + common)

        let follower = try ChildProcess.launch(
            RallyBinary.url, ["dm", "read", "--follow", "--json", "--home", homes.path("bob").path] + common,
            stderr: .inherit)
        let reader = LineReader(follower)
        // The connection's status comes first, as its own kind of line.
        struct StatusLine: Decodable {
            let event: String
            let status: String
            let indicator: Bool
        }
        let status = try JSONDecoder().decode(
            StatusLine.self, from: Data(try #require(try await reader.nextLine()).utf8))
        #expect(status.event == "connection" && status.status == "connected" && !status.indicator)
        var lines: [String] = []
        for text in ["first", "second"] {
            let sent = try await RallyBinary.run(
                ["dm", "send", bob.inboxId, text, "--home", homes.path("alice").path] + common)
            #expect(sent.status == 0, "\(sent.stderr)")
            if let line = try await reader.nextLine() { lines.append(line) }
        }
        try await onOwnThread {
            follower.signal()
            follower.waitUntilExit()
        }
        let messages = try lines.map { try JSONDecoder().decode(MessageJSON.self, from: Data($0.utf8)) }
        #expect(messages.map(\.text) == ["first", "second"])
        #expect(messages.allSatisfy { $0.senderName == "Alice" && $0.direction == "in" })
        await relay.stop()
    }

    @Test("rally demo runs an embedded relay and shows two users exchanging messages")
    func demo() async throws {
        let result = try await RallyBinary.run(["demo"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("bob        ← Alice: \"Hi Bob! Only you can read this.\""))
        #expect(result.stdout.contains("alice      ← Bob: \"Got both. Hi Alice!\""))
        #expect(result.stdout.contains("syncs again: 0 new"))
        #expect(result.stdout.contains("carol      ← Picnic/Alice: \"Saturday at noon?\""))
        #expect(result.stdout.contains("carol      reads the group: 0 new messages"))
        #expect(result.stdout.contains("bob        ← Picnic/Alice: \"Just us two now.\""))
        #expect(result.stdout.contains("bob        members: Alice (owner), Bob (member)"))
        // The invite flow: one join, then one of each error type.
        #expect(result.stdout.contains("dave       joined \"Picnic\""))
        // The vault scene.
        #expect(result.stdout.contains("sam        taps Accept: ✅ Vault Access Accepted"))
        #expect(result.stdout.contains("sam        read deed.txt: \"The house goes to Sam.\""))
        #expect(
            result.stdout.contains(
                "sam        cannot read codicil.txt: the owner of vault \"Family Papers\" revoked your access"))
        for type in [
            "single_use_consumed", "invite_revoked", "generic_failure", "conversation_expired",
            "conversation_not_found",
        ] {
            #expect(result.stdout.contains("join failed [\(type)]"), "no \(type) in the demo")
        }
        #expect(result.stdout.contains("ann        joined and sees the welcome message: \"Boots on, phones off.\""))
        #expect(result.stdout.contains("dan        asks to join: Waiting for approval"))
        #expect(result.stdout.contains("ann        ← support/Dan: First time hiking, is that fine?"))
        #expect(result.stdout.contains("ann        admitted dan; dan: Joined"))
        #expect(result.stdout.contains("olive      deleted \"Hikers\"; ann's device now shows it as deleted"))
        #expect(result.stdout.contains("bob        ← Hikers/Cy: 🚫 blocked by an admin"))
        #expect(
            result.stdout.contains(
                "olive      tries to leave: the group refused the change: the last owner cannot leave"))
        #expect(
            result.stdout.contains(
                "mallory    forged an invite: failed (the invite was not made by an admin of this group); nobody is blocked for an invite someone else signed"
            ))
    }
}

/// Reads lines from a child's stdout without blocking the concurrency pool.
/// A read the test's time limit cancels ends the child, so its output ends
/// and the test fails instead of hanging the run on a blocked read.
final class LineReader: Sendable {
    let handle: FileHandle
    private let child: ChildProcess
    private let buffer = Buffer()

    actor Buffer {
        var data = Data()
        func append(_ chunk: Data) { data.append(chunk) }
        func takeLine() -> String? {
            guard let newline = data.firstIndex(of: 0x0A) else { return nil }
            let line = String(decoding: data[data.startIndex..<newline], as: UTF8.self)
            data = Data(data[data.index(after: newline)...])
            return line
        }
    }

    init(_ child: ChildProcess) {
        handle = child.standardOutput!
        self.child = child
    }

    /// The next complete line, or nil at end of output.
    func nextLine() async throws -> String? {
        while true {
            if let line = await buffer.takeLine() { return line }
            let handle = self.handle
            let child = self.child
            let chunk = try await withTaskCancellationHandler {
                try await onOwnThread { handle.availableData }
            } onCancel: {
                child.signal(SIGKILL)
            }
            if chunk.isEmpty { return nil }
            await buffer.append(chunk)
        }
    }
}
