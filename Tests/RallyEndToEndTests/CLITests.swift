import Foundation
import RallyTestSupport
import Testing

@Suite("The rally command line against a real relay")
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
        func rally(_ home: String, _ arguments: [String]) throws -> RallyBinary.Result {
            try RallyBinary.run(arguments + ["--home", homes.path(home).path, "--relay", relayURL])
        }

        let aliceNew = try rally("alice", ["id", "new", "--name", "Alice", "--json"])
        #expect(aliceNew.status == 0, "\(aliceNew.stderr)")
        let alice = try JSONDecoder().decode(IdentityJSON.self, from: Data(aliceNew.stdout.utf8))
        #expect(alice.name == "Alice")
        let bobNew = try rally("bob", ["id", "new", "--name", "Bob", "--json"])
        let bob = try JSONDecoder().decode(IdentityJSON.self, from: Data(bobNew.stdout.utf8))

        let shown = try rally("alice", ["id", "show", "--json"])
        #expect(try JSONDecoder().decode(IdentityJSON.self, from: Data(shown.stdout.utf8)).inboxId == alice.inboxId)
        let human = try rally("alice", ["id", "show"])
        #expect(human.stdout.contains("inbox id: \(alice.inboxId)"))

        let sent = try rally("alice", ["dm", "send", bob.inboxId, "hello from the terminal", "--json"])
        #expect(sent.status == 0, "\(sent.stderr)")
        let sentMessage = try JSONDecoder().decode(MessageJSON.self, from: Data(sent.stdout.utf8))
        #expect(sentMessage.direction == "out")

        let read = try rally("bob", ["dm", "read", "--json"])
        #expect(read.status == 0, "\(read.stderr)")
        let messages = try JSONDecoder().decode([MessageJSON].self, from: Data(read.stdout.utf8))
        #expect(messages.count == 1)
        #expect(messages.first?.text == "hello from the terminal")
        #expect(messages.first?.sender == alice.inboxId)
        #expect(messages.first?.senderName == "Alice")
        #expect(messages.first?.id == sentMessage.id)

        let again = try rally("bob", ["dm", "read"])
        #expect(again.stdout.contains("no new messages"))
        let all = try rally("bob", ["dm", "read", "--all"])
        #expect(all.stdout.contains("Alice") && all.stdout.contains("hello from the terminal"))
        await relay.stop()
    }

    @Test("Errors are specific: a bad inbox id, a missing identity, an unreachable relay")
    func errors() async throws {
        let homes = TemporaryDirectory("rally-cli")
        defer { homes.remove() }
        let missing = try RallyBinary.run(["id", "show", "--home", homes.path("nobody").path])
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("rally id new --name NAME"))

        let unreachable = try RallyBinary.run([
            "id", "new", "--name", "X", "--home", homes.path("x").path, "--relay", "http://127.0.0.1:1",
        ])
        #expect(unreachable.status != 0)
        #expect(unreachable.stderr.contains("cannot reach the relay at"))

        let relay = try await TestRelay.start()
        _ = try RallyBinary.run(["id", "new", "--name", "Y", "--home", homes.path("y").path, "--relay", relay.url.absoluteString])
        let badID = try RallyBinary.run([
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
        let bobNew = try RallyBinary.run(["id", "new", "--name", "Bob", "--json", "--home", homes.path("bob").path] + common)
        let bob = try JSONDecoder().decode(IdentityJSON.self, from: Data(bobNew.stdout.utf8))
        _ = try RallyBinary.run(["id", "new", "--name", "Alice", "--home", homes.path("alice").path] + common)

        let follower = Process()
        follower.executableURL = RallyBinary.url
        follower.arguments = ["dm", "read", "--follow", "--json", "--home", homes.path("bob").path] + common
        let out = Pipe()
        follower.standardOutput = out
        try follower.run()
        defer {
            follower.terminate()
            follower.waitUntilExit()
        }
        var lines: [String] = []
        var buffer = Data()
        for text in ["first", "second"] {
            let sent = try RallyBinary.run(["dm", "send", bob.inboxId, text, "--home", homes.path("alice").path] + common)
            #expect(sent.status == 0, "\(sent.stderr)")
            while lines.count < (text == "first" ? 1 : 2) {
                let chunk = out.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: 0x0A) {
                    lines.append(String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self))
                    buffer = Data(buffer[buffer.index(after: newline)...])
                }
            }
        }
        let messages = try lines.map { try JSONDecoder().decode(MessageJSON.self, from: Data($0.utf8)) }
        #expect(messages.map(\.text) == ["first", "second"])
        #expect(messages.allSatisfy { $0.senderName == "Alice" && $0.direction == "in" })
        await relay.stop()
    }

    @Test("rally demo runs an embedded relay and shows two users exchanging messages")
    func demo() throws {
        let result = try RallyBinary.run(["demo"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("bob        ← Alice: \"Hi Bob! Only you can read this.\""))
        #expect(result.stdout.contains("alice      ← Bob: \"Got both. Hi Alice!\""))
        #expect(result.stdout.contains("syncs again: 0 new"))
    }
}
