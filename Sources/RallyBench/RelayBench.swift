import ArgumentParser
import Foundation
import Logging
import RallyCore
import RallyCrypto
import RallyWire
import RallyWireLoad

/// `rally-bench relay`: publish→deliver throughput and latency on loopback
/// against a relay running as its own process (so its memory is its own),
/// with 1, 10 and 100 concurrent clients. Prints numbers; asserts nothing.
struct RelayBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay", abstract: "Measure relay publish→deliver throughput, latency and memory.")

    @Option(help: "Concurrent client counts to measure, comma-separated.") var clients = "1,10,100"
    @Option(help: "Messages each client publishes per run (below the per-connection burst limit).")
    var messages = 300
    @Option(help: "Payload bytes per message.") var payload = 256
    @Option(help: "Keep envelopes in this PostgreSQL (postgres://...) instead of SQLite.") var postgres: String?
    @Option(
        help:
            "Relay nodes sharing --postgres, each its own process; each client subscribes on one node and publishes on the next, so with several every message crosses nodes."
    )
    var nodes = 1
    @Option(
        help:
            "Subscriber connections per topic: with more than one, each message is delivered that many times (a group's fan-out), and deliveries/s counts every delivery."
    )
    var subscribers = 1
    @Option(
        help:
            "What generates the load: wire (plain sockets from one thread, every frame encoded before the timed part, as redis-benchmark loads Redis) or sdk (RallyCore's RelayConnection, as an app publishes and subscribes)."
    )
    var load: LoadKind = .wire

    enum LoadKind: String, ExpressibleByArgument, CaseIterable {
        case wire, sdk
    }

    func run() async throws {
        let counts = clients.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !counts.isEmpty, counts.allSatisfy({ $0 > 0 }) else { throw ValidationError("--clients: e.g. 1,10,100") }
        guard payload >= 16, payload <= WireLimits.maxPayloadBytes else {
            throw ValidationError("--payload must be 16...\(WireLimits.maxPayloadBytes)")
        }
        guard subscribers >= 1 else { throw ValidationError("--subscribers must be at least 1") }
        guard nodes >= 1, nodes == 1 || postgres != nil else {
            throw ValidationError("--nodes above 1 needs --postgres: only PostgreSQL is shared between nodes")
        }
        var relays: [ChildRelay] = []
        defer { for relay in relays { relay.stop() } }
        for _ in 0..<nodes { relays.append(try ChildRelay.start(postgres: postgres)) }
        let urls = relays.map(\.url)
        for relay in relays {
            Output.write(
                "relay: separate process pid \(relay.pid) on \(relay.url), "
                    + (postgres == nil
                        ? "SQLite WAL synchronous=FULL" : "PostgreSQL (\(nodes) node\(nodes == 1 ? "" : "s"))"))
        }
        Output.write(
            load == .wire
                ? "load: plain sockets from one thread, frames encoded beforehand (--load sdk: RallyCore's RelayConnection)"
                : "load: RallyCore's RelayConnection, one per connection (--load wire: plain sockets from one thread)")
        if subscribers > 1 { Output.write("each topic has \(subscribers) subscribers; latencies are per delivery") }
        Output.write(
            "clients  messages  seconds  deliveries/s  p50 ms  p99 ms  max ms  ack p50 ms  ack p99 ms  relay CPU µs/msg  clients CPU µs/msg"
        )
        for count in counts {
            let result =
                load == .wire
                ? try await measureWire(clients: count, relayURLs: urls, relayPIDs: relays.map(\.pid))
                : try await measure(clients: count, relayURLs: urls, relayPIDs: relays.map(\.pid))
            let published = Double(count * messages)
            Output.write(
                String(
                    format: "%7d  %8d  %7.2f  %12.0f  %6.2f  %6.2f  %6.2f  %10.2f  %10.2f  %16.1f  %18.1f", count,
                    result.delivered, result.seconds, Double(result.delivered) / result.seconds,
                    result.percentile(0.50), result.percentile(0.99), result.percentile(1.0),
                    result.ackPercentile(0.50), result.ackPercentile(0.99),
                    result.relayCPUMilliseconds * 1000 / published,
                    result.clientCPUMilliseconds * 1000 / published))
        }
        Output.write(
            "(p50/p99/max: publish → delivery to the subscriber; ack: publish → acknowledgement, as redis-benchmark times a command. CPU per message published, during the timed part only: the relay processes', and this process's, whose clients publish and receive)"
        )
        for relay in relays {
            Output.write(
                "relay peak memory (VmHWM): \(relay.peakMemoryKiB().map { "\($0 / 1024) MiB" } ?? "unknown")")
        }
    }

    struct Result {
        var delivered = 0
        var seconds = 0.0
        var latenciesMs: [Double] = []
        /// Publish → acknowledgement, sorted.
        var ackLatenciesMs: [Double] = []
        var relayCPUMilliseconds = 0.0
        var clientCPUMilliseconds = 0.0

        /// `latenciesMs` is sorted.
        func percentile(_ p: Double) -> Double { ReconnectBench.percentile(latenciesMs, p) }
        func ackPercentile(_ p: Double) -> Double { ReconnectBench.percentile(ackLatenciesMs, p) }
    }

    /// CPU used so far by the relay processes and by this one (whose
    /// clients publish and receive), in milliseconds.
    struct CPUSample {
        var relay: Double
        var clients: Double

        init(relayPIDs: [Int32]) {
            relay = relayPIDs.reduce(0.0) { $0 + (ProcessCPU.milliseconds(pid: $1) ?? 0) }
            clients = ProcessCPU.milliseconds() ?? 0
        }

        private init(relay: Double, clients: Double) {
            self.relay = relay
            self.clients = clients
        }

        func since(_ earlier: CPUSample) -> CPUSample {
            CPUSample(relay: relay - earlier.relay, clients: clients - earlier.clients)
        }
    }

    /// The same measurement with ``WireLoad``, on a thread of its own (its
    /// socket calls block).
    private func measureWire(clients count: Int, relayURLs: [URL], relayPIDs: [Int32]) async throws -> Result {
        let plan = WireLoadPlan(
            relayPorts: relayURLs.compactMap(\.port), clients: count, messagesPerClient: messages,
            payloadBytes: payload, subscribersPerTopic: subscribers)
        return try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(
                    with: Swift.Result { () throws -> Result in
                        let load = try WireLoad(plan)
                        let before = CPUSample(relayPIDs: relayPIDs)
                        let outcome = try load.run()
                        let cpu = CPUSample(relayPIDs: relayPIDs).since(before)
                        return Result(
                            delivered: outcome.delivered, seconds: outcome.seconds, latenciesMs: outcome.latenciesMs,
                            ackLatenciesMs: outcome.ackLatenciesMs, relayCPUMilliseconds: cpu.relay,
                            clientCPUMilliseconds: cpu.clients)
                    })
            }
        }
    }

    private func measure(clients count: Int, relayURLs: [URL], relayPIDs: [Int32]) async throws -> Result {
        var logger = Logger(label: "rally.bench")
        logger.logLevel = .error
        let perClient = messages
        let payloadSize = payload
        // Each client subscribes to its own topic on one connection (or
        // several, with --subscribers) and publishes to it on another, so
        // every message crosses the relay. Bench topics are capability
        // topics: each has its own access key and the id that key founds
        // (docs/adr/0008).
        var pairs: [([RelayConnection], RelayConnection, TopicName, TopicAccess)] = []
        for index in 0..<count {
            let identity = Identity(displayName: "bench-\(index)")
            var readers: [RelayConnection] = []
            for _ in 0..<subscribers {
                readers.append(
                    try await RelayConnection.connect(
                        to: relayURLs[index % relayURLs.count], identity: identity, logger: logger))
            }
            let publisher = try await RelayConnection.connect(
                to: relayURLs[(index + 1) % relayURLs.count], identity: identity, logger: logger)
            let access = try TopicAccess(secret: TopicAccess.newSecret())
            pairs.append((readers, publisher, try TopicName(validating: "bench/\(access.foundedTopicID)"), access))
        }
        let cpuBefore = CPUSample(relayPIDs: relayPIDs)
        let start = DispatchTime.now().uptimeNanoseconds
        // Each task returns its latencies: a subscriber's deliveries, or a
        // publisher's acknowledgements.
        let (latencies, ackLatencies) = try await withThrowingTaskGroup(
            of: (deliveries: [Double], acks: [Double]).self
        ) { group in
            for (readers, publisher, topic, access) in pairs {
                for subscriber in readers {
                    let stream = await subscriber.subscribe(topic: topic, after: 0, access: access)
                    group.addTask {
                        var latencies: [Double] = []
                        latencies.reserveCapacity(perClient)
                        for try await event in stream {
                            guard case .envelope(let envelope) = event else { continue }
                            let sentAt = envelope.payload.prefix(8).withUnsafeBytes {
                                $0.loadUnaligned(as: UInt64.self)
                            }
                            let now = DispatchTime.now().uptimeNanoseconds
                            latencies.append(Double(now - sentAt) / 1_000_000)
                            if latencies.count == perClient { break }
                        }
                        return (latencies, [])
                    }
                }
                group.addTask {
                    var acks: [Double] = []
                    acks.reserveCapacity(perClient)
                    for _ in 0..<perClient {
                        var body = Data(count: payloadSize)
                        let stamp = DispatchTime.now().uptimeNanoseconds
                        withUnsafeBytes(of: stamp) { body.replaceSubrange(0..<8, with: $0) }
                        _ = try await publisher.publish(
                            topic: topic, payload: body, idempotencyKey: MessageSealing.newMessageID(),
                            access: access)
                        acks.append(Double(DispatchTime.now().uptimeNanoseconds - stamp) / 1_000_000)
                    }
                    return ([], acks)
                }
            }
            var deliveries: [Double] = []
            var acks: [Double] = []
            for try await part in group {
                deliveries.append(contentsOf: part.deliveries)
                acks.append(contentsOf: part.acks)
            }
            return (deliveries, acks)
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1_000_000_000
        let cpu = CPUSample(relayPIDs: relayPIDs).since(cpuBefore)
        for (readers, publisher, _, _) in pairs {
            for subscriber in readers { await subscriber.close() }
            await publisher.close()
        }
        return Result(
            delivered: latencies.count, seconds: seconds, latenciesMs: latencies.sorted(),
            ackLatenciesMs: ackLatencies.sorted(), relayCPUMilliseconds: cpu.relay, clientCPUMilliseconds: cpu.clients)
    }
}

/// A relay in a child process, started from this same executable.
struct ChildRelay {
    let process: Process
    let url: URL
    let dataDirectory: URL
    var pid: Int32 { process.processIdentifier }

    static func start(postgres: String? = nil) throws -> ChildRelay {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("rally-bench-\(UUID().uuidString)")
        let (process, url) = try BenchChild.start(
            [ChildRelayCommand.configuration.commandName!, "--data", data.path]
                + (postgres.map { ["--postgres", $0] } ?? []),
            failure: "the relay process exited before listening"
        ) { line -> URL? in
            guard line.contains("listening on "),
                let urlText = line.split(separator: " ").first(where: { $0.hasPrefix("http://") })
            else { return nil }
            return URL(string: String(urlText))
        }
        return ChildRelay(process: process, url: url, dataDirectory: data)
    }

    func peakMemoryKiB() -> Int? { ProcessMemory.peakKiB(pid: pid) }

    /// SIGTERM, not SIGINT: a bench started in the background by a shell
    /// without job control (a script's `&`) has SIGINT ignored, and its
    /// children inherit that, so an interrupt left the child running and
    /// `waitUntilExit` spinning for good. The relay stops gracefully on either.
    func stop() {
        process.terminate()
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: dataDirectory)
    }
}

/// A child process running a subcommand of this same executable.
enum BenchChild {
    /// Starts `/proc/self/exe arguments…` and reads its output until a line
    /// gives `ready` a value (the child is then ready).
    static func start<Ready>(
        _ arguments: [String], failure: String, ready: (Substring) -> Ready?
    ) throws -> (Process, Ready) {
        let (process, pipe) = child(arguments)
        try process.run()
        var buffer = Data()
        while true {
            let chunk = pipe.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw ValidationError(failure) }
            buffer.append(chunk)
            for line in String(decoding: buffer, as: UTF8.self).split(separator: "\n") {
                if let value = ready(line) { return (process, value) }
            }
        }
    }

    /// `/proc/self/exe arguments…`, not yet started, with its output on the
    /// returned pipe and, as its stdin, a pipe this process never writes:
    /// the child sees its end of file when this process is gone, however it
    /// ended (``stopWhenParentIsGone()``).
    static func child(_ arguments: [String]) -> (Process, output: Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = Pipe()
        return (process, output)
    }

    /// In a child: stops this process (gracefully, by SIGTERM) once the
    /// parent bench is gone. A bench that crashed or was killed left its
    /// relay and admin running, holding its output pipe open, so a shell
    /// reading the bench's output waited for good. Only a child whose
    /// stdin is a pipe watches it: one started by hand keeps its terminal.
    static func stopWhenParentIsGone() {
        var status = stat()
        guard fstat(STDIN_FILENO, &status) == 0, status.st_mode & S_IFMT == S_IFIFO else { return }
        Thread.detachNewThread {
            _ = FileHandle.standardInput.readDataToEndOfFile()
            kill(getpid(), SIGTERM)
        }
    }
}
