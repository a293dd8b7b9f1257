import CRallySQLite
import Foundation
import GRDB
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyRelay

/// Every relay database commits with `synchronous=FULL`, so nothing is
/// acknowledged before the fsync that holds it. GRDB turns a pool's writer
/// to NORMAL when it sets up WAL, after `prepareDatabase`; until stop 27
/// the pragma was set there and lost.
@Suite("Relay store durability", .timeLimit(.minutes(10)))
struct StoreDurabilityTests {
    static let full = 2

    /// With SQLite's memory statistics on, every allocation of every
    /// connection takes one process-wide mutex (docs/adr/0042). They can
    /// only be turned off before SQLite starts, so the store does it before
    /// it opens a connection. In a process of its own, where this store is
    /// the first to open SQLite, whatever other tests opened before.
    @Test("a relay store turns SQLite's memory statistics off before it opens SQLite")
    func memoryStatisticsAreOff() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let url = directory.url.appendingPathComponent("relay.sqlite")
        await #expect(processExitsWith: .success) { [url = url as URL] in
            let store = try SQLiteRelayStore(url: url)
            let request = PublishRequest(topic: "group/a", payload: Data("x".utf8), idempotencyKey: Data("k".utf8))
            _ = try await store.append([request], serverTimeMilliseconds: 1)
            // SQLITE_OK: the store's call, before its connection, took
            // effect; had SQLite started first, this answers SQLITE_MISUSE
            // (21) and SQLite counts the bytes its connections hold.
            guard rally_sqlite_disable_memory_statistics() == 0, rally_sqlite_memory_used() == 0 else { exit(1) }
            try await store.close()
        }
    }

    @Test("the envelope, blob, escrow and push stores' writers commit with synchronous=FULL, also when reopened")
    func everyWriterIsFull() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for _ in 0..<2 {
            let envelopes = try SQLiteRelayStore(url: directory.url.appendingPathComponent("relay.sqlite"))
            let request = PublishRequest(topic: "group/a", payload: Data("x".utf8), idempotencyKey: Data("k".utf8))
            _ = try await envelopes.append([request], serverTimeMilliseconds: 1)
            let pools: [(String, DatabasePool)] = [
                ("envelopes", envelopes.pool),
                ("blobs", try FileBlobStore(dataDirectory: directory.url).pool),
                ("escrows", try SQLiteEscrowStore(dataDirectory: directory.url).pool),
                ("push targets", try SQLitePushTargetStore(dataDirectory: directory.url).pool),
            ]
            for (name, pool) in pools {
                // The writer's pragma: 2 (FULL) makes every commit wait for
                // the fsync of the write-ahead log.
                let mode = try await pool.writeWithoutTransaction { db in
                    try Int.fetchOne(db, sql: "PRAGMA synchronous")
                }
                #expect(mode == Self.full, "\(name)")
            }
            try await envelopes.close()
        }
    }
}
