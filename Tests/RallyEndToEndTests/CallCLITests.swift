import Foundation
import RallyCore
import RallyTestSupport
import Testing

@Suite("rally call: create, join and end from the command line", .timeLimit(.minutes(2)))
struct CallCLITests {
    struct RoomJSON: Decodable {
        let room: String
        let link: String
        let endToken: String?
    }

    struct ChangeJSON: Decodable {
        let phase: String
        let status: String
        let end: String?
        let message: String?
        let participant: String?
    }

    @Test("create prints a link this home keeps; join prints the phases; end sends everyone home and forgets the room")
    func lifecycle() async throws {
        let relay = try await TestRelay.start()
        defer { Task { await relay.stop() } }
        let homes = TemporaryDirectory("rally-cli-call")
        defer { homes.remove() }
        let common = ["--relay", relay.relay.boundURL.absoluteString, "--json"]
        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(arguments + ["--home", homes.path(home).path] + common)
        }

        let made = try await rally("alice", ["call", "create"])
        #expect(made.status == 0, "\(made.stderr)")
        let room = try JSONDecoder().decode(RoomJSON.self, from: Data(made.stdout.utf8))
        let link = try CallLink(parsing: room.link)
        #expect(link.room == room.room && room.endToken?.count == 64)
        let listed = try JSONDecoder().decode(
            [RoomJSON].self, from: Data(try await rally("alice", ["call", "list"]).stdout.utf8))
        #expect(listed.map(\.room) == [room.room])
        #expect(listed.first?.endToken == nil, "the list never prints end tokens")

        // The CLI joins by room id (this home has the key); Bob joins in
        // this process by link and is in the call once both negotiated.
        async let joined = rally("alice", ["call", "join", room.room])
        let bob = CallSession(link: link, media: ScriptedMediaEngine(name: "bob"))
        let bobWatch = await CallWatch(bob)
        await bob.start()
        await bobWatch.wait { $0.phase == .inCall }

        // Someone else cannot end it; its creator can.
        let stranger = try await rally("mallory", ["call", "end", room.room])
        #expect(stranger.status != 0)
        #expect(stranger.stderr.contains("did not create call \(room.room)"))
        let ended = try await rally("alice", ["call", "end", room.room])
        #expect(ended.status == 0, "\(ended.stderr)")

        let cli = try await joined
        #expect(cli.status == 0, "\(cli.stderr)")
        let changes = try cli.stdout.split(separator: "\n").map {
            try JSONDecoder().decode(ChangeJSON.self, from: Data($0.utf8))
        }
        let phases = changes.map(\.phase).reduce(into: [String]()) { if $0.last != $1 { $0.append($1) } }
        #expect(phases.first == "idle" || phases.first == "joining")
        #expect(phases.contains("inCall") && phases.last == "idle")
        #expect(changes.last?.end == "ended" && changes.last?.message == CallEnd.ended.message)
        await bobWatch.wait { $0.phase == .idle }
        #expect(await bob.current.end == .ended)

        // Ended rooms are forgotten, and ending again says why it cannot.
        let after = try JSONDecoder().decode(
            [RoomJSON].self, from: Data(try await rally("alice", ["call", "list"]).stdout.utf8))
        #expect(after.isEmpty)
        #expect(try await rally("alice", ["call", "end", room.room]).status != 0)
    }

    @Test("join refuses damaged links and rooms it has no key for, saying what is wrong")
    func badInput() async throws {
        let relay = try await TestRelay.start()
        defer { Task { await relay.stop() } }
        let homes = TemporaryDirectory("rally-cli-call-bad")
        defer { homes.remove() }
        func rally(_ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(
                arguments + ["--home", homes.path("h").path, "--relay", relay.relay.boundURL.absoluteString])
        }
        let base = relay.relay.boundURL.absoluteString
        let room = String(repeating: "a", count: 32)
        let cases: [(String, String)] = [
            ("\(base)/call/\(room)", CallLinkError.missingKey.description),
            ("\(base)/call/\(room)#short", CallLinkError.badKey.description),
            ("\(base)/call/XYZ#\(String(repeating: "A", count: 43))", CallLinkError.badRoom.description),
            (room, "this home did not create call \(room)"),
        ]
        for (input, message) in cases {
            let result = try await rally(["call", "join", input])
            #expect(result.status != 0, "\(input)")
            #expect(result.stderr.contains(message), "\(input): \(result.stderr)")
        }
        let missing = try await rally([
            "call", "join", CallLink.fresh(relayURL: relay.relay.boundURL, room: room).description,
        ])
        #expect(missing.status != 0)
        #expect(missing.stderr.contains(CallError.roomNotFound.description))
        let notARoom = try await rally(["call", "end", "nope"])
        #expect(notARoom.status != 0 && notARoom.stderr.contains("is not a call room id"))
    }
}
