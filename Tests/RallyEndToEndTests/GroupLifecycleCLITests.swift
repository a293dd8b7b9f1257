import Foundation
import RallyTestSupport
import Testing

@Suite("rally group lifecycle commands against a real relay", .timeLimit(.minutes(3)))
struct GroupLifecycleCLITests {
    struct IdentityJSON: Decodable { let inboxId: String }
    struct GroupJSON: Decodable {
        let groupId: String
        let name: String
        let fullName: String
        let description: String
        let imageDigest: String?
        let welcomeMessage: String
        let blocked: [String]
        let memberCount: Int
    }
    struct MessageJSON: Decodable { let text: String }

    @Test(
        "create with a profile and image, profile, role in batch, block, welcome, remove with messages, leave: each with --json and a clear refusal"
    )
    func lifecycle() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-group-lifecycle-cli")
        defer { homes.remove() }
        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(
                arguments + ["--home", homes.path(home).path, "--relay", relay.url.absoluteString])
        }
        func json<T: Decodable>(_ type: T.Type, _ home: String, _ arguments: [String]) async throws -> T {
            let result = try await rally(home, arguments + ["--json"])
            #expect(result.status == 0, "rally \(arguments.joined(separator: " ")): \(result.stderr)")
            return try JSONDecoder().decode(type, from: Data(result.stdout.utf8))
        }
        _ = try await rally("olive", ["id", "new", "--name", "Olive"])
        let ann = try await json(IdentityJSON.self, "ann", ["id", "new", "--name", "Ann"]).inboxId
        let bob = try await json(IdentityJSON.self, "bob", ["id", "new", "--name", "Bob"]).inboxId
        let image = homes.path("logo.png")
        try Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3]).write(to: image)
        let notImage = homes.path("logo.svg")
        try Data("<svg/>".utf8).write(to: notImage)

        let refusedImage = try await rally("olive", ["group", "create", "Hikers", "--image", notImage.path])
        #expect(refusedImage.status != 0 && refusedImage.stderr.contains("is not a PNG, JPEG, GIF or WebP image"))
        let created = try await json(
            GroupJSON.self, "olive",
            [
                "group", "create", "Hikers", "--full-name", "The Sunday Hikers", "--description", "walks", "--image",
                image.path,
            ])
        #expect(created.fullName == "The Sunday Hikers" && created.imageDigest?.count == 64)
        let group = created.groupId
        for member in [ann, bob] {
            #expect(try await rally("olive", ["group", "add", group, member, "--direct"]).status == 0)
        }
        for home in ["ann", "bob"] { #expect(try await rally(home, ["group", "list"]).status == 0) }
        let seen = try await json(GroupJSON.self, "ann", ["group", "profile", group])
        #expect(seen.fullName == "The Sunday Hikers" && seen.imageDigest == created.imageDigest)
        let notOwner = try await rally("ann", ["group", "profile", group, "--name", "Mine"])
        #expect(notOwner.status != 0 && notOwner.stderr.contains("needs role owner, author is member"))

        let roles = try await rally("olive", ["group", "role", group, "moderator", ann, bob])
        #expect(roles.stdout.contains("2 members are now moderator"), "\(roles.stderr)")
        #expect(try await rally("bob", ["group", "send", group, "rude words"]).status == 0)
        let blocked = try await json(GroupJSON.self, "ann", ["group", "block", group, bob])
        #expect(blocked.blocked == [bob])
        let read = try await json([MessageJSON].self, "olive", ["group", "read", group, "--all"])
        #expect(read.map(\.text) == ["🚫 blocked by an admin"])

        let welcome = try await json(GroupJSON.self, "olive", ["group", "welcome", group, "Boots on."])
        #expect(welcome.welcomeMessage == "Boots on.")
        let lastOwner = try await rally("olive", ["group", "leave", group])
        #expect(lastOwner.status != 0 && lastOwner.stderr.contains("the last owner cannot leave"))

        let removed = try await json(
            GroupJSON.self, "olive", ["group", "remove", group, bob, "--with-messages", "--ban"])
        #expect(removed.memberCount == 2)
        #expect(try await json([MessageJSON].self, "olive", ["group", "read", group, "--all"]).isEmpty)
        let left = try await rally("ann", ["group", "leave", group])
        #expect(left.stdout.contains("left \"Hikers\""), "\(left.stderr)")
        await relay.stop()
    }
}
