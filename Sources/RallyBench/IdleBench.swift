import ArgumentParser
import Foundation
import Logging
import RallyCore
import RallyCrypto
import RallyRelay
import RallyWire

/// `rally-bench idle`: the relay's resident memory with many authenticated,
/// subscribed, idle WebSocket clients (each an identity of its own,
/// subscribed to its inbox, caught up, then quiet but for its pings).
/// Prints numbers; asserts nothing.
struct IdleBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "idle",
        abstract: "Measure relay memory with many idle, authenticated, subscribed WebSocket clients.")

    @Option(help: "Client counts at which memory is printed, ascending, comma-separated.")
    var counts = "1000,10000"
    @Option(help: "Clients connecting at once.") var parallel = 64
    @Option(
        help: ArgumentHelp(
            "How far each client goes: connect (a WebSocket and its challenge), authenticate, or subscribe (to its inbox; the default).",
            valueName: "connect|authenticate|subscribe"))
    var stage = Stage.subscribe

    enum Stage: String, ExpressibleByArgument, Sendable {
        case connect, authenticate, subscribe
    }
    @Option(help: "Measure a relay already running at this URL (e.g. one under a profiler) instead of starting one.")
    var relayURL: String?
    @Option(help: "With --relay-url: the relay's process id, whose memory is printed.") var relayPid: Int32?

    func run() async throws {
        let counts = self.counts.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !counts.isEmpty, counts == counts.sorted(), counts.allSatisfy({ $0 > 0 }) else {
            throw ValidationError("--counts: ascending positive numbers, e.g. 1000,10000")
        }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("rally-bench-idle-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let maxConnections = counts.last! + 100
        var child: RelayChild?
        let url: URL
        let pid: Int32
        if let relayURL, let given = URL(string: relayURL) {
            url = given
            pid = relayPid ?? 0
        } else {
            let relay = try await RelayChild.start(
                port: 0, data: root.appendingPathComponent("relay"), maxConnections: maxConnections)
            child = relay
            url = relay.url
            pid = relay.process.processIdentifier
        }
        defer { if let child, child.process.isRunning { kill(child.process.processIdentifier, SIGKILL) } }
        let logger = {
            var logger = Logger(label: "rally.bench")
            logger.logLevel = .error
            return logger
        }()
        Output.write("relay: separate process pid \(pid) on \(url)")
        let idle = ProcessMemory.residentKiB(pid: pid) ?? 0
        Output.write("relay resident memory (VmRSS) with no clients: \(idle / 1024) MiB")
        Output.write("each client: \(stage.rawValue)")
        Output.write("clients  relay VmRSS MiB  KiB per client  seconds to open them")

        let relayURL = url
        var held: [RelayConnection] = []
        var streams: [Task<Void, Never>] = []
        for target in counts {
            let started = ContinuousClock.now
            while held.count < target {
                let batch = min(parallel, target - held.count)
                let opened = try await withThrowingTaskGroup(of: (RelayConnection, Task<Void, Never>).self) { group in
                    let first = held.count
                    for index in 0..<batch {
                        let name = "idle-\(first + index)"
                        group.addTask { [stage] in
                            let identity = Identity(displayName: name)
                            let connection = try await RelayConnection.connect(
                                to: relayURL, identity: stage == .connect ? nil : identity, logger: logger)
                            guard stage == .subscribe else { return (connection, Task {}) }
                            let topic = try TopicName.inbox(identity.inboxID.rawValue)
                            let stream = await connection.subscribe(topic: topic, after: 0)
                            let (caughtUp, signal) = AsyncStream.makeStream(of: Void.self)
                            // Drains the stream for as long as the client is
                            // held; the first caught-up says it is subscribed.
                            let drain = Task {
                                do {
                                    for try await event in stream {
                                        if case .caughtUp = event { signal.yield() }
                                    }
                                } catch {}
                                signal.finish()
                            }
                            var iterator = caughtUp.makeAsyncIterator()
                            guard await iterator.next() != nil else {
                                throw ValidationError("client \(name) was not subscribed")
                            }
                            return (connection, drain)
                        }
                    }
                    var opened: [(RelayConnection, Task<Void, Never>)] = []
                    for try await pair in group { opened.append(pair) }
                    return opened
                }
                held += opened.map(\.0)
                streams += opened.map(\.1)
            }
            let seconds = (ContinuousClock.now - started).seconds
            let rss = ProcessMemory.residentKiB(pid: pid) ?? 0
            Output.write(
                String(
                    format: "%7d  %15.1f  %14.1f  %19.1f", target, Double(rss) / 1024,
                    Double(rss - idle) / Double(target),
                    seconds))
        }
        Output.write("(KiB per client: the rise over the idle relay divided by the clients held)")
        for connection in held { await connection.close() }
        for stream in streams { stream.cancel() }
    }
}
