import Foundation
import RallyCore
import RallyTestSupport
import Testing

@Suite("rally nominee and rally open: the seed's flow from a terminal", .timeLimit(.minutes(3)))
struct NomineeCLITests {
    struct Identity: Decodable {
        let inboxId: String
    }

    struct Sent: Decodable {
        struct Nominee: Decodable {
            let id: String
            let vaultID: String
            let status: String
        }
        let nominee: Nominee
        let link: String
    }

    struct Nominee: Decodable {
        let name: String
        let status: String
    }

    struct Response: Decodable {
        struct Invitation: Decodable {
            let title: String
            let status: String
        }
        let invitation: Invitation
        let link: String?
    }

    @Test(
        "share → invite without a vault (pre-selected) → open the link (accept) → confirm → the nominee gets the document; list shows every status"
    )
    func seedFlow() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-nominee-cli")
        defer { homes.remove() }
        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(
                arguments + ["--home", homes.path(home).path, "--relay", relay.url.absoluteString])
        }
        func json<T: Decodable>(_ type: T.Type, _ result: RallyBinary.Result) throws -> T {
            #expect(result.status == 0, "\(result.stderr)")
            return try JSONDecoder().decode(type, from: Data(result.stdout.utf8))
        }
        _ = try await rally("owner", ["id", "new", "--name", "Owner"])
        let sam = try json(Identity.self, try await rally("sam", ["id", "new", "--name", "Sam", "--json"]))
        _ = try await rally("owner", ["vault", "create", "Spare"])
        _ = try await rally("owner", ["vault", "create", "Family Papers"])
        let file = homes.path("deed.txt")
        try Data("the deed".utf8).write(to: file)
        #expect(try await rally("owner", ["vault", "add", "Family Papers", file.path]).status == 0)

        // The app hands the vault over; the extension's invite pre-selects it.
        #expect(try await rally("owner", ["vault", "share", "Family Papers"]).status == 0)
        let sent = try json(
            Sent.self,
            try await rally("owner", ["nominee", "invite", "--to", sam.inboxId, "--name", "Sam", "--json"]))
        #expect(sent.nominee.status == "pending")
        let vaults = try await rally("owner", ["vault", "list", "--json"])
        #expect(vaults.stdout.contains(sent.nominee.vaultID))
        #expect(try await rally("owner", ["vault", "pending", "--json"]).stdout.contains("\"pending\":null"))

        let invitations = try await rally("sam", ["nominee", "invitations"])
        #expect(invitations.stdout.contains("🔐 Vault Invitation \"Family Papers\" from Owner"))
        let opened = try json(Response.self, try await rally("sam", ["open", sent.link, "--json"]))
        #expect(opened.invitation.title == "✅ Vault Access Accepted")
        #expect(opened.link?.contains("status=accepted") == true)
        // Opening the accepted link again (the seed's main app) shows the state.
        let again = try json(Response.self, try await rally("sam", ["open", opened.link ?? "", "--json"]))
        #expect(again.invitation.status == "accepted")

        #expect(
            try json([Nominee].self, try await rally("owner", ["nominee", "list", "Family Papers", "--json"])).map(
                \.status) == ["accepted"])
        #expect(try await rally("owner", ["nominee", "confirm", "Family Papers", "Sam"]).status == 0)
        let copy = homes.path("copy.txt")
        let got = try await rally("sam", ["vault", "get", sent.nominee.vaultID, "deed.txt", "-o", copy.path])
        #expect(got.status == 0, "\(got.stderr)")
        #expect(try String(contentsOf: copy, encoding: .utf8) == "the deed")

        let revoked = try await rally("owner", ["nominee", "revoke", "Family Papers", "Sam"])
        #expect(revoked.stdout.contains("revoked Sam"))
        let refused = try await rally("sam", ["nominee", "accept", sent.link])
        #expect(refused.status != 0 && refused.stderr.contains("The owner revoked this invitation."))
        #expect(
            try json([Nominee].self, try await rally("owner", ["nominee", "list", "Family Papers", "--json"])).map(
                \.status) == ["revoked"])
        await relay.stop()
    }
}
