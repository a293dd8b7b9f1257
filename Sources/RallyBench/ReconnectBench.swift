import ArgumentParser
import Foundation
import Logging
import RallyCore
import RallyRelay

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `rally-bench reconnect`: how quickly live clients recover when their
/// relay restarts, and how often they knock while it stays down.
///
/// For each way of stopping the relay (`--mode`: `graceful` is SIGTERM,
/// after which the relay sends every subscriber SHUTTING_DOWN and clients
/// come back after a random pause within the policy's `shutdownJitter`;
/// `kill` is SIGKILL, so clients only see their sockets close and climb the
/// recovery ladder) and each client count (`--clients`), the bench:
///
/// 1. starts the relay as a child process (`child-relay`, this executable)
///    on a loopback port picked free once and then kept, its store in a
///    temporary directory, the connection limits raised for one address;
/// 2. creates that many identities, each a `RallyClient` in this process
///    with a home of its own under one temporary directory and the SDK's
///    `ConnectionPolicy.standard` (or `--backoff-cap-ms`), and starts a
///    live inbox follower on each: one WebSocket per client (the request
///    link `create` opened is closed again). It waits until every follower
///    has caught up;
/// 3. restart: stops the relay and at once starts it again on the same
///    port and store. Per client, the time from the stop signal to its
///    follower's next `.caughtUp` (resubscribed, backlog read) gives
///    p50/p99/max. Meanwhile the relay's `/metrics` is scraped every
///    100 ms; it has no connection counter, only a gauge of open WebSocket
///    connections (`rally_relay_open_connections`, counted from the upgrade,
///    before authentication), so the peak rate is the largest rise of that
///    gauge within any one second. Next to it, from the clients' side, the
///    most followers that resubscribed (first `.caughtUp`) within one second;
/// 4. outage (`--outage SECONDS`, 0 skips it): stops the relay the same
///    way, keeps it down that long, then starts it again. It prints the
///    recovery attempts the clients made meanwhile (the change in their
///    `connectionReport().attempts`, summed, per rung), that rate per
///    client per minute (the backoff's cap, 30 s with full jitter, bounds
///    it) and the time from the new relay's start until the median and the
///    last client caught up.
///
/// Prints numbers; asserts nothing.
struct ReconnectBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reconnect", abstract: "Measure client recovery after a relay restart and during an outage.")

    @Option(help: "Client counts, comma-separated.") var clients = "1,100,1000"
    @Option(help: "How the relay is stopped: graceful (SIGTERM), kill (SIGKILL) or both.") var mode = "both"
    @Option(help: "Seconds the relay stays down in the outage run (0: no outage run).") var outage = 60
    @Option(help: "The backoff's cap in milliseconds (default: the SDK's).") var backoffCapMs: Int?
    @Option(help: "Seconds to wait for every client to catch up before giving up.") var timeout = 300

    enum Mode: String, CaseIterable {
        case graceful, kill

        var signal: Int32 { self == .graceful ? SIGTERM : SIGKILL }
    }

    func run() async throws {
        let counts = clients.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !counts.isEmpty, counts.allSatisfy({ $0 > 0 }) else {
            throw ValidationError("--clients: e.g. 1,100,1000")
        }
        let modes: [Mode]
        if mode == "both" {
            modes = Mode.allCases
        } else if let one = Mode(rawValue: mode) {
            modes = [one]
        } else {
            throw ValidationError("--mode must be graceful, kill or both")
        }
        guard outage >= 0, timeout > 0 else { throw ValidationError("--outage must be >= 0, --timeout > 0") }
        var policy = ConnectionPolicy.standard
        if let backoffCapMs {
            guard backoffCapMs > 0 else { throw ValidationError("--backoff-cap-ms must be positive") }
            policy.backoff = Backoff(base: policy.backoff.base, cap: .milliseconds(backoffCapMs))
        }
        Output.write(
            "clients: one process, a home and a live inbox follower (one WebSocket) each; policy: backoff "
                + "\(Self.ms(policy.backoff.base)) ms doubling to \(Self.ms(policy.backoff.cap)) ms with full "
                + "jitter, shutdownJitter \(Self.ms(policy.shutdownJitter)) ms, transport \(policy.transport)")
        Output.write("relay: child process (child-relay), SIGTERM/SIGKILL then restarted on the same port and store")
        for mode in modes {
            var restarts: [String] = []
            var outages: [String] = []
            var notes: [String] = []
            for count in counts {
                let result = try await measure(mode: mode, clients: count, policy: policy)
                restarts.append(result.restartRow)
                if let row = result.outageRow { outages.append(row) }
                notes += result.notes
            }
            Output.write("")
            switch mode {
            case .graceful:
                Output.write(
                    "== graceful: SIGTERM (relay sends SHUTTING_DOWN, waits for in-flight commits), restart at once")
            case .kill:
                Output.write("== kill: SIGKILL (no notice; sockets just close), restart at once")
            }
            Output.write(
                "restart → each client's next caughtUp, ms from the signal; ping attempts come from clients that saw a "
                    + "plain drop (a SHUTTING_DOWN notice skips that rung); peak/s: relay = max 1 s rise of the "
                    + "open-connections gauge (100 ms scrapes), clients = resubscribes within 1 s")
            Output.write(
                "clients  relay down ms  p50 ms  p99 ms  max ms  attempts  of them ping  peak conn/s relay  "
                    + "peak resub/s clients  on http")
            for row in restarts { Output.write(row) }
            if outage > 0 {
                Output.write(
                    "outage of \(outage) s: recovery attempts while down (all clients, per rung; ping only asks the "
                        + "old link, no new connection), then ms from the relay's start to caughtUp")
                Output.write(
                    "clients  attempts   ping  reconnect  reauth   http  per client/min  caught-up p50 ms  "
                        + "all caught-up ms")
                for row in outages { Output.write(row) }
            }
            for note in notes { Output.write("note: \(note)") }
        }
        Output.write("")
        Output.write(
            "bench process peak memory (VmHWM): \(ProcessMemory.peakKiB().map { "\($0 / 1024) MiB" } ?? "unknown")"
        )
    }

    struct Result {
        var restartRow: String
        var outageRow: String?
        var notes: [String]
    }

    private func measure(mode: Mode, clients count: Int, policy: ConnectionPolicy) async throws -> Result {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("rally-bench-reconnect-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("relay")
        let maxConnections = max(RelayLimits.Defaults.maxConnections, 4 * count)
        var relay = try await RelayChild.start(port: 0, data: data, maxConnections: maxConnections)
        // On a failure part-way, the relay must not outlive the bench.
        defer { if relay.process.isRunning { kill(relay.process.processIdentifier, SIGKILL) } }
        let port = relay.port
        var logger = Logger(label: "rally.bench")
        logger.logLevel = .error
        var notes: [String] = []
        let label = "\(mode.rawValue), \(count) clients"

        Self.progress("\(label): creating clients")
        let clients = try await Self.createClients(
            count: count, homes: root.appendingPathComponent("homes"), relayURL: relay.url, logger: logger,
            policy: policy)
        let log = CatchUpLog(clients: count)
        let followers = clients.enumerated().map { index, client in
            Task {
                do {
                    try await client.followInbox(untilCaughtUp: false) { event in
                        if case .caughtUp = event { log.caughtUp(index) }
                    }
                } catch {
                    log.ended(index, "\(error)")
                }
            }
        }
        let clock = ContinuousClock()
        let started = clock.now
        let initial = await log.wait(after: started - .seconds(3600), within: .seconds(timeout))
        let missing = initial.filter { $0 == nil }.count
        guard missing == 0 else {
            throw ValidationError("\(missing) of \(count) followers did not catch up at the start: \(log.endings())")
        }
        Self.progress("\(label): all followers caught up in \(Int(Self.ms(clock.now - started))) ms; restarting")

        // Restart.
        let sampler = GaugeSampler(url: relay.url.appendingPathComponent("metrics"))
        let sampling = Task { await sampler.run() }
        try await Task.sleep(for: .milliseconds(300))
        var before = await Self.attempts(of: clients)
        let stopped = clock.now
        await relay.stop(signal: mode.signal)
        relay = try await RelayChild.start(port: port, data: data, maxConnections: maxConnections)
        let down = Self.ms(clock.now - stopped)
        let recovered = await log.wait(after: stopped, within: .seconds(timeout))
        let onHTTP = await Self.onHTTP(clients)
        try await Task.sleep(for: .milliseconds(500))
        sampling.cancel()
        await sampling.value
        var after = await Self.attempts(of: clients)
        let latencies = recovered.compactMap { $0.map { Self.ms($0 - stopped) } }.sorted()
        if latencies.count < count {
            notes.append("\(label), restart: \(count - latencies.count) clients did not catch up within \(timeout) s")
        }
        let restartRow = String(
            format: "%7d  %13.0f  %6.0f  %6.0f  %6.0f  %8d  %12d  %17.0f  %20d  %7d", count, down,
            Self.percentile(latencies, 0.5), Self.percentile(latencies, 0.99), latencies.last ?? .nan,
            Self.total(after) - Self.total(before), after[.ping, default: 0] - before[.ping, default: 0],
            sampler.peakRise(since: stopped),
            Self.peakPerSecond(recovered.compactMap { $0 }), onHTTP)

        // Outage.
        var outageRow: String?
        if outage > 0 {
            // Clients that recovered on the HTTP fallback move back to a
            // WebSocket after a backoff pause: let them settle first.
            try await Task.sleep(for: .seconds(2))
            Self.progress("\(label): outage of \(outage) s")
            before = await Self.attempts(of: clients)
            let outageStart = clock.now
            await relay.stop(signal: mode.signal)
            try await clock.sleep(until: outageStart + .seconds(outage))
            after = await Self.attempts(of: clients)
            let restarted = clock.now
            relay = try await RelayChild.start(port: port, data: data, maxConnections: maxConnections)
            let back = await log.wait(after: restarted, within: .seconds(timeout))
            let times = back.compactMap { $0.map { Self.ms($0 - restarted) } }.sorted()
            if times.count < count {
                notes.append("\(label), outage: \(count - times.count) clients did not catch up within \(timeout) s")
            }
            let attempts = Self.total(after) - Self.total(before)
            func rung(_ rung: RelayRecoveryRung) -> Int { after[rung, default: 0] - before[rung, default: 0] }
            outageRow = String(
                format: "%7d  %8d  %5d  %9d  %6d  %5d  %14.2f  %16.0f  %16.0f", count, attempts, rung(.ping),
                rung(.reconnect), rung(.reauthenticate), rung(.httpFallback),
                Double(attempts) / Double(count) / (Double(outage) / 60), Self.percentile(times, 0.5),
                times.count == count ? times.last ?? .nan : .nan)
        }

        // Shut down: followers first (their links close on a live relay),
        // then the clients' links, then the relay.
        Self.progress("\(label): shutting down")
        for follower in followers { follower.cancel() }
        let finished = Flag()
        Task {
            for follower in followers { await follower.value }
            finished.set()
        }
        let deadline = clock.now + .seconds(30)
        while !finished.isSet, clock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        if !finished.isSet { notes.append("\(label): some followers had not ended 30 s after cancellation") }
        for client in clients { await client.disconnect() }
        await relay.stop(signal: SIGTERM, killAfter: .seconds(10))
        return Result(restartRow: restartRow, outageRow: outageRow, notes: notes)
    }

    /// Creates `count` identities, 16 at a time, each with its own home.
    /// Each closes the request link `create` opened to publish its key
    /// bundle, so the follower's link is its only connection.
    private static func createClients(
        count: Int, homes: URL, relayURL: URL, logger: Logger, policy: ConnectionPolicy
    ) async throws -> [RallyClient] {
        var clients: [RallyClient] = []
        clients.reserveCapacity(count)
        for chunk in stride(from: 0, to: count, by: 16) {
            let made = try await withThrowingTaskGroup(of: (Int, RallyClient).self) { group in
                for index in chunk..<min(chunk + 16, count) {
                    group.addTask {
                        let client = try await RallyClient.create(
                            home: homes.appendingPathComponent("c\(index)"), relayURL: relayURL,
                            displayName: "client-\(index)", logger: logger, connection: policy)
                        await client.disconnect()
                        return (index, client)
                    }
                }
                var made: [(Int, RallyClient)] = []
                for try await pair in group { made.append(pair) }
                return made.sorted { $0.0 < $1.0 }.map(\.1)
            }
            clients += made
        }
        return clients
    }

    /// Recovery attempts so far, summed over every client, per rung.
    private static func attempts(of clients: [RallyClient]) async -> [RelayRecoveryRung: Int] {
        var sum: [RelayRecoveryRung: Int] = [:]
        for client in clients {
            for (rung, attempts) in await client.connectionReport().attempts { sum[rung, default: 0] += attempts }
        }
        return sum
    }

    private static func onHTTP(_ clients: [RallyClient]) async -> Int {
        var count = 0
        for client in clients where await client.connectionReport().transport == .http { count += 1 }
        return count
    }

    private static func total(_ attempts: [RelayRecoveryRung: Int]) -> Int { attempts.values.reduce(0, +) }

    /// The most instants that fall within one second of each other.
    private static func peakPerSecond(_ instants: [ContinuousClock.Instant]) -> Int {
        let sorted = instants.sorted()
        var best = 0
        var low = 0
        for high in sorted.indices {
            while sorted[high] - sorted[low] >= .seconds(1) { low += 1 }
            best = max(best, high - low + 1)
        }
        return best
    }

    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return .nan }
        return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
    }

    static func ms(_ duration: Duration) -> Double { GroupBench.milliseconds(duration) }

    /// Progress on stderr, so stdout holds the results only.
    static func progress(_ line: String) {
        FileHandle.standardError.write(Data(("reconnect: " + line + "\n").utf8))
    }

}

/// When each client's follower reported `.caughtUp`, and how followers
/// ended (they should not, until cancelled).
// NSLock rather than Synchronization.Mutex: the package still targets
// macOS 14.
final class CatchUpLog: @unchecked Sendable {
    private let lock = NSLock()
    private var times: [[ContinuousClock.Instant]]
    private var ends: [Int: String] = [:]

    init(clients: Int) {
        times = Array(repeating: [], count: clients)
    }

    func caughtUp(_ index: Int) {
        let now = ContinuousClock.now
        lock.withLock { times[index].append(now) }
    }

    func ended(_ index: Int, _ reason: String) {
        lock.withLock { ends[index] = reason }
    }

    func endings() -> String {
        lock.withLock { ends.isEmpty ? "none ended" : ends.values.prefix(3).joined(separator: "; ") }
    }

    /// Each client's first `.caughtUp` at or after `start`.
    func first(after start: ContinuousClock.Instant) -> [ContinuousClock.Instant?] {
        lock.withLock { times.map { $0.first { $0 >= start } } }
    }

    /// Waits until every client caught up at or after `start`, or
    /// `limit` passed; returns each client's instant (nil: not yet).
    func wait(after start: ContinuousClock.Instant, within limit: Duration) async -> [ContinuousClock.Instant?] {
        let deadline = ContinuousClock.now + limit
        while true {
            let firsts = first(after: start)
            if !firsts.contains(where: { $0 == nil }) || ContinuousClock.now >= deadline { return firsts }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}

/// Scrapes the relay's open-connections gauge every 100 ms. A scrape that
/// fails (the relay is down) counts as 0: a relay that is not running has
/// no connections, and the new one starts from 0.
final class GaugeSampler: @unchecked Sendable {
    private let lock = NSLock()
    private var samples: [(at: ContinuousClock.Instant, value: Double)] = []
    private let url: URL
    private let session: URLSession

    init(url: URL) {
        self.url = url
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 1
        session = URLSession(configuration: configuration)
    }

    func run() async {
        let clock = ContinuousClock()
        var next = clock.now
        while !Task.isCancelled {
            let value = await scrape() ?? 0
            let at = clock.now
            lock.withLock { samples.append((at, value)) }
            next += .milliseconds(100)
            if next < clock.now { next = clock.now }
            try? await clock.sleep(until: next)
        }
        session.invalidateAndCancel()
    }

    private func scrape() async -> Double? {
        guard let (body, response) = try? await session.data(for: URLRequest(url: url, timeoutInterval: 1)),
            (response as? HTTPURLResponse)?.statusCode == 200
        else { return nil }
        for line in String(decoding: body, as: UTF8.self).split(separator: "\n")
        where line.hasPrefix("rally_relay_open_connections") {
            return line.split(separator: " ").last.flatMap { Double($0) }
        }
        return nil
    }

    /// The largest rise of the gauge within any one second, among the
    /// samples taken since `start`.
    func peakRise(since start: ContinuousClock.Instant) -> Double {
        let samples = lock.withLock { self.samples }
        var best = 0.0
        for (index, sample) in samples.enumerated() where sample.at >= start {
            let window = samples[...index].filter { sample.at - $0.at <= .seconds(1) }
            best = max(best, sample.value - (window.map(\.value).min() ?? sample.value))
        }
        return best
    }
}

/// One `child-relay` process (this executable) on a given port.
final class RelayChild: Sendable {
    let process: Process
    let url: URL
    let port: Int

    private init(process: Process, url: URL, port: Int) {
        self.process = process
        self.url = url
        self.port = port
    }

    /// Starts the relay and waits for its "listening on" line. A restart
    /// on a fixed port retries briefly while the old listener lets go.
    static func start(port: Int, data: URL, maxConnections: Int) async throws -> RelayChild {
        for _ in 0..<100 {
            if let relay = try await onThread({
                try startBlocking(port: port, data: data, maxConnections: maxConnections)
            }
            ) {
                return relay
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw ValidationError("the relay did not start listening on port \(port)")
    }

    private static func startBlocking(port: Int, data: URL, maxConnections: Int) throws -> RelayChild? {
        let (process, out) = BenchChild.child([
            ChildRelayCommand.configuration.commandName!, "--data", data.path, "--port", String(port),
            "--max-connections", String(maxConnections),
        ])
        try process.run()
        var buffer = Data()
        while true {
            let chunk = out.fileHandleForReading.availableData
            guard !chunk.isEmpty else {
                process.waitUntilExit()
                return nil
            }
            buffer.append(chunk)
            let text = String(decoding: buffer, as: UTF8.self)
            if let line = text.split(separator: "\n").first(where: { $0.contains("listening on ") }),
                let word = line.split(separator: " ").first(where: { $0.hasPrefix("http://") }),
                let url = URL(string: String(word)), let port = url.port
            {
                // Read the rest (the "stopped" line) so the pipe never fills.
                let handle = out.fileHandleForReading
                Thread.detachNewThread { _ = handle.readDataToEndOfFile() }
                return RelayChild(process: process, url: url, port: port)
            }
        }
    }

    /// Sends `signal` and waits for the process to end; with `killAfter`,
    /// a process still running then gets SIGKILL.
    func stop(signal: Int32, killAfter: Duration? = nil) async {
        let clock = ContinuousClock()
        let deadline = killAfter.map { clock.now + $0 }
        kill(process.processIdentifier, signal)
        while process.isRunning {
            if let deadline, clock.now >= deadline {
                kill(process.processIdentifier, SIGKILL)
                break
            }
            try? await Task.sleep(for: .milliseconds(2))
        }
        while process.isRunning { try? await Task.sleep(for: .milliseconds(2)) }
    }

    /// Runs blocking work (pipes, a child's exit) on a thread of its own,
    /// never on the Swift concurrency pool.
    private static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
        }
    }
}

/// A flag set once, read by a poller.
final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false

    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}
