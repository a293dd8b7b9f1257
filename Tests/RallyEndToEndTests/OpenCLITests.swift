import Foundation
import RallyCore
import RallyTestSupport
import Testing

@Suite("rally open: one router for every link", .timeLimit(.minutes(10)))
struct OpenCLITests {
    struct InviteJSON: Decodable {
        let groupId: String
        let slug: String
        let link: String
        let webLink: String
    }
    /// A line `rally join --json` prints: a state, and for an attempt its group.
    struct StateJSON: Decodable, Equatable {
        let state: String
        let groupId: String?
        let errorType: String?
    }

    /// Every file under `directory`, by relative path, with its bytes.
    static func snapshot(_ directory: URL) -> [String: Data] {
        var files: [String: Data] = [:]
        let root = directory.resolvingSymlinksInPath().path
        let enumerator = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)
        while let url = enumerator?.nextObject() as? URL {
            let path = url.resolvingSymlinksInPath().path
            files[String(path.dropFirst(root.count))] = (try? Data(contentsOf: url)) ?? Data()
        }
        return files
    }

    @Test("an invite link through `rally open` joins exactly as `rally join` does, app and web form")
    func openJoinsLikeJoin() async throws {
        let b = try await InviteCLITests.bench()
        for name in ["alice", "bob", "carol", "dave", "erin"] { _ = try await b.identity(name) }
        _ = try await b.rally("alice", ["group", "create", "Picnic"])
        let invite = try b.json(
            InviteJSON.self, try await b.rally("alice", ["invite", "create", "Picnic", "--json"]).stdout)
        let (watcher, _) = try await b.startWatch("alice")

        func states(_ result: RallyBinary.Result) throws -> [StateJSON] {
            try result.stdout.split(separator: "\n").map { try b.json(StateJSON.self, String($0)) }
        }
        let joined = try await b.rally("bob", ["join", invite.link, "--json", "--timeout", RallyBinary.waitTimeout])
        let opened = try await b.rally("carol", ["open", invite.link, "--json", "--timeout", RallyBinary.waitTimeout])
        #expect(try states(opened) == states(joined))
        #expect(try states(opened).map(\.state) == ["validating", "joining", "joined"])
        #expect(try states(opened).last?.groupId == invite.groupId)

        // The web link, printed for people: the same lines, word for word.
        let joinedWeb = try await b.rally("dave", ["join", invite.webLink, "--timeout", RallyBinary.waitTimeout])
        let openedWeb = try await b.rally("erin", ["open", invite.webLink, "--timeout", RallyBinary.waitTimeout])
        #expect(openedWeb.stdout == joinedWeb.stdout)
        #expect(openedWeb.stdout.contains("joined \"Picnic\" (group id \(invite.groupId))"))
        try await b.stop(watcher)

        for name in ["carol", "erin"] {
            #expect(try await b.rally(name, ["group", "list"]).stdout.contains(invite.groupId))
        }
        // A damaged invite in a well-formed link also fails as `rally join` fails.
        let damaged = "rally://join/" + String(invite.slug.dropLast(4)) + "AAAA"
        let joinDamaged = try await b.rally("bob", ["join", damaged], expect: 1)
        _ = try await b.rally("carol", ["open", damaged], expect: 1)
        #expect(joinDamaged.stdout.contains("Nothing was sent") || joinDamaged.stdout.contains("cannot be used"))
        await b.relay.stop()
        b.homes.remove()
    }

    @Test("a malformed link exits 1 with the router's error on stderr and leaves the home as it was")
    func malformedLinksChangeNothing() async throws {
        let b = try await InviteCLITests.bench()
        _ = try await b.identity("alice")
        _ = try await b.identity("bob")
        _ = try await b.rally("alice", ["group", "create", "Picnic"])
        let invite = try b.json(
            InviteJSON.self, try await b.rally("alice", ["invite", "create", "Picnic", "--json"]).stdout)
        let token = NomineeToken.random().text
        let cut = String(invite.slug.prefix(invite.slug.count / 2))
        let cutProblem: String
        do throws(InviteError) {
            _ = try InviteSlug.decode(cut)
            cutProblem = "decoded"
        } catch {
            cutProblem = error.description
        }
        let cases: [(String, DeepLinkError)] = [
            ("rally://nominee/invite?token=abc&vault=Family", .invalidToken(.length(characters: 3))),
            ("rally://nominee/invite?vault=Family&token=\(token)&utm_source=x", .unknownParameter("utm_source")),
            ("rally://nominee/invite?vault=Family", .missingParameter("token")),
            ("rally://nominee/invite?vault=Fam%0Aily&token=\(token)", .invalidVaultName(.controlCharacter)),
            ("rally://nominee/invite?vault=F&token=\(token)&status=maybe", .invalidStatus("maybe")),
            ("rally://join/\(cut)", .invalidJoinLink(cutProblem)),
            (
                "rally://join/\(invite.slug)?x=1",
                .invalidJoinLink("expected rally://join/<invite> with nothing after the invite")
            ),
            ("rally://vault/Family", .unknownLink("vault/Family")),
            ("ftp://example.com/join/\(invite.slug)", .unknownScheme("ftp")),
            (invite.slug, .notALink),
            (
                "rally://join/" + String(repeating: "A", count: DeepLinkRouter.maxLinkCharacters),
                .tooLong(DeepLinkRouter.maxLinkCharacters + 13)
            ),
        ]
        let home = b.homes.path("bob")
        let before = Self.snapshot(home)
        #expect(!before.isEmpty)
        for (link, problem) in cases {
            let result = try await b.rally("bob", ["open", link, "--json"], expect: 1)
            #expect(result.stderr.contains(problem.description), "\(link.prefix(50)): \(result.stderr)")
            #expect(!result.stderr.contains(token))
            #expect(result.stdout.isEmpty)
            #expect(Self.snapshot(home) == before, "\(link.prefix(50)) changed the home")
        }
        // A well-formed nominee link for an invitation Bob never received.
        let nominee = try NomineeInviteLink(token: .random(), vaultName: "Family", status: .pending)
        let pending = try await b.rally("bob", ["open", nominee.url], expect: 1)
        #expect(pending.stderr.contains("no vault invitation with this token was sent to you"))
        #expect(!pending.stderr.contains(nominee.token.text))
        await b.relay.stop()
        b.homes.remove()
    }
}
