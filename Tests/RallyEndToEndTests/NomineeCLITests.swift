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

    struct Emergency: Decodable {
        let state: String
        let granted: Bool
        let waitMs: Int64
    }

    @Test(
        "emergency access from a terminal: invite with --emergency-wait, confirm, request (the owner is told), approve, check installs the key"
    )
    func emergencyFlow() async throws {
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
        _ = try await rally("owner", ["vault", "create", "Family Papers"])
        let file = homes.path("will.txt")
        try Data("the will".utf8).write(to: file)
        #expect(try await rally("owner", ["vault", "add", "Family Papers", file.path]).status == 0)

        let badWait = try await rally(
            "owner",
            ["nominee", "invite", "Family Papers", "--to", sam.inboxId, "--name", "Sam", "--emergency-wait", "30s"])
        #expect(badWait.status != 0 && badWait.stderr.contains("an emergency wait is between 1 minute and 90 days"))
        let invited = try await rally(
            "owner",
            ["nominee", "invite", "Family Papers", "--to", sam.inboxId, "--name", "Sam", "--emergency-wait", "7d"])
        #expect(invited.stdout.contains("emergency access after a wait of 7d"), "\(invited.stderr)")
        let link = try #require(
            invited.stdout.split(separator: " ").last.map(String.init)?.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(try await rally("sam", ["nominee", "accept", link]).status == 0)
        let confirmed = try await rally("owner", ["nominee", "confirm", "Family Papers", "Sam"])
        #expect(confirmed.stdout.contains("active with emergency access"), "\(confirmed.stderr)")
        let invitations = try await rally("sam", ["nominee", "invitations"])
        #expect(invitations.stdout.contains("rally nominee emergency request Family Papers"))

        let noRequest = try await rally("owner", ["nominee", "emergency", "approve", "Family Papers", "Sam"])
        #expect(noRequest.status != 0 && noRequest.stderr.contains("Sam has not asked for emergency access"))
        let requested = try json(
            Emergency.self, try await rally("sam", ["nominee", "emergency", "request", "Family Papers", "--json"]))
        #expect(requested.state == "requested" && requested.waitMs == 7 * 86_400_000)
        let listed = try await rally("owner", ["nominee", "list", "Family Papers"])
        #expect(listed.stdout.contains("🆘 emergency access requested"), "\(listed.stdout)")
        let status = try await rally("owner", ["nominee", "emergency", "status", "Family Papers", "Sam"])
        #expect(status.stdout.contains("Sam asked for emergency access to \"Family Papers\""))
        let approved = try json(
            Emergency.self,
            try await rally("owner", ["nominee", "emergency", "approve", "Family Papers", "Sam", "--json"]))
        #expect(approved.state == "approved")
        let checked = try await rally("sam", ["nominee", "emergency", "check", "Family Papers"])
        #expect(checked.stdout.contains("emergency access to \"Family Papers\" granted (approved by the owner)"))
        let listing = try await rally("sam", ["vault", "ls", "Family Papers"])
        #expect(listing.stdout.contains("will.txt"), "\(listing.stderr)")
        await relay.stop()
    }
}
