import Foundation
import RallyTestSupport
import Testing

/// `rally group link|pending|admit|support|add|invitations|accept|prefs|
/// react|delete` and `rally join --preview`, as a person runs them, with
/// `--json`, against a real relay and a watching admin.
@Suite("rally group admission, link, invitation and preference commands", .timeLimit(.minutes(10)))
struct GroupAdmissionCLITests {
    struct LinkJSON: Decodable {
        let link: String
        let role: String
        let admission: String
        let imageSha256: String?
    }
    struct PreviewJSON: Decodable {
        let name: String
        let approval: Bool
    }
    struct PendingJSON: Decodable { let inboxId: String }
    struct SupportJSON: Decodable { let text: String }
    struct InvitationJSON: Decodable {
        let groupName: String
        let answer: String
    }
    struct ResultJSON: Decodable { let result: String }
    struct ErrorJSON: Decodable { let error: String }
    struct MemberJSON: Decodable {
        let inboxId: String
        let status: String
        let role: String
    }
    struct PreferenceJSON: Decodable {
        let key: String
        let enabled: Bool
    }
    struct MessageJSON: Decodable { let id: String }
    typealias Bench = InviteCLITests.Bench

    @Test(
        "a link with approval: preview, the queue, a support message, admit; an invitation accepted; preferences; delete — each with --json and the seed's error words"
    )
    func flow() async throws {
        let b = try await InviteCLITests.bench()
        _ = try await b.identity("alice")
        let bob = try await b.identity("bob")
        let carol = try await b.identity("carol")
        let group = try b.json(
            InviteCLITests.GroupJSON.self, try await b.rally("alice", ["group", "create", "Picnic", "--json"]).stdout
        ).groupId

        // No link yet: exit status 4 and the seed's error code.
        let none = try await b.rally("alice", ["group", "link", "show", "Picnic", "--json"], expect: 4)
        #expect(try b.json(ErrorJSON.self, none.stdout).error == "group_link_not_found")
        #expect(none.stderr.contains("group_link_not_found"))
        let link = try b.json(
            LinkJSON.self,
            try await b.rally("alice", ["group", "link", "create", "Picnic", "--approval", "--json"]).stdout)
        #expect(link.admission == "approval" && link.role == "member")
        let twice = try await b.rally("alice", ["group", "link", "create", "Picnic"], expect: 5)
        #expect(twice.stderr.contains("duplicate_group_link"))

        // The preview, before anything is sent.
        let preview = try b.json(
            PreviewJSON.self, try await b.rally("carol", ["join", "--preview", link.link, "--json"]).stdout)
        #expect(preview.name == "Picnic" && preview.approval)

        let (watcher, reader) = try await b.startWatch("alice")
        _ = try await b.rally("carol", ["join", link.link, "--no-wait", "--json"])
        while let line = try await reader.nextLine() {
            let event = try b.json(InviteCLITests.WatchEventJSON.self, line)
            if event.event == "join_request" {
                #expect(event.outcome == "pending")
                break
            }
        }
        let pending = try b.json(
            [PendingJSON].self, try await b.rally("alice", ["group", "pending", "Picnic", "--json"]).stdout)
        #expect(pending.map(\.inboxId) == [carol])
        let status = try b.json(
            [InviteCLITests.AttemptJSON].self, try await b.rally("carol", ["join", "status", "--json"]).stdout)
        #expect(status.first?.state == "awaitingApproval" && status.first?.groupId == group)
        _ = try await b.rally("carol", ["group", "support", group, carol, "send", "Hello, may I join?", "--json"])
        let chat = try b.json(
            [SupportJSON].self,
            try await b.rally("alice", ["group", "support", "Picnic", carol, "read", "--json"]).stdout)
        #expect(chat.map(\.text) == ["Hello, may I join?"])
        _ = try await b.rally("alice", ["group", "admit", "Picnic", carol, "--role", "observer", "--json"])
        let joined = try b.json(
            [InviteCLITests.AttemptJSON].self, try await b.rally("carol", ["join", "status", "--json"]).stdout)
        #expect(joined.first?.state == "joined")

        // An invitation: Bob is invited until he accepts.
        _ = try await b.rally("alice", ["group", "add", "Picnic", bob, "--json"])
        let members = try b.json(
            [MemberJSON].self, try await b.rally("alice", ["group", "members", "Picnic", "--json"]).stdout)
        #expect(members.first { $0.inboxId == bob }?.status == "invited")
        #expect(members.first { $0.inboxId == carol }?.role == "observer")
        let invitations = try b.json(
            [InvitationJSON].self, try await b.rally("bob", ["group", "invitations", "--json"]).stdout)
        #expect(invitations.map(\.groupName) == ["Picnic"] && invitations.first?.answer == "open")
        let accepted = try b.json(
            ResultJSON.self,
            try await b.rally("bob", ["group", "accept", "Picnic", "--timeout", RallyBinary.waitTimeout, "--json"])
                .stdout)
        #expect(accepted.result == "joined")

        // Preferences: reactions off; Bob's reaction is refused in words.
        let rows = try b.json(
            [PreferenceJSON].self,
            try await b.rally(
                "alice", ["group", "prefs", "Picnic", "--set", "reactions=off", "--set", "timed_messages=1h", "--json"]
            ).stdout)
        #expect(rows.first { $0.key == "reactions" }?.enabled == false)
        #expect(rows.first { $0.key == "timed_messages" }?.enabled == true)
        let message = try b.json(
            MessageJSON.self, try await b.rally("alice", ["group", "send", "Picnic", "Sunday?", "--json"]).stdout)
        let react = try await b.rally("bob", ["group", "react", group, message.id, "👍"], expect: 1)
        #expect(react.stderr.contains("reactions are off in this group"))

        // Delete: every member is told; Bob can no longer send.
        _ = try await b.rally("alice", ["group", "delete", "Picnic", "--json"])
        let refused = try await b.rally("bob", ["group", "send", group, "anyone?"], expect: 1)
        #expect(refused.stderr.contains("group_not_found"))
        try await b.stop(watcher)
        await b.relay.stop()
        b.homes.remove()
    }
}
