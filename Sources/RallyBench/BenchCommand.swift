import ArgumentParser
import Foundation
import Logging
import RallyRelay

/// `rally-bench`: benchmarks that print measurements, kept out of the
/// `rally` CLI. Run them built for release:
/// `swift run -c release rally-bench relay|group|join|reconnect|vault|call|idle|store`.
@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rally-bench", abstract: "Benchmarks that print measurements.",
        subcommands: [
            RelayBench.self, GroupBench.self, JoinBench.self, ReconnectBench.self, VaultBench.self, CallBench.self,
            IdleBench.self, StoreBench.self,
            ChildRelayCommand.self, ChildAdminCommand.self, ChildStoreOpenCommand.self,
        ])
}

/// The relay a bench measures, run by `ChildRelay` as a child process of
/// the bench (so its memory is its own): `rally relay` on a free loopback
/// port, with the per-address limits lifted because every client of a
/// bench runs on loopback (the per-connection and per-identity ones stay).
/// `--port` and `--max-connections` are named as `rally relay`'s flags:
/// `reconnect` restarts the relay on the port it first got and raises the
/// connection limit for its thousand clients.
struct ChildRelayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "child-relay", abstract: "The relay a bench starts as its child process.",
        shouldDisplay: false)

    @Option(help: "Directory of the relay's SQLite store.") var data: String
    @Option(help: "Port to listen on (0 picks a free one).") var port = 0
    @Option(help: "Open WebSocket connections allowed in all.")
    var maxConnections = RelayLimits.Defaults.maxConnections
    @Option(help: "The PostgreSQL to keep envelopes in (a node of several); none: SQLite in --data.")
    var postgres: String?

    func run() async throws {
        BenchChild.stopWhenParentIsGone()
        var logger = Logger(label: "rally.relay")
        logger.logLevel = .error
        var limits = RelayLimits.default
        limits.publishRatePerSecondPerIP = 1_000_000
        limits.publishBurstPerIP = 1_000_000
        limits.maxConnectionsPerIP = 100_000
        limits.maxConnections = maxConnections
        limits.rooms.createRatePerSecondPerIP = 1_000_000
        limits.rooms.createBurstPerIP = 1_000_000
        var location: PostgresLocation?
        if let postgres {
            do {
                location = try PostgresLocation.parse(postgres)
            } catch {
                throw ValidationError("--postgres: \(error.reason)")
            }
        }
        let configuration = RelayConfiguration(
            host: "127.0.0.1", port: port, dataDirectory: URL(fileURLWithPath: data), limits: limits,
            postgres: location)
        try await RelayMain.run(configuration: configuration, logger: logger)
    }
}

/// Bench results on stdout, one line each. Every line is composed by the
/// bench itself (numbers, the relay's URL), so nothing needs escaping.
enum Output {
    static func write(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
}

/// A process's memory as Linux reports it in `/proc/<pid>/status`, in KiB.
enum ProcessMemory {
    /// Peak resident memory (`VmHWM`) of `pid`, or of this process.
    static func peakKiB(pid: Int32? = nil) -> Int? { field("VmHWM:", pid: pid) }
    /// Resident memory now (`VmRSS`) of `pid`, or of this process.
    static func residentKiB(pid: Int32? = nil) -> Int? { field("VmRSS:", pid: pid) }

    private static func field(_ name: String, pid: Int32?) -> Int? {
        let path = pid.map { "/proc/\($0)/status" } ?? "/proc/self/status"
        guard let status = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(name) {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        }
        return nil
    }
}

/// A process's CPU time (user + system) as Linux reports it in
/// `/proc/<pid>/stat`, in milliseconds.
enum ProcessCPU {
    static func milliseconds(pid: Int32? = nil) -> Double? {
        let path = pid.map { "/proc/\($0)/stat" } ?? "/proc/self/stat"
        guard let stat = try? String(contentsOfFile: path, encoding: .utf8),
            let afterName = stat.range(of: ") ", options: .backwards)
        else { return nil }
        // Fields after the command name start at field 3; utime and stime
        // are fields 14 and 15.
        let fields = stat[afterName.upperBound...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) * 1000 / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
