import Foundation
import RallyTestSupport
import Testing

@Suite("rally group commands against a real relay", .timeLimit(.minutes(10)))
struct GroupCLITests {
    struct IdentityJSON: Decodable { let inboxId: String }
    struct GroupJSON: Decodable {
        let groupId: String
        let name: String
        let epoch: UInt64
        let status: String
        let myRole: String?
        let memberCount: Int
    }
    struct MemberJSON: Decodable {
        let inboxId: String
        let name: String
        let role: String
        let status: String
    }
    struct MessageJSON: Decodable {
        let text: String
        let senderName: String
        let conversation: String
    }

    @Test("create, add, send, read, members, list and remove work across processes with --json")
    func groupFlow() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-group-cli")
        defer { homes.remove() }
        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            let result = try await RallyBinary.run(
                arguments + ["--home", homes.path(home).path, "--relay", relay.url.absoluteString])
            #expect(result.status == 0, "rally \(arguments.joined(separator: " ")): \(result.stderr)")
            return result
        }
        func json<T: Decodable>(_ type: T.Type, _ result: RallyBinary.Result) throws -> T {
            try JSONDecoder().decode(type, from: Data(result.stdout.utf8))
        }
        var inboxes: [String: String] = [:]
        for name in ["alice", "bob", "carol"] {
            inboxes[name] = try json(IdentityJSON.self, try await rally(name, ["id", "new", "--name", name, "--json"]))
                .inboxId
        }
        let created = try json(GroupJSON.self, try await rally("alice", ["group", "create", "Book club", "--json"]))
        #expect(created.name == "Book club" && created.myRole == "owner" && created.memberCount == 1)
        let group = created.groupId
        _ = try await rally("alice", ["group", "add", group, inboxes["bob"]!, "--direct", "--json"])
        _ = try await rally("alice", ["group", "add", group, inboxes["carol"]!, "--role", "moderator", "--direct"])

        let bobGroups = try json([GroupJSON].self, try await rally("bob", ["group", "list", "--json"]))
        #expect(bobGroups.map(\.groupId) == [group])
        #expect(bobGroups.first?.myRole == "member")
        #expect(bobGroups.first?.memberCount == 3)

        _ = try await rally("bob", ["group", "send", group, "chapter one?", "--json"])
        let carolRead = try json([MessageJSON].self, try await rally("carol", ["group", "read", group, "--json"]))
        #expect(carolRead.map(\.text) == ["chapter one?"])
        #expect(carolRead.first?.senderName == "bob")
        #expect(carolRead.first?.conversation == group)

        let members = try json([MemberJSON].self, try await rally("carol", ["group", "members", group, "--json"]))
        #expect(members.map(\.name) == ["alice", "carol", "bob"])
        #expect(members.map(\.role) == ["owner", "moderator", "member"])

        let afterRemoval = try json(
            GroupJSON.self, try await rally("alice", ["group", "remove", group, inboxes["carol"]!, "--json"]))
        #expect(afterRemoval.memberCount == 2)
        _ = try await rally("alice", ["group", "send", group, "carol is gone"])
        let carolAfter = try json([MessageJSON].self, try await rally("carol", ["group", "read", group, "--json"]))
        #expect(carolAfter.isEmpty)
        let carolSend = try await RallyBinary.run([
            "group", "send", group, "hello?", "--home", homes.path("carol").path, "--relay", relay.url.absoluteString,
        ])
        #expect(carolSend.status != 0)
        #expect(carolSend.stderr.contains("you were removed from \"Book club\""))
        let bobRead = try await rally("bob", ["group", "read", "Book club"])
        #expect(bobRead.stdout.contains("alice") && bobRead.stdout.contains("carol is gone"))
        await relay.stop()
    }
}
