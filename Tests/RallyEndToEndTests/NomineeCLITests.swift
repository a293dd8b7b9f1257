import Foundation
import RallyCore
import RallyTestSupport
import Testing

@Suite("rally nominee and rally open: the seed's flow from a terminal", .timeLimit(.minutes(3)))
struct NomineeCLITests {
    /// Homes on one real relay, driven through the `rally` binary.
    struct Terminal {
        let relay: TestRelay
        let homes = TemporaryDirectory("rally-nominee-cli")

        static func start() async throws -> Terminal { Terminal(relay: try await TestRelay.start()) }

        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(
                arguments + ["--home", homes.path(home).path, "--relay", relay.url.absoluteString])
        }

        func json<T: Decodable>(_ type: T.Type, _ result: RallyBinary.Result) throws -> T {
            #expect(result.status == 0, "\(result.stderr)")
            return try JSONDecoder().decode(type, from: Data(result.stdout.utf8))
        }
    }

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
        let t = try await Terminal.start()
        defer { t.homes.remove() }
        _ = try await t.rally("owner", ["id", "new", "--name", "Owner"])
        let sam = try t.json(Identity.self, try await t.rally("sam", ["id", "new", "--name", "Sam", "--json"]))
        _ = try await t.rally("owner", ["vault", "create", "Spare"])
        _ = try await t.rally("owner", ["vault", "create", "Family Papers"])
        let file = t.homes.path("deed.txt")
        try Data("the deed".utf8).write(to: file)
        #expect(try await t.rally("owner", ["vault", "add", "Family Papers", file.path]).status == 0)

        // The app hands the vault over; the extension's invite pre-selects it.
        #expect(try await t.rally("owner", ["vault", "share", "Family Papers"]).status == 0)
        let sent = try t.json(
            Sent.self,
            try await t.rally("owner", ["nominee", "invite", "--to", sam.inboxId, "--name", "Sam", "--json"]))
        #expect(sent.nominee.status == "pending")
        let vaults = try await t.rally("owner", ["vault", "list", "--json"])
        #expect(vaults.stdout.contains(sent.nominee.vaultID))
        #expect(try await t.rally("owner", ["vault", "pending", "--json"]).stdout.contains("\"pending\":null"))

        let invitations = try await t.rally("sam", ["nominee", "invitations"])
        #expect(invitations.stdout.contains("🔐 Vault Invitation \"Family Papers\" from Owner"))
        let opened = try t.json(Response.self, try await t.rally("sam", ["open", sent.link, "--json"]))
        #expect(opened.invitation.title == "✅ Vault Access Accepted")
        #expect(opened.link?.contains("status=accepted") == true)
        // Opening the accepted link again (the seed's main app) shows the state.
        let again = try t.json(Response.self, try await t.rally("sam", ["open", opened.link ?? "", "--json"]))
        #expect(again.invitation.status == "accepted")

        #expect(
            try t.json([Nominee].self, try await t.rally("owner", ["nominee", "list", "Family Papers", "--json"])).map(
                \.status) == ["accepted"])
        #expect(try await t.rally("owner", ["nominee", "confirm", "Family Papers", "Sam"]).status == 0)
        let copy = t.homes.path("copy.txt")
        let got = try await t.rally("sam", ["vault", "get", sent.nominee.vaultID, "deed.txt", "-o", copy.path])
        #expect(got.status == 0, "\(got.stderr)")
        #expect(try String(contentsOf: copy, encoding: .utf8) == "the deed")

        let revoked = try await t.rally("owner", ["nominee", "revoke", "Family Papers", "Sam"])
        #expect(revoked.stdout.contains("revoked Sam"))
        let refused = try await t.rally("sam", ["nominee", "accept", sent.link])
        #expect(refused.status != 0 && refused.stderr.contains("The owner revoked this invitation."))
        #expect(
            try t.json([Nominee].self, try await t.rally("owner", ["nominee", "list", "Family Papers", "--json"])).map(
                \.status) == ["revoked"])
        await t.relay.stop()
    }

    struct Emergency: Decodable {
        let state: String
        let granted: Bool
        let waitMs: Int64
    }

    @Test(
        "emergency access from a terminal: invite with --emergency-wait, confirm, request (the owner is told), approve, check installs the key"
    )
    func emergencyFlow() async throws {
        let t = try await Terminal.start()
        defer { t.homes.remove() }
        _ = try await t.rally("owner", ["id", "new", "--name", "Owner"])
        let sam = try t.json(Identity.self, try await t.rally("sam", ["id", "new", "--name", "Sam", "--json"]))
        _ = try await t.rally("owner", ["vault", "create", "Family Papers"])
        let file = t.homes.path("will.txt")
        try Data("the will".utf8).write(to: file)
        #expect(try await t.rally("owner", ["vault", "add", "Family Papers", file.path]).status == 0)

        let badWait = try await t.rally(
            "owner",
            ["nominee", "invite", "Family Papers", "--to", sam.inboxId, "--name", "Sam", "--emergency-wait", "30s"])
        #expect(badWait.status != 0 && badWait.stderr.contains("an emergency wait is between 1 minute and 90 days"))
        let invited = try await t.rally(
            "owner",
            ["nominee", "invite", "Family Papers", "--to", sam.inboxId, "--name", "Sam", "--emergency-wait", "7d"])
        #expect(invited.stdout.contains("emergency access after a wait of 7d"), "\(invited.stderr)")
        let link = String(try #require(invited.stdout.split(whereSeparator: \.isWhitespace).last))
        #expect(try await t.rally("sam", ["nominee", "accept", link]).status == 0)
        let confirmed = try await t.rally("owner", ["nominee", "confirm", "Family Papers", "Sam"])
        #expect(confirmed.stdout.contains("active with emergency access"), "\(confirmed.stderr)")
        let invitations = try await t.rally("sam", ["nominee", "invitations"])
        #expect(invitations.stdout.contains("rally nominee emergency request Family Papers"))

        let noRequest = try await t.rally("owner", ["nominee", "emergency", "approve", "Family Papers", "Sam"])
        #expect(noRequest.status != 0 && noRequest.stderr.contains("Sam has not asked for emergency access"))
        let requested = try t.json(
            Emergency.self, try await t.rally("sam", ["nominee", "emergency", "request", "Family Papers", "--json"]))
        #expect(requested.state == "requested" && requested.waitMs == 7 * 86_400_000)
        let listed = try await t.rally("owner", ["nominee", "list", "Family Papers"])
        #expect(listed.stdout.contains("🆘 emergency access requested"), "\(listed.stdout)")
        let status = try await t.rally("owner", ["nominee", "emergency", "status", "Family Papers", "Sam"])
        #expect(status.stdout.contains("Sam asked for emergency access to \"Family Papers\""))
        let approved = try t.json(
            Emergency.self,
            try await t.rally("owner", ["nominee", "emergency", "approve", "Family Papers", "Sam", "--json"]))
        #expect(approved.state == "approved")
        let checked = try await t.rally("sam", ["nominee", "emergency", "check", "Family Papers"])
        #expect(checked.stdout.contains("emergency access to \"Family Papers\" granted (approved by the owner)"))
        let listing = try await t.rally("sam", ["vault", "ls", "Family Papers"])
        #expect(listing.stdout.contains("will.txt"), "\(listing.stderr)")
        await t.relay.stop()
    }
}
