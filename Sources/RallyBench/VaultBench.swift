import ArgumentParser
import Foundation
import Logging
import RallyCore
import RallyCrypto

/// `rally-bench vault`: document upload and download throughput through
/// the `rally` CLI (a process of its own, so its peak memory is the
/// client's), next to this machine's raw disk write speed measured in the
/// same run; and the time to revoke a nominee of a vault of many
/// documents (rotate the key, rewrap every document key, grant the rest).
/// Prints numbers; asserts nothing.
struct VaultBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vault", abstract: "Measure vault document throughput, client memory and revocation cost.")

    @Option(help: "Document sizes in MB (10^6 bytes), comma-separated.") var sizes = "1,200"
    @Option(help: "Documents in the vault whose nominee is revoked.") var documents = 1000

    func run() async throws {
        let sizes = self.sizes.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !sizes.isEmpty, sizes.allSatisfy({ $0 > 0 }) else { throw ValidationError("--sizes: e.g. 1,200") }
        let rally = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("rally")
        guard FileManager.default.isExecutableFile(atPath: rally.path) else {
            throw ValidationError("build the CLI too: swift build -c release --product rally")
        }
        let relay = try ChildRelay.start()
        defer { relay.stop() }
        let work = FileManager.default.temporaryDirectory.appendingPathComponent(
            "rally-bench-vault-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        Output.write(
            "relay: separate process pid \(relay.pid) on \(relay.url); client: \(rally.path), one process per command")

        let home = work.appendingPathComponent("owner").path
        func cli(_ arguments: [String]) throws -> (seconds: Double, peakBytes: Int) {
            let report = work.appendingPathComponent("peak-\(UUID().uuidString)")
            let process = Process()
            process.executableURL = rally
            process.arguments = arguments + ["--home", home, "--relay", relay.url.absoluteString]
            var environment = ProcessInfo.processInfo.environment
            environment["RALLY_PEAK_MEMORY_REPORT"] = report.path
            process.environment = environment
            process.standardOutput = FileHandle.nullDevice
            let start = ContinuousClock.now
            try process.run()
            process.waitUntilExit()
            let seconds = (ContinuousClock.now - start).seconds
            guard process.terminationStatus == 0 else {
                throw ValidationError("rally \(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
            }
            let peak = (try? String(contentsOf: report, encoding: .utf8)).flatMap { Int($0) } ?? 0
            return (seconds, peak)
        }
        _ = try cli(["id", "new", "--name", "Bench"])
        _ = try cli(["vault", "create", "Bench"])

        Output.write("size MB  disk write MB/s  upload MB/s  download MB/s  add peak MiB  get peak MiB")
        for size in sizes {
            let bytes = size * 1_000_000
            let file = work.appendingPathComponent("doc-\(size).bin")
            let diskSeconds = try Self.writeFile(file, bytes: bytes)
            let add = try cli(["vault", "add", "Bench", file.path])
            let output = work.appendingPathComponent("out-\(size).bin")
            let get = try cli(["vault", "get", "Bench", file.lastPathComponent, "-o", output.path])
            let mb = Double(bytes) / 1_000_000
            Output.write(
                String(
                    format: "%7d  %15.1f  %11.1f  %13.1f  %12.1f  %12.1f", size, mb / diskSeconds, mb / add.seconds,
                    mb / get.seconds, Double(add.peakBytes) / 1_048_576, Double(get.peakBytes) / 1_048_576))
            try? FileManager.default.removeItem(at: file)
            try? FileManager.default.removeItem(at: output)
        }
        Output.write("(upload and download: the whole command, start to exit, sealing and checking included)")

        let revoke = try await revocation(documents: documents, relayURL: relay.url, work: work)
        Output.write(
            String(
                format:
                    "revoke a nominee of a vault of %d documents: %.0f ms (rotate the key, rewrap %d keys, grant 1 other nominee)",
                documents, revoke * 1000, documents))
        Output.write("relay peak memory (VmHWM): \(relay.peakMemoryKiB().map { "\($0 / 1024) MiB" } ?? "unknown")")
    }

    /// Writes `bytes` of data and fsyncs, returning the seconds it took:
    /// the disk's speed as the client's files see it.
    static func writeFile(_ url: URL, bytes: Int) throws -> Double {
        _ = FileManager.default.createFile(atPath: url.path, contents: nil)
        let handle = try FileHandle(forWritingTo: url)
        var chunk = Data(count: 1 << 20)
        chunk.withUnsafeMutableBytes { buffer in
            for index in buffer.indices { buffer[index] = UInt8(truncatingIfNeeded: index &* 2_654_435_761 >> 13) }
        }
        let start = ContinuousClock.now
        var written = 0
        var index: UInt64 = 0
        while written < bytes {
            var piece = chunk.prefix(min(chunk.count, bytes - written))
            withUnsafeBytes(of: &index) { piece.replaceSubrange(0..<8, with: $0) }
            index += 1
            try handle.write(contentsOf: piece)
            written += piece.count
        }
        try handle.synchronize()
        try handle.close()
        return (ContinuousClock.now - start).seconds
    }

    /// A vault of `documents` small documents with two active nominees;
    /// the time to revoke one.
    private func revocation(documents: Int, relayURL: URL, work: URL) async throws -> Double {
        var logger = Logger(label: "rally.bench")
        logger.logLevel = .error
        func client(_ name: String) async throws -> RallyClient {
            try await RallyClient.create(
                home: work.appendingPathComponent("revoke-\(name)"), relayURL: relayURL, displayName: name,
                logger: logger)
        }
        let owner = try await client("owner")
        let gone = try await client("gone")
        let stays = try await client("stays")
        let vault = try await owner.createVault(name: "Many")
        let file = work.appendingPathComponent("small.txt")
        try Data("a small document".utf8).write(to: file)
        for index in 0..<documents {
            _ = try await owner.addDocument(to: vault.id, file: file, name: "document \(index)")
        }
        for nominee in [gone, stays] {
            let sent = try await owner.inviteNominee(to: vault.id, invitee: nominee.inboxID, name: "\(nominee.inboxID)")
            _ = try await nominee.acceptVaultInvitation(sent.link)
            _ = try await owner.confirmNominee(nominee.inboxID.rawValue, of: vault.id)
        }
        let start = ContinuousClock.now
        _ = try await owner.revokeNominee(gone.inboxID.rawValue, of: vault.id)
        let seconds = (ContinuousClock.now - start).seconds
        let readable = try await stays.documents(in: vault.id).count
        guard readable == documents else {
            throw ValidationError(
                "the remaining nominee reads \(readable) of \(documents) documents after the rotation")
        }
        for client in [owner, gone, stays] { await client.disconnect() }
        return seconds
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
