import Foundation
import RallyCore
import RallyTestSupport
import Testing

@testable import RallyCLI

@Suite("Connection status in the terminal")
struct ConnectionStatusLineTests {
    /// Drives the real machine and returns what a terminal prints.
    static func printed(_ events: [(atMillis: Int64, event: ConnectionStatusEvent)]) -> [String] {
        var machine = ConnectionStatusMachine()
        var printer = ConnectionStatusLinePrinter()
        var lines: [String] = []
        for (at, event) in events {
            _ = machine.handle(event, atMillis: at)
            if let line = printer.line(for: machine.presentation) { lines.append(line) }
        }
        return lines
    }

    @Test("A blip under 800 ms prints nothing, not even Connected")
    func blip() {
        #expect(
            Self.printed([
                (0, .recovered), (1_000, .degraded(.transportError)), (1_300, .timerFired), (1_400, .recovered),
            ]) == [])
    }

    @Test("An outage prints Reconnecting…, then the longer line at 10 s, then Connected")
    func outage() {
        #expect(
            Self.printed([
                (0, .recovered), (1_000, .degraded(.missedPings)), (1_800, .timerFired),
                (5_000, .degraded(.transportError)), (11_000, .timerFired), (12_000, .timerFired), (13_000, .recovered),
            ]) == ["Reconnecting…", "Reconnecting… Taking longer than usual", "Connected"])
    }

    @Test("Leave from retrying prints no Connected")
    func leave() {
        #expect(
            Self.printed([(0, .recovered), (0, .degraded(.networkChange)), (10_000, .timerFired), (10_500, .userLeft)])
                == ["Reconnecting… Taking longer than usual"])
    }
}

@Suite("rally status, --transport and offline sends from the command line", .timeLimit(.minutes(2)))
struct ConnectionCLITests {
    struct StatusJSON: Decodable {
        let reachable: Bool
        let transport: String
        let error: String?
        let sent: Int?
        let queued: Int
    }

    struct SentJSON: Decodable {
        let id: String
        let seq: UInt64?
        let queued: Bool
    }

    struct IdentityJSON: Decodable {
        let inboxId: String
    }

    @Test("A message sent while the relay is out of reach is queued; rally status shows it and sends it once")
    func offlineSend() async throws {
        let port = PortBox()
        let proxy = try await FaultProxy.start(upstreamPort: { await port.value })
        let relay = try await TestRelay.start(publicURL: proxy.url)
        await port.set(relay.relay.port)
        let homes = TemporaryDirectory("rally-cli-offline")
        defer { homes.remove() }
        let common = ["--relay", proxy.url.absoluteString]
        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(arguments + ["--home", homes.path(home).path] + common)
        }
        let alice = try JSONDecoder().decode(
            IdentityJSON.self,
            from: Data(try await rally("alice", ["id", "new", "--name", "Alice", "--json"]).stdout.utf8))
        _ = try await rally("bob", ["id", "new", "--name", "Bob"])
        _ = try await rally("bob", ["dm", "send", alice.inboxId, "online first"])

        proxy.setMode(.refuse)
        let queued = try await rally("bob", ["dm", "send", alice.inboxId, "typed offline", "--json"])
        #expect(queued.status == 0, "\(queued.stderr)")
        let message = try JSONDecoder().decode(SentJSON.self, from: Data(queued.stdout.utf8))
        #expect(message.queued && message.seq == nil)
        let human = try await rally("bob", ["dm", "send", alice.inboxId, "typed offline too"])
        #expect(human.stdout.contains("queued ") && human.stdout.contains("the relay is out of reach"))

        let offline = try await rally("bob", ["status", "--json"])
        let offlineStatus = try JSONDecoder().decode(StatusJSON.self, from: Data(offline.stdout.utf8))
        #expect(!offlineStatus.reachable && offlineStatus.queued == 2 && offlineStatus.error != nil)
        let offlineText = try await rally("bob", ["status"])
        #expect(offlineText.stdout.contains("not reachable over WebSocket"))
        #expect(offlineText.stdout.contains("2 message(s) queued"))

        proxy.setMode(.pass)
        let sending = try await rally("bob", ["status", "--send-queued", "--json"])
        let sent = try JSONDecoder().decode(StatusJSON.self, from: Data(sending.stdout.utf8))
        #expect(sent.reachable && sent.sent == 2 && sent.queued == 0)
        let again = try await rally("bob", ["status"])
        #expect(again.stdout.contains("connected over WebSocket") && again.stdout.contains("nothing queued"))

        let read = try await rally("alice", ["dm", "read"])
        let lines = read.stdout.split(separator: "\n")
        #expect(lines.count == 3, "\(read.stdout)")
        #expect(lines.filter { $0.contains("typed offline") }.count == 2)
        #expect(lines.last?.contains("typed offline too") == true)

        await proxy.stop()
        await relay.stop()
    }

    @Test("--transport http works where WebSockets are blocked; a bad value is refused clearly")
    func httpTransport() async throws {
        let port = PortBox()
        let proxy = try await FaultProxy.start(upstreamPort: { await port.value })
        let relay = try await TestRelay.start(publicURL: proxy.url)
        await port.set(relay.relay.port)
        proxy.setMode(.refuseWebSocketUpgrades)
        let homes = TemporaryDirectory("rally-cli-http")
        defer { homes.remove() }
        let common = ["--relay", proxy.url.absoluteString, "--transport", "http"]
        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(arguments + ["--home", homes.path(home).path] + common)
        }
        let alice = try JSONDecoder().decode(
            IdentityJSON.self,
            from: Data(try await rally("alice", ["id", "new", "--name", "Alice", "--json"]).stdout.utf8))
        let bobNew = try await rally("bob", ["id", "new", "--name", "Bob"])
        #expect(bobNew.status == 0, "\(bobNew.stderr)")
        let sent = try await rally("bob", ["dm", "send", alice.inboxId, "over http", "--json"])
        #expect(sent.status == 0, "\(sent.stderr)")
        #expect(try JSONDecoder().decode(SentJSON.self, from: Data(sent.stdout.utf8)).seq != nil)
        let read = try await rally("alice", ["dm", "read"])
        #expect(read.stdout.contains("over http"))
        let status = try await rally("alice", ["status"])
        #expect(status.stdout.contains("connected over HTTP"))

        let bad = try await RallyBinary.run(
            ["status", "--transport", "carrier-pigeon", "--home", homes.path("alice").path])
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("--transport must be one of automatic, http"))

        await proxy.stop()
        await relay.stop()
    }

    @Test("dm read --follow prints Reconnecting… when the relay is cut off for a while, then Connected")
    func followLines() async throws {
        let port = PortBox()
        let proxy = try await FaultProxy.start(upstreamPort: { await port.value })
        let relay = try await TestRelay.start(publicURL: proxy.url)
        await port.set(relay.relay.port)
        let homes = TemporaryDirectory("rally-cli-follow")
        defer { homes.remove() }
        let common = ["--relay", proxy.url.absoluteString]
        func rally(_ home: String, _ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(arguments + ["--home", homes.path(home).path] + common)
        }
        let bob = try JSONDecoder().decode(
            IdentityJSON.self, from: Data(try await rally("bob", ["id", "new", "--name", "Bob", "--json"]).stdout.utf8))
        _ = try await rally("alice", ["id", "new", "--name", "Alice"])

        let follower = try ChildProcess.launch(
            RallyBinary.url, ["dm", "read", "--follow", "--home", homes.path("bob").path] + common, stderr: .inherit)
        let reader = LineReader(follower)
        // A message printed: the follower is live.
        _ = try await rally("alice", ["dm", "send", bob.inboxId, "are you there"])
        #expect(try await reader.nextLine()?.contains("are you there") == true)

        // Cut off until the status shows (800 ms on the real clock), then
        // back: the follower recovers by itself.
        proxy.setMode(.refuse)
        proxy.resetAll()
        #expect(try await reader.nextLine() == "Reconnecting…")
        proxy.setMode(.pass)
        // On a loaded machine the recovery may pass 10 s first, which the
        // status says too; nothing else may come before "Connected".
        var next = try await reader.nextLine()
        if next == "Reconnecting… Taking longer than usual" { next = try await reader.nextLine() }
        #expect(next == "Connected")

        try await onOwnThread {
            follower.signal()
            follower.waitUntilExit()
        }
        await proxy.stop()
        await relay.stop()
    }

    @Test("group read --follow --json starts with the connection's status, then the group's messages")
    func groupFollowEvents() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-cli-group-follow")
        defer { homes.remove() }
        let common = ["--relay", relay.url.absoluteString, "--home", homes.path("alice").path]
        _ = try await RallyBinary.run(["id", "new", "--name", "Alice"] + common)
        struct Group: Decodable { let groupId: String }
        let created = try JSONDecoder().decode(
            Group.self,
            from: Data(try await RallyBinary.run(["group", "create", "Picnic", "--json"] + common).stdout.utf8))

        let follower = try ChildProcess.launch(
            RallyBinary.url, ["group", "read", created.groupId, "--follow", "--json"] + common, stderr: .inherit)
        let reader = LineReader(follower)
        struct Line: Decodable {
            var event: String?
            var status: String?
            var text: String?
        }
        let first = try JSONDecoder().decode(Line.self, from: Data(try #require(try await reader.nextLine()).utf8))
        #expect(first.event == "connection" && first.status == "connected")
        let sent = try await RallyBinary.run(["group", "send", created.groupId, "hello group"] + common)
        #expect(sent.status == 0, "\(sent.stderr)")
        let message = try JSONDecoder().decode(Line.self, from: Data(try #require(try await reader.nextLine()).utf8))
        #expect(message.event == nil && message.text == "hello group")

        try await onOwnThread {
            follower.signal()
            follower.waitUntilExit()
        }
        await relay.stop()
    }

    @Test("rally watch --json prints each change of the connection as an event")
    func watchEvents() async throws {
        let port = PortBox()
        let proxy = try await FaultProxy.start(upstreamPort: { await port.value })
        let relay = try await TestRelay.start(publicURL: proxy.url)
        await port.set(relay.relay.port)
        let homes = TemporaryDirectory("rally-cli-watch")
        defer { homes.remove() }
        let common = ["--relay", proxy.url.absoluteString, "--home", homes.path("bob").path]
        _ = try await RallyBinary.run(["id", "new", "--name", "Bob"] + common)

        struct Event: Decodable, Equatable {
            let event: String
            var status: String?
            var indicator: Bool?
            var text: String?
        }
        let watcher = try ChildProcess.launch(RallyBinary.url, ["watch", "--json"] + common, stderr: .inherit)
        let reader = LineReader(watcher)
        func nextConnectionEvent() async throws -> Event? {
            while let line = try await reader.nextLine() {
                let event = try JSONDecoder().decode(Event.self, from: Data(line.utf8))
                if event.event == "connection" { return event }
            }
            return nil
        }
        #expect(try await nextConnectionEvent() == Event(event: "connection", status: "connected", indicator: false))
        proxy.setMode(.refuse)
        proxy.resetAll()
        #expect(try await nextConnectionEvent() == Event(event: "connection", status: "recovering", indicator: false))
        #expect(
            try await nextConnectionEvent()
                == Event(event: "connection", status: "recovering", indicator: true, text: "Reconnecting…"))
        proxy.setMode(.pass)
        // Reconnecting takes one more rung of the ladder; on a loaded
        // machine the status may pass "Taking longer than usual…", or even
        // reach retrying, before it is connected again.
        var afterPass = try await nextConnectionEvent()
        while let event = afterPass, event.status == "recovering" || event.status == "retrying" {
            afterPass = try await nextConnectionEvent()
        }
        #expect(afterPass == Event(event: "connection", status: "connected", indicator: false))

        try await onOwnThread {
            watcher.signal()
            watcher.waitUntilExit()
        }
        await proxy.stop()
        await relay.stop()
    }
}
