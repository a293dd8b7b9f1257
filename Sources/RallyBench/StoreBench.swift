import ArgumentParser
import Foundation
import RallyRelay

/// `rally-bench store`: the embedded store with many envelopes. Fills a
/// store through its append (batches as the relay's writer forms them),
/// then opens it in a process of its own, the way a relay starts, and
/// prints how long the open took and the memory the index holds; then
/// prunes what expired until the disk stops shrinking (segments deleted or
/// compacted). Prints numbers; asserts nothing.
struct StoreBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store", abstract: "Measure filling and opening an embedded store with many envelopes.")

    @Option(help: "Envelopes to store.") var envelopes = 1_000_000
    @Option(help: "Topics they are spread over.") var topics = 1_000
    @Option(help: "Payload bytes per envelope.") var payload = 256
    @Option(help: "Publishes per batch (the relay's writer forms up to 512).") var batch = 512
    @Option(help: "Percent of the envelopes that expire (the rest never do), for the pruning measured last.")
    var expiring = 90

    func run() async throws {
        guard envelopes > 0, topics > 0, payload >= 0, batch > 0, (0...100).contains(expiring) else {
            throw ValidationError(
                "--envelopes, --topics and --batch must be positive, --payload not negative, --expiring 0 to 100")
        }
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("rally-bench-store-\(UUID())")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: data) }
        let url = data.appendingPathComponent("relay.sqlite")

        let store = try SQLiteRelayStore(url: url)
        let body = Data(repeating: 0x5A, count: payload)
        let started = ContinuousClock.now
        var stored = 0
        while stored < envelopes {
            let count = min(batch, envelopes - stored)
            let requests = (stored..<(stored + count)).map { index in
                PublishRequest(
                    topic: "bench/store-\(index % topics)", payload: body,
                    idempotencyKey: withUnsafeBytes(of: UInt128(index).littleEndian) { Data($0) },
                    expiresAtMilliseconds: index % 100 < expiring ? 10 : 0)
            }
            _ = try await store.append(requests, serverTimeMilliseconds: 1)
            stored += count
        }
        let filled = (ContinuousClock.now - started).seconds
        try await store.close()
        let onDisk = Self.bytes(under: data)

        let (process, pipe) = BenchChild.child([ChildStoreOpenCommand.configuration.commandName!, "--store", url.path])
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let fields = output.split(separator: " ").compactMap {
            Double($0.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        guard process.terminationStatus == 0, fields.count == 3 else {
            throw ValidationError("the store did not open in its own process: \(output)")
        }
        Output.write(
            "stored \(envelopes) envelopes of \(payload) bytes on \(topics) topics in batches of \(batch): "
                + String(
                    format: "%.2f s (%.0f envelopes/s), %.1f MiB on disk", filled, Double(envelopes) / filled,
                    Double(onDisk) / 1_048_576))
        Output.write(
            String(
                format:
                    "opened in a fresh process in %.2f s; resident memory %.1f MiB after the open (%.1f MiB before)",
                fields[0], fields[2] / 1024, fields[1] / 1024))
        if expiring > 0 { try await prune(url, data: data) }
    }

    /// Prunes until a pruning changes nothing on disk: each deletes what
    /// expired, compacts up to 32 MiB of mostly dead segments and deletes
    /// the segments left empty.
    private func prune(_ url: URL, data: URL) async throws {
        let store = try SQLiteRelayStore(url: url)
        var rounds = 0
        var previous = Self.bytes(under: data)
        while true {
            let started = ContinuousClock.now
            let pruned = try await store.deleteExpired(nowMilliseconds: 20)
            let took = (ContinuousClock.now - started).seconds
            let now = Self.bytes(under: data)
            rounds += 1
            Output.write(
                String(
                    format: "pruning %d: %d envelopes pruned in %.2f s; %.1f MiB on disk", rounds, pruned, took,
                    Double(now) / 1_048_576))
            if now == previous || rounds == 100 { break }
            previous = now
        }
        try await store.close()
    }

    private static func bytes(under directory: URL) -> Int {
        let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.fileSizeKey])
        var total = 0
        while let file = files?.nextObject() as? URL {
            total += (try? file.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0
        }
        return total
    }
}

/// Opens a store and prints, on one line, the seconds the open took and
/// the resident KiB before and after it; then exits.
struct ChildStoreOpenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "child-store-open", abstract: "Opens a store as a relay starting would.", shouldDisplay: false)

    @Option(help: "The store's SQLite file.") var store: String

    func run() async throws {
        let before = ProcessMemory.residentKiB() ?? 0
        let started = ContinuousClock.now
        let opened = try SQLiteRelayStore(url: URL(fileURLWithPath: store))
        let seconds = (ContinuousClock.now - started).seconds
        let after = ProcessMemory.residentKiB() ?? 0
        Output.write("\(seconds) \(before) \(after)")
        try await opened.close()
    }
}
