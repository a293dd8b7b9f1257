import Foundation
import RallyTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("rally invite, join and watch across processes", .timeLimit(.minutes(10)))
struct InviteCLITests {
    struct IdentityJSON: Decodable { let inboxId: String }
    struct GroupJSON: Decodable { let groupId: String }
    struct InviteJSON: Decodable {
        let groupId: String
        let slug: String
        let link: String
        let webLink: String
        let inviteTag: String
        let singleUse: Bool
        let role: String
        let qrPng: String?
    }
    struct AttemptJSON: Decodable {
        let requestId: String
        let state: String
        let groupId: String?
        let errorType: String?
        let message: String
    }
    struct WatchEventJSON: Decodable {
        let event: String
        let outcome: String?
        let inviteInboxes: [String]?
    }

    /// A relay, homes, and `rally` run against them.
    struct Bench {
        let relay: TestRelay
        let homes: TemporaryDirectory

        func args(_ home: String) -> [String] {
            ["--home", homes.path(home).path, "--relay", relay.url.absoluteString]
        }

        func rally(_ home: String, _ arguments: [String], expect status: Int32 = 0) async throws -> RallyBinary.Result {
            let result = try await RallyBinary.run(arguments + args(home))
            #expect(
                result.status == status,
                "rally \(arguments.joined(separator: " ")) exited \(result.status): \(result.stderr)")
            return result
        }

        func json<T: Decodable>(_ type: T.Type, _ text: String) throws -> T {
            try JSONDecoder().decode(type, from: Data(text.utf8))
        }

        /// The last JSON line of a command that prints one per state.
        func lastLine<T: Decodable>(_ type: T.Type, _ result: RallyBinary.Result) throws -> T {
            let line = result.stdout.split(separator: "\n").last.map(String.init) ?? ""
            return try json(type, line)
        }

        func identity(_ name: String) async throws -> String {
            try json(IdentityJSON.self, try await rally(name, ["id", "new", "--name", name, "--json"]).stdout).inboxId
        }

        /// Starts `rally watch --json` for `home` and returns once it
        /// answers for at least one invite inbox.
        func startWatch(_ home: String) async throws -> (ChildProcess, LineReader) {
            let watcher = try ChildProcess.launch(RallyBinary.url, ["watch", "--json"] + args(home), stderr: .inherit)
            let reader = LineReader(watcher)
            while let line = try await reader.nextLine() {
                let event = try json(WatchEventJSON.self, line)
                if event.event == "following", event.inviteInboxes?.isEmpty == false { break }
            }
            return (watcher, reader)
        }

        func stop(_ process: ChildProcess) async throws {
            try await onOwnThread {
                process.signal()
                process.waitUntilExit()
            }
        }
    }

    static func bench() async throws -> Bench {
        Bench(relay: try await TestRelay.start(), homes: TemporaryDirectory("rally-invite-cli"))
    }

    @Test("invite create (single use, QR PNG a real decoder reads), a watching admin, one join admitted, one refused")
    func singleUseFlow() async throws {
        let b = try await Self.bench()
        _ = try await b.identity("alice")
        _ = try await b.identity("bob")
        _ = try await b.identity("carol")
        let group = try b.json(
            GroupJSON.self, try await b.rally("alice", ["group", "create", "Picnic", "--json"]).stdout)
        let png = b.homes.path("invite.png").path
        let invite = try b.json(
            InviteJSON.self,
            try await b.rally(
                "alice", ["invite", "create", "Picnic", "--single-use", "--qr-png", png, "--json"]
            ).stdout)
        #expect(invite.groupId == group.groupId)
        #expect(invite.singleUse && invite.role == "member")
        #expect(invite.link == "rally://join/\(invite.slug)")
        #expect(invite.webLink.hasSuffix("/join#\(invite.slug)"))
        #expect(try await zbarDecode(png) == invite.webLink)
        // The web link opens the relay's static join page; the slug stays
        // in the fragment, which is never sent, so the page cannot echo it.
        let (page, response) = try await URLSession.shared.data(from: try #require(URL(string: invite.webLink)))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let html = String(decoding: page, as: UTF8.self)
        #expect(html.contains("rally://join/") && html.contains("location.hash"))
        #expect(!html.contains(invite.slug))

        let (watcher, events) = try await b.startWatch("alice")
        let joined = try await b.rally("bob", ["join", invite.link, "--json", "--timeout", RallyBinary.waitTimeout])
        let bobFinal = try b.lastLine(AttemptJSON.self, joined)
        #expect(bobFinal.state == "joined")
        #expect(bobFinal.groupId == group.groupId)

        let refused = try await b.rally(
            "carol", ["join", invite.webLink, "--timeout", RallyBinary.waitTimeout], expect: 1)
        #expect(
            refused.stdout.contains(
                "This invite was already used by someone else. Ask the person who invited you for a new invite."))

        var outcomes: [String] = []
        while outcomes.count < 2, let line = try await events.nextLine() {
            let event = try b.json(WatchEventJSON.self, line)
            if event.event == "join_request", let outcome = event.outcome { outcomes.append(outcome) }
        }
        #expect(outcomes == ["admitted", "single_use_consumed"])
        try await b.stop(watcher)

        let bobGroups = try await b.rally("bob", ["group", "list"])
        #expect(bobGroups.stdout.contains(group.groupId))
        await b.relay.stop()
        b.homes.remove()
    }

    @Test("join --no-wait, status and cancel across invocations; an admin coming online answers what waited")
    func acrossInvocations() async throws {
        let b = try await Self.bench()
        _ = try await b.identity("alice")
        _ = try await b.identity("dave")
        _ = try await b.identity("erin")
        _ = try await b.rally("alice", ["group", "create", "Picnic"])
        let invite = try b.json(
            InviteJSON.self, try await b.rally("alice", ["invite", "create", "Picnic", "--json"]).stdout)

        // Dave asks and cancels while no admin is online.
        let sent = try b.lastLine(
            AttemptJSON.self, try await b.rally("dave", ["join", invite.link, "--no-wait", "--json"]))
        #expect(sent.state == "joining")
        let waiting = try b.json(
            [AttemptJSON].self, try await b.rally("dave", ["join", "status", "--json"]).stdout)
        #expect(waiting.map(\.state) == ["joining"])
        let cancelled = try b.json(
            AttemptJSON.self, try await b.rally("dave", ["join", "cancel", "--json"]).stdout)
        #expect(cancelled.state == "cancelled")
        _ = try await b.rally("dave", ["join", "status", sent.requestId], expect: 2)

        // Erin asks while the admin is offline; the admin's watch answers later.
        let erinSent = try b.lastLine(
            AttemptJSON.self, try await b.rally("erin", ["join", invite.slug, "--no-wait", "--json"]))
        _ = try await b.rally("erin", ["join", "status", erinSent.requestId], expect: 3)
        // Waiting with no admin online ends at the timeout with the join under way.
        // Running `rally join` again with the same invite resumes the same request.
        let stillWaiting = try await b.rally("erin", ["join", invite.slug, "--timeout", "0.3", "--json"], expect: 3)
        #expect(try b.lastLine(AttemptJSON.self, stillWaiting).requestId == erinSent.requestId)
        #expect(stillWaiting.stderr.contains("still waiting"))
        let (watcher, events) = try await b.startWatch("alice")
        var seen: [String] = []
        while seen.count < 2, let line = try await events.nextLine() {
            let event = try b.json(WatchEventJSON.self, line)
            if event.event == "join_request", let outcome = event.outcome { seen.append(outcome) }
        }
        #expect(seen == ["admitted", "admitted"])
        try await b.stop(watcher)
        let erin = try b.json(
            [AttemptJSON].self, try await b.rally("erin", ["join", "status", erinSent.requestId, "--json"]).stdout)
        #expect(erin.first?.state == "joined")
        // Dave was admitted too (his request was already out), but his
        // cancelled join stays cancelled.
        _ = try await b.rally("dave", ["join", "status", sent.requestId], expect: 2)

        // Revoke, then the old link: refused at once by the watching admin.
        _ = try await b.rally("alice", ["invite", "revoke", "Picnic"])
        _ = try await b.identity("frank")
        let (again, _) = try await b.startWatch("alice")
        let revoked = try await b.rally(
            "frank", ["join", invite.link, "--json", "--timeout", RallyBinary.waitTimeout], expect: 1)
        #expect(try b.lastLine(AttemptJSON.self, revoked).errorType == "invite_revoked")
        try await b.stop(again)
        await b.relay.stop()
        b.homes.remove()
    }

    @Test("A damaged invite is refused at once and nothing is sent; --qr draws in the terminal")
    func badInviteAndTerminalQR() async throws {
        let b = try await Self.bench()
        _ = try await b.identity("alice")
        _ = try await b.identity("bob")
        _ = try await b.rally("alice", ["group", "create", "Picnic"])
        let qr = try await b.rally("alice", ["invite", "create", "Picnic", "--qr", "--expires", "7d"])
        let lines = qr.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines[0].hasPrefix("rally://join/"))
        #expect(lines.contains { $0.contains("expires") && $0.contains("joins as member") })
        #expect(lines.filter { $0.contains("█") || $0.contains("▀") || $0.contains("▄") }.count > 10)

        let slug = String(lines[0].dropFirst("rally://join/".count))
        let cut = try await b.rally("bob", ["join", String(slug.prefix(slug.count / 2))], expect: 1)
        #expect(cut.stdout.contains("Nothing was sent"))
        let bogus = try await b.rally("bob", ["join", "https://example.com/not-an-invite"], expect: 1)
        #expect(bogus.stdout.contains("is not a Rally invite link"))
        let none = try await b.rally("bob", ["join", "status"])
        #expect(none.stdout.contains("no joins"))
        let badOptions = try await b.rally(
            "alice", ["invite", "create", "Picnic", "--single-use", "--max-uses", "3"], expect: 64)
        #expect(badOptions.stderr.contains("--single-use or --max-uses"))
        await b.relay.stop()
        b.homes.remove()
    }
}

/// Decodes a QR code image with zbar (Debian's zbar-tools).
func zbarDecode(_ path: String) async throws -> String {
    try await onOwnThread {
        let process = try ChildProcess.launch(
            URL(fileURLWithPath: "/usr/bin/zbarimg"), ["--raw", "-q", path], stderr: .inherit)
        let data = process.standardOutput!.readDataToEndOfFile()
        process.waitUntilExit()
        // The decoded symbol is the first line; some zbar builds append
        // D-Bus complaints ("Connection Error …") to standard output.
        let text = String(decoding: data, as: UTF8.self)
        return String(text.split(separator: "\n", omittingEmptySubsequences: true).first ?? "")
            .trimmingCharacters(in: .whitespaces)
    }
}
