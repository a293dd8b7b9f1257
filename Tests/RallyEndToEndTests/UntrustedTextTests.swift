import Foundation
import RallyCLI
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

/// What other people write reaches the terminal escaped, under the names
/// the group signed.
@Suite("Untrusted text in the CLI", .timeLimit(.minutes(2)))
struct UntrustedTextTests {
    struct MessageJSON: Decodable {
        let text: String
        let senderName: String
    }
    struct GroupJSON: Decodable { let name: String }

    static let hostile = "\u{1B}[2J\rAlice: send me your keys\u{202E}txt.exe\u{9B}31m\u{7F}"

    /// No byte a terminal would act on: ESC, CR, C1 (as UTF-8), DEL, or a
    /// bidi override.
    static func isInert(_ output: String) -> Bool {
        !output.unicodeScalars.contains { scalar in
            (scalar.value < 0x20 && scalar != "\n") || (0x7F...0x9F).contains(scalar.value)
                || (0x202A...0x202E).contains(scalar.value) || (0x2066...0x2069).contains(scalar.value)
        }
    }

    @Test("Control characters and bidi overrides are escaped in text, names and group names")
    func escaping() {
        #expect(
            TerminalText.escaped(Self.hostile)
                == "\\u{1b}[2J\\rAlice: send me your keys\\u{202e}txt.exe\\u{9b}31m\\u{7f}")
        #expect(TerminalText.escaped("two\nlines\tand tab") == "two\\nlines\\tand tab")
        #expect(TerminalText.escaped("ok\nkept", keepingNewlines: true) == "ok\nkept")
        #expect(TerminalText.escaped("héllo wörld ✓ 日本") == "héllo wörld ✓ 日本")
        let json = TerminalText.jsonSafe("{\"a\":\"x\u{202E}y\u{9B}z\u{7F}\"}")
        #expect(json == "{\"a\":\"x\\u202ey\\u009bz\\u007f\"}")
        let decoded = try? JSONDecoder().decode([String: String].self, from: Data(json.utf8))
        #expect(decoded?["a"] == "x\u{202E}y\u{9B}z\u{7F}")
    }

    @Test("A member whose key bundle says \"Alice\" is shown under their member record's name, its text escaped")
    func impostorAndEscapes() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-untrusted")
        defer { homes.remove() }
        let carol = try await RallyClient.create(
            home: homes.path("carol"), relayURL: relay.url, displayName: "Carol", logger: TestLogger.quiet)
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: relay.url, displayName: "Bob", logger: TestLogger.quiet)
        let groupName = "Picnic\u{1B}]0;pwned\u{7}\u{202E}"
        let group = try await carol.createGroup(name: groupName)
        _ = try await carol.addMember(bob.inboxID, to: group.groupID)
        _ = try await bob.syncInbox()

        // Bob signs a message with his own keys but the name "Alice".
        let record = try await bob.group(group.groupID)
        let key = try #require(try bob.store.epochKey(group: group.groupID, epoch: record.state.epoch))
        let impostor = try Identity(
            signingKeyBytes: bob.identity.signingKey.rawRepresentation,
            agreementKeyBytes: bob.identity.agreementKey.rawRepresentation, displayName: "Alice",
            createdAt: bob.identity.createdAt)
        var body = WireMessageBody()
        body.messageID = MessageSealing.newMessageID()
        body.sender = impostor.publicIdentity.wireBundle
        body.recipient = group.groupID
        body.sentAtMs = Int64(Date().timeIntervalSince1970 * 1000)
        body.content = try TextCodec().encode(Self.hostile)
        var entry = WireGroupLogEntry()
        entry.message = try EpochKeys.encrypt(
            MessageSealing.sign(body, by: impostor), key: key, groupID: group.groupID, epoch: record.state.epoch)
        let connection = try await bob.connected()
        _ = try await connection.publish(
            topic: record.topic, payload: FrameCodec.encode(entry), idempotencyKey: body.messageID, shouldPush: false,
            expiresAt: nil, access: record.topicAccess, control: false, expectedControlSeq: 0, rotateAccessKey: nil)
        await bob.disconnect()
        await carol.disconnect()

        func rally(_ arguments: [String]) async throws -> RallyBinary.Result {
            let result = try await RallyBinary.run(
                arguments + ["--home", homes.path("carol").path, "--relay", relay.url.absoluteString])
            #expect(result.status == 0, "rally \(arguments.joined(separator: " ")): \(result.stderr)")
            return result
        }
        let human = try await rally(["group", "read", group.groupID])
        #expect(human.stdout.contains("Bob ("))
        #expect(!human.stdout.contains("Alice ("))
        #expect(human.stdout.contains("\\u{1b}[2J\\rAlice: send me your keys\\u{202e}txt.exe\\u{9b}31m\\u{7f}"))
        #expect(Self.isInert(human.stdout))

        let json = try await rally(["group", "read", group.groupID, "--all", "--json"])
        #expect(Self.isInert(json.stdout))
        let messages = try JSONDecoder().decode([MessageJSON].self, from: Data(json.stdout.utf8))
        #expect(messages.map(\.senderName) == ["Bob"])
        #expect(messages.map(\.text) == [Self.hostile])

        let list = try await rally(["group", "list", "--offline"])
        #expect(list.stdout.contains("Picnic\\u{1b}]0;pwned\\u{7}\\u{202e}"))
        #expect(Self.isInert(list.stdout))
        let listJSON = try await rally(["group", "list", "--offline", "--json"])
        #expect(Self.isInert(listJSON.stdout))
        #expect(try JSONDecoder().decode([GroupJSON].self, from: Data(listJSON.stdout.utf8)).map(\.name) == [groupName])
        let members = try await rally(["group", "members", group.groupID])
        #expect(Self.isInert(members.stdout))

        // An error quoting the group's name is escaped too.
        let removed = try await RallyBinary.run(
            [
                "group", "send", "no-such-group\u{1B}[2J", "x", "--home", homes.path("carol").path, "--relay",
                relay.url.absoluteString,
            ])
        #expect(removed.status != 0)
        #expect(removed.stderr.contains("no-such-group\\u{1b}[2J"))
        #expect(Self.isInert(removed.stderr))
        await relay.stop()
    }

    @Test("A direct message's sender name and text are escaped; --json stays valid and exact")
    func directMessages() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-untrusted-dm")
        defer { homes.remove() }
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: relay.url, displayName: "Alice", logger: TestLogger.quiet)
        let mallory = try await RallyClient.create(
            home: homes.path("mallory"), relayURL: relay.url, displayName: "\u{1B}[32mAlice\u{1B}[0m",
            logger: TestLogger.quiet)
        _ = try await mallory.sendText(Self.hostile, to: alice.inboxID)
        await mallory.disconnect()
        await alice.disconnect()
        let arguments = ["--home", homes.path("alice").path, "--relay", relay.url.absoluteString]
        let human = try await RallyBinary.run(["dm", "read", "--all"] + arguments)
        #expect(human.status == 0)
        #expect(human.stdout.contains("\\u{1b}[32mAlice\\u{1b}[0m ("))
        #expect(Self.isInert(human.stdout))
        let json = try await RallyBinary.run(["dm", "read", "--all", "--json"] + arguments)
        #expect(Self.isInert(json.stdout))
        let messages = try JSONDecoder().decode([MessageJSON].self, from: Data(json.stdout.utf8))
        #expect(messages.map(\.text) == [Self.hostile])
        #expect(messages.map(\.senderName) == ["\u{1B}[32mAlice\u{1B}[0m"])
        await relay.stop()
    }
}
