import Foundation
import RallyTestSupport
import Testing

/// Several `rally` processes on one home while `rally watch` runs on it.
@Suite("Several rally processes on one home", .timeLimit(.minutes(5)))
struct SharedHomeCLITests {
    struct IdentityJSON: Decodable { let inboxId: String }
    struct GroupJSON: Decodable { let groupId: String }
    struct MessageJSON: Decodable {
        let id: String
        let text: String
        let direction: String
    }
    struct WatchEventJSON: Decodable {
        let event: String
        let groups: [String]?
    }

    struct Bench {
        let relay: TestRelay
        let homes: TemporaryDirectory

        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(
                arguments + ["--home", homes.path(home).path, "--relay", relay.url.absoluteString])
        }

        func ok(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            let result = try await rally(home, arguments)
            #expect(
                result.status == 0,
                "rally \(arguments.joined(separator: " ")) exited \(result.status): \(result.stderr)")
            return result
        }

        func json<T: Decodable>(_ type: T.Type, _ result: RallyBinary.Result) throws -> T {
            try JSONDecoder().decode(type, from: Data(result.stdout.utf8))
        }

        /// Starts `rally watch --json` and returns once it follows `groups`.
        func startWatch(_ home: String, following groups: Set<String>) async throws -> ChildProcess {
            let watcher = try ChildProcess.launch(
                RallyBinary.url,
                ["watch", "--json", "--home", homes.path(home).path, "--relay", relay.url.absoluteString],
                stderr: .null)
            let reader = LineReader(watcher)
            while let line = try await reader.nextLine() {
                let event = try JSONDecoder().decode(WatchEventJSON.self, from: Data(line.utf8))
                if event.event == "following", groups.isSubset(of: Set(event.groups ?? [])) { break }
            }
            // Keep draining, so the watcher never blocks on a full pipe.
            Task { while (try? await reader.nextLine()) != nil {} }
            return watcher
        }

        func stop(_ process: ChildProcess) async throws {
            try await onOwnThread {
                process.signal()
                process.waitUntilExit()
            }
        }

        /// Runs every command at once; returns them with their results.
        func parallel(
            _ commands: [(home: String, arguments: [String])]
        ) async throws -> [(
            arguments: [String], result: RallyBinary.Result
        )] {
            try await withThrowingTaskGroup(of: ([String], RallyBinary.Result).self) { tasks in
                for command in commands {
                    tasks.addTask { (command.arguments, try await rally(command.home, command.arguments)) }
                }
                var results: [(arguments: [String], result: RallyBinary.Result)] = []
                for try await (arguments, result) in tasks { results.append((arguments, result)) }
                return results
            }
        }
    }

    static func bench() async throws -> Bench {
        Bench(relay: try await TestRelay.start(), homes: TemporaryDirectory("rally-shared-home"))
    }

    @Test("dm send/read, group send/read/members/list and id show at once beside rally watch all succeed and converge")
    func manyCommandsBesideWatch() async throws {
        let b = try await Self.bench()
        let alice = try b.json(IdentityJSON.self, try await b.ok("alice", ["id", "new", "--name", "Alice", "--json"]))
        let bob = try b.json(IdentityJSON.self, try await b.ok("bob", ["id", "new", "--name", "Bob", "--json"]))
        let group = try b.json(GroupJSON.self, try await b.ok("alice", ["group", "create", "Picnic", "--json"]))
            .groupId
        _ = try await b.ok("alice", ["group", "add", group, bob.inboxId, "--direct"])
        _ = try await b.ok("bob", ["group", "list"])
        let watcher = try await b.startWatch("alice", following: [group])

        var commands: [(home: String, arguments: [String])] = []
        let groupTexts = (1...4).map { "group message \($0)" }
        let aliceDMs = (1...2).map { "alice to bob \($0)" }
        let bobDMs = (1...3).map { "bob to alice \($0)" }
        for text in groupTexts { commands.append(("alice", ["group", "send", group, text])) }
        for text in aliceDMs { commands.append(("alice", ["dm", "send", bob.inboxId, text])) }
        for text in bobDMs { commands.append(("bob", ["dm", "send", alice.inboxId, text])) }
        commands.append(("bob", ["group", "send", group, "bob in the group"]))
        commands += [
            ("alice", ["group", "read", group]), ("alice", ["group", "read", group, "--json"]),
            ("alice", ["group", "members", group]), ("alice", ["group", "list"]), ("alice", ["dm", "read"]),
            ("alice", ["dm", "read", "--json"]), ("alice", ["id", "show"]), ("bob", ["group", "read", group]),
        ]
        for (arguments, result) in try await b.parallel(commands) {
            #expect(
                result.status == 0,
                "rally \(arguments.joined(separator: " ")) exited \(result.status): \(result.stderr)")
            #expect(!result.stderr.contains("database is locked"))
        }
        try await b.stop(watcher)

        // Everyone converged: every message once, in both homes.
        let everyGroupText = (groupTexts + ["bob in the group"]).sorted()
        for home in ["alice", "bob"] {
            let read = try b.json(
                [MessageJSON].self, try await b.ok(home, ["group", "read", group, "--all", "--json"]))
            #expect(read.map(\.text).sorted() == everyGroupText, "\(home)'s group")
            #expect(Set(read.map(\.id)).count == read.count)
        }
        let aliceInbox = try b.json([MessageJSON].self, try await b.ok("alice", ["dm", "read", "--all", "--json"]))
        let dms = aliceInbox.filter { $0.text.hasPrefix("bob to alice") || $0.text.hasPrefix("alice to bob") }
        #expect(dms.filter { $0.direction == "in" }.map(\.text).sorted() == bobDMs)
        #expect(dms.filter { $0.direction == "out" }.map(\.text).sorted() == aliceDMs)
        let bobInbox = try b.json([MessageJSON].self, try await b.ok("bob", ["dm", "read", "--all", "--json"]))
        #expect(bobInbox.filter { $0.direction == "in" && $0.text.hasPrefix("alice to bob") }.count == 2)
        await b.relay.stop()
        b.homes.remove()
    }

    /// The first invite of a group publishes a commit (invite keys set up).
    /// When `rally watch` reads that commit from the log before the
    /// publishing process does, the publisher finds its outcome recorded
    /// by the watch (the `own_commit` table, ADR 0010).
    @Test("invite create for several groups at once beside rally watch succeeds")
    func inviteCreateBesideWatch() async throws {
        let b = try await Self.bench()
        _ = try await b.ok("alice", ["id", "new", "--name", "Alice"])
        var groups: [String] = []
        for name in ["One", "Two", "Three"] {
            groups.append(
                try b.json(GroupJSON.self, try await b.ok("alice", ["group", "create", name, "--json"])).groupId)
        }
        let watcher = try await b.startWatch("alice", following: Set(groups))
        let results = try await b.parallel(
            groups.map { ("alice", ["invite", "create", $0]) } + groups.map { ("alice", ["group", "send", $0, "hi"]) })
        for (arguments, result) in results {
            #expect(!result.stderr.contains("database is locked"), "rally \(arguments.joined(separator: " "))")
            #expect(
                result.status == 0,
                "rally \(arguments.joined(separator: " ")) exited \(result.status): \(result.stderr)")
        }
        try await b.stop(watcher)
        // Whatever the publishers reported, the home converged on one state:
        // every group's invites are set up (a second invite needs no commit)
        // and its log reads cleanly.
        for group in groups {
            _ = try await b.ok("alice", ["invite", "create", group])
            _ = try await b.ok("alice", ["group", "members", group])
        }
        await b.relay.stop()
        b.homes.remove()
    }
}
