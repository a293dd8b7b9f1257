import Foundation
import GRDB
import RallyCrypto
import RallyTestSupport
import Testing

@testable import RallyRelay

/// The embedded store's publish log (ADR 0028): what it acknowledged
/// survives SQLite never getting it, a write cut short is cut off, damage
/// is refused, one process holds the files, and the files take turns.
@Suite("Publish log", .timeLimit(.minutes(1)))
struct PublishLogStoreTests {
    static let founder = testAccess(41)
    static let successor = testAccess(42)
    static let group = "group/" + founder.foundedTopicID

    static func capability(
        _ payload: String, key: TopicAccess = founder, idempotency: String, control: Bool = false,
        expected: UInt64 = 0, rotate: TopicAccess? = nil
    ) -> PublishRequest {
        PublishRequest(
            topic: group, payload: Data(payload.utf8), idempotencyKey: Data(idempotency.utf8),
            accessKey: key.publicKey, control: control, expectedControlSeq: expected,
            rotateAccessKey: rotate?.publicKey)
    }

    /// Three batches SQLite never gets: a founding with a rotation, inbox
    /// messages on two topics, and one with an expiry.
    static let batches: [[PublishRequest]] = [
        [
            capability("found", idempotency: "c1", control: true, expected: 0),
            capability("rotate", idempotency: "c2", control: true, expected: 1, rotate: successor),
        ],
        [request("inbox/a", "one", key: "a1"), request("inbox/b", "two", key: "b1"), request("inbox/a", "three")],
        [request("inbox/a", "four", key: "a2", expiresAt: 9_000_000_000_000)],
    ]

    static func logPath(_ directory: TemporaryDirectory, _ index: Int) -> String {
        directory.storeURL.path + "-log.\(index)"
    }

    /// Appends `batches` with indexing paused, then lets go of the files as
    /// a crash would: the records are only in the log.
    static func crashAfterAppending(
        _ batches: [[PublishRequest]], in directory: TemporaryDirectory, fileBytes: Int = 64 << 10
    ) async throws {
        let store = try PublishLogStore(url: directory.storeURL, fileBytes: fileBytes)
        store.pauseIndexingForTesting()
        for (index, batch) in batches.enumerated() {
            _ = try await store.appendAll(batch, serverTimeMilliseconds: Int64(100 + index))
        }
        try await store.abandonForTesting()
    }

    /// Replaces the SQLite files (database and WAL) of `target` with those
    /// of `source`, leaving the log alone.
    static func copySQLite(from source: TemporaryDirectory, to target: TemporaryDirectory) throws {
        for suffix in ["", "-wal", "-shm"] {
            let from = source.storeURL.path + suffix
            let to = target.storeURL.path + suffix
            try? FileManager.default.removeItem(atPath: to)
            if FileManager.default.fileExists(atPath: from) {
                try FileManager.default.copyItem(atPath: from, toPath: to)
            }
        }
    }

    static func envelopeCount(in directory: TemporaryDirectory) throws -> Int {
        let queue = try DatabaseQueue(path: directory.storeURL.path)
        defer { try? queue.close() }
        return try queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM envelopes") ?? 0 }
    }

    @Test("what the log acknowledged and SQLite never got is replayed on reopening, keys and retries included")
    func replay() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try await Self.crashAfterAppending(Self.batches, in: directory)
        #expect(try Self.envelopeCount(in: directory) == 0, "the crash left every envelope only in the log")

        let store = try PublishLogStore(url: directory.storeURL)
        let group = try await store.fetch(topic: Self.group, after: 0, limit: 10, nowMilliseconds: 0)
        #expect(group.envelopes.map(\.payload) == [Data("found".utf8), Data("rotate".utf8)])
        #expect(group.retiredKeys == [2: Self.founder.publicKey])
        #expect(
            try await store.accessKeyStatus(topic: Self.group, key: Self.founder.publicKey) == .retired(validThrough: 2)
        )
        #expect(try await store.accessKeyStatus(topic: Self.group, key: Self.successor.publicKey) == .current)
        let inbox = try await store.fetch(topic: "inbox/a", after: 0, limit: 10, nowMilliseconds: 0)
        #expect(inbox.envelopes.map(\.seq) == [1, 2, 3])
        #expect(inbox.envelopes.map(\.serverTimeMs) == [101, 101, 102])
        #expect(inbox.envelopes.last?.expiresAtMs == 9_000_000_000_000)
        #expect(try await store.headSeq(topic: "inbox/b") == 1)

        // Retries of replayed publishes are answered with their originals,
        // and new publishes take the next seqs.
        let after = try await store.appendAll(
            [request("inbox/a", "one again", key: "a1"), request("inbox/a", "five", key: "a3")],
            serverTimeMilliseconds: 200)
        #expect(after.map(\.duplicate) == [true, false])
        #expect(after.map(\.envelope.seq) == [1, 4])
        let control = try await store.append(
            [Self.capability("next", key: Self.successor, idempotency: "c3", control: true, expected: 2)],
            serverTimeMilliseconds: 200)
        #expect(try control[0].get().envelope.seq == 3)
        try await store.close()
    }

    @Test("a record cut short at the end of the log is dropped, and its seqs are handed out again")
    func tornTail() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try await Self.crashAfterAppending(Self.batches, in: directory)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: Self.logPath(directory, 0)))
        let records = PublishLogFiles.run(in: Array(bytes))
        #expect(records.map(\.number) == [1, 2, 3])
        // The last record loses its final byte, as a write the crash cut.
        let lastEnd = try records.reduce(0) { $0 + (try $1.encoded().count) }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: Self.logPath(directory, 0)))
        try handle.seek(toOffset: UInt64(lastEnd - 1))
        try handle.write(contentsOf: [0xFF ^ bytes[lastEnd - 1]])
        try handle.close()

        let store = try PublishLogStore(url: directory.storeURL)
        let inbox = try await store.fetch(topic: "inbox/a", after: 0, limit: 10, nowMilliseconds: 0)
        #expect(inbox.envelopes.map(\.payload) == [Data("one".utf8), Data("three".utf8)])
        let next = try await store.appendAll([request("inbox/a", "replaces four")], serverTimeMilliseconds: 300)
        #expect(next.map(\.envelope.seq) == [3])
        try await store.close()
    }

    @Test("SQLite put back to an older copy, as if its later commits never reached the disk, gets them from the log")
    func olderSQLite() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let copy = try TemporaryDirectory()
        defer { copy.remove() }
        let first = try PublishLogStore(url: directory.storeURL)
        _ = try await first.appendAll([request("inbox/a", "one", key: "1")], serverTimeMilliseconds: 1)
        try await first.close()
        try Self.copySQLite(from: directory, to: copy)

        let second = try PublishLogStore(url: directory.storeURL)
        _ = try await second.appendAll([request("inbox/a", "two", key: "2")], serverTimeMilliseconds: 2)
        _ = try await second.appendAll([request("inbox/b", "three", key: "3")], serverTimeMilliseconds: 3)
        try await second.close()
        try Self.copySQLite(from: copy, to: directory)
        #expect(try Self.envelopeCount(in: directory) == 1)

        let third = try PublishLogStore(url: directory.storeURL)
        let a = try await third.fetch(topic: "inbox/a", after: 0, limit: 10, nowMilliseconds: 0)
        #expect(a.envelopes.map(\.payload) == [Data("one".utf8), Data("two".utf8)])
        #expect(try await third.headSeq(topic: "inbox/b") == 1)
        try await third.close()
    }

    @Test("records in both files are replayed in order; a missing one refuses to start instead of losing what follows")
    func bothFilesAndDamage() async throws {
        // 4 KiB files and 1.5 KiB records: two records per file, so the
        // third goes to the second file.
        let payload = String(repeating: "x", count: 1500)
        let batches = (1...4).map { [request("inbox/a", payload + "\($0)", key: "k\($0)")] }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try await Self.crashAfterAppending(batches, in: directory, fileBytes: 4096)
        let spare = try TemporaryDirectory()
        defer { spare.remove() }
        for file in try FileManager.default.contentsOfDirectory(atPath: directory.url.path) {
            try FileManager.default.copyItem(
                at: directory.url.appendingPathComponent(file), to: spare.url.appendingPathComponent(file))
        }
        #expect(
            PublishLogFiles.run(in: Array(try Data(contentsOf: URL(fileURLWithPath: Self.logPath(directory, 1)))))
                .map(\.number) == [3, 4])

        let store = try PublishLogStore(url: directory.storeURL, fileBytes: 4096)
        let page = try await store.fetch(topic: "inbox/a", after: 0, limit: 10, nowMilliseconds: 0)
        #expect(page.envelopes.map(\.seq) == [1, 2, 3, 4])
        #expect(page.envelopes.last?.payload == Data((payload + "4").utf8))
        try await store.close()

        // The same files with the first one zeroed: records 1 and 2 are
        // gone while 3 and 4 remain.
        let damagedLog = spare.url.appendingPathComponent("relay.sqlite-log.0")
        try Data(count: 4096).write(to: damagedLog)
        #expect(throws: PublishLogError.damaged(path: damagedLog.path, expected: 1, found: 3)) {
            try PublishLogStore(url: spare.storeURL, fileBytes: 4096)
        }
        #expect(
            PublishLogError.damaged(path: "p", expected: 1, found: 3).description
                == "the publish log at p is damaged: record 1 is missing (the next one found is 3)")
    }

    @Test("a second store on the same data directory is refused until the first closes")
    func oneProcess() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let first = try PublishLogStore(url: directory.storeURL)
        let path = Self.logPath(directory, 0)
        #expect(throws: PublishLogError.inUse(path: path)) { try PublishLogStore(url: directory.storeURL) }
        #expect(
            PublishLogError.inUse(path: path).description
                == "another relay process is using \(path); stop it, or give this relay its own --data directory")
        try await first.close()
        let second = try PublishLogStore(url: directory.storeURL)
        try await second.close()
    }

    @Test("the files take turns under many records, stay their preallocated size, and lose nothing")
    func filesTakeTurns() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try PublishLogStore(url: directory.storeURL, fileBytes: 4096)
        for attempt in 1...60 {
            let batch = [
                request("inbox/a", String(repeating: "a", count: 700), key: "a\(attempt)"),
                request("inbox/b", String(repeating: "b", count: 300), key: "b\(attempt)"),
            ]
            let stored = try await store.appendAll(batch, serverTimeMilliseconds: Int64(attempt))
            #expect(stored.map(\.envelope.seq) == [UInt64(attempt), UInt64(attempt)])
        }
        try await store.close()
        for index in 0..<2 {
            let size = try FileManager.default.attributesOfItem(atPath: Self.logPath(directory, index))[.size] as? Int
            #expect(size == 4096)
        }
        let reopened = try PublishLogStore(url: directory.storeURL, fileBytes: 4096)
        let a = try await reopened.fetch(topic: "inbox/a", after: 0, limit: 100, nowMilliseconds: 0)
        #expect(a.envelopes.map(\.seq) == Array(1...60))
        #expect(try await reopened.headSeq(topic: "inbox/b") == 60)
        try await reopened.close()
    }

    @Test("a read waits until SQLite has every publish acknowledged before it")
    func readsWaitForTheIndex() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try PublishLogStore(url: directory.storeURL)
        store.pauseIndexingForTesting()
        _ = try await store.appendAll([request("inbox/a", "acknowledged")], serverTimeMilliseconds: 1)
        let read = Task { try await store.fetch(topic: "inbox/a", after: 0, limit: 10, nowMilliseconds: 0) }
        while store.waitingForTesting.reads == 0 { await Task.yield() }
        #expect(try Self.envelopeCount(in: directory) == 0, "SQLite does not have it yet")
        store.resumeIndexingForTesting()
        #expect(try await read.value.envelopes.map(\.payload) == [Data("acknowledged".utf8)])
        try await store.close()
    }

    @Test("deleting a topic waits for the index and forgets the topic's head and keys")
    func deletionAfterIndexing() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try PublishLogStore(url: directory.storeURL)
        store.pauseIndexingForTesting()
        _ = try await store.appendAll([Self.capability("found", idempotency: "c1")], serverTimeMilliseconds: 1)
        let deletion = Task {
            try await store.deleteTopic(Self.group, accessKey: Self.founder.publicKey, nowMilliseconds: 2)
        }
        while store.waitingForTesting.writer == 0 { await Task.yield() }
        store.resumeIndexingForTesting()
        #expect(try await deletion.value == .deleted(envelopes: 1))
        let refused = try await store.append(
            [Self.capability("again", idempotency: "c1"), Self.capability("again", idempotency: "c2")],
            serverTimeMilliseconds: 3)
        #expect(refused == [.failure(.topicDeleted), .failure(.topicDeleted)])
        try await store.close()
    }
}
