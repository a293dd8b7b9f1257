import Foundation
import GRDB
import RallyCrypto
import Testing

@testable import RallyRelay

/// The SQLite store's envelope log (ADR 0029): rows appended with no index
/// of SQLite's, heads and idempotency keys in memory, one process per
/// store, and stores written before it carried over.
@Suite("SQLite envelope log", .timeLimit(.minutes(1)))
struct EnvelopeLogTests {
    @Test("a second open of a store that is open fails with StoreInUse, naming the file; after a close it opens")
    func oneProcessPerStore() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let first = try SQLiteRelayStore(url: directory.storeURL)
        #expect(throws: StoreInUse(path: directory.storeURL.path)) {
            try SQLiteRelayStore(url: directory.storeURL)
        }
        #expect(
            StoreInUse(path: "/data/relay.sqlite").description
                == "another relay is using /data/relay.sqlite: stop it, or give this relay a data directory of its own (--data)"
        )
        _ = try await first.appendAll([request("group/a", "1")], serverTimeMilliseconds: 1)
        try await first.close()
        let second = try SQLiteRelayStore(url: directory.storeURL)
        #expect(try await second.headSeq(topic: "group/a") == 1)
        try await second.close()
    }

    @Test("a batch whose transaction fails takes no seq and no idempotency key: the next publish gets them")
    func failedBatchLeavesTheIndex() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteRelayStore(url: directory.storeURL)
        _ = try await store.appendAll([request("group/a", "first")], serverTimeMilliseconds: 1)
        // A trigger makes the second row of the batch fail after the first
        // was inserted, as a full disk would.
        try await store.pool.write { db in
            try db.execute(
                sql: """
                    CREATE TRIGGER refuse BEFORE INSERT ON envelope_log WHEN NEW.payload = x'66'
                    BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                    """)
        }
        await #expect(throws: DatabaseError.self) {
            try await store.append(
                [request("group/a", "2", key: "k"), request("group/b", "f")], serverTimeMilliseconds: 2)
        }
        #expect(try await store.headSeq(topic: "group/a") == 1)
        #expect(try await store.headSeq(topic: "group/b") == 0)
        try await store.pool.write { db in try db.execute(sql: "DROP TRIGGER refuse") }

        let retried = try await store.appendAll(
            [request("group/a", "2", key: "k"), request("group/b", "f")], serverTimeMilliseconds: 3)
        #expect(retried.map(\.envelope.seq) == [2, 1])
        #expect(retried.map(\.duplicate) == [false, false])
        let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 3)
        #expect(page.envelopes.map(\.payload) == [Data("first".utf8), Data("2".utf8)])
        try await store.close()
    }

    @Test(
        "a topic's chain of keys outlives a reopen: the founding key retired at the rotation, the new one current, others unknown, a rotation back to a retired key current again"
    )
    func keyChainAcrossReopen() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (first, second, stranger) = (testAccess(41), testAccess(42), testAccess(43))
        let topic = "group/" + first.foundedTopicID
        func publish(_ key: TopicAccess, expected: UInt64, rotate: TopicAccess? = nil) -> PublishRequest {
            PublishRequest(
                topic: topic, payload: Data("x".utf8), accessKey: key.publicKey, control: true,
                expectedControlSeq: expected, rotateAccessKey: rotate?.publicKey)
        }
        do {
            let store = try SQLiteRelayStore(url: directory.storeURL)
            // Founded and rotated in one batch: the second publish sees the
            // key the first registered.
            let seqs = try await store.appendAll(
                [publish(first, expected: 0), publish(first, expected: 1, rotate: second)], serverTimeMilliseconds: 1)
            #expect(seqs.map(\.envelope.seq) == [1, 2])
            try await store.close()
        }
        let store = try SQLiteRelayStore(url: directory.storeURL)
        #expect(try await store.accessKeyStatus(topic: topic, key: first.publicKey) == .retired(validThrough: 2))
        #expect(try await store.accessKeyStatus(topic: topic, key: second.publicKey) == .current)
        #expect(try await store.accessKeyStatus(topic: topic, key: stranger.publicKey) == .unknown)
        #expect(
            try await store.accessKeyStatus(topic: "group/" + stranger.foundedTopicID, key: stranger.publicKey)
                == .unregistered)
        #expect(
            try await store.append([publish(first, expected: 2)], serverTimeMilliseconds: 2) == [
                .failure(.accessRevoked(lastReadableSeq: 2))
            ])
        _ = try await store.appendAll([publish(second, expected: 2, rotate: first)], serverTimeMilliseconds: 3)
        #expect(try await store.accessKeyStatus(topic: topic, key: first.publicKey) == .current)
        #expect(try await store.accessKeyStatus(topic: topic, key: second.publicKey) == .retired(validThrough: 3))
        #expect(
            try await store.deleteTopic(topic, accessKey: first.publicKey, nowMilliseconds: 4) == .deleted(envelopes: 3)
        )
        #expect(try await store.accessKeyStatus(topic: topic, key: first.publicKey) == .deleted)
        try await store.close()
    }

    @Test(
        "a store written before the envelope log opens with its envelopes, heads, keys and idempotency keys, and no envelopes table"
    )
    func carriesOverTheEarlierLayout() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Self.writeEarlierLayout(at: directory.storeURL)

        let store = try SQLiteRelayStore(url: directory.storeURL)
        let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 0)
        #expect(page.envelopes.map(\.seq) == [1, 2])
        #expect(page.envelopes.map(\.payload) == [Data("one".utf8), Data("two".utf8)])
        #expect(page.headSeq == 2)
        // group/b's envelopes were pruned; its head was in `topics`.
        #expect(try await store.headSeq(topic: "group/b") == 5)
        let appended = try await store.appendAll(
            [request("group/a", "one", key: "k"), request("group/a", "three"), request("group/b", "six")],
            serverTimeMilliseconds: 10)
        #expect(appended.map(\.envelope.seq) == [1, 3, 6])
        #expect(appended.map(\.duplicate) == [true, false, false])
        let tables = try await store.pool.read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        #expect(tables.contains("envelope_log") && !tables.contains("envelopes"))
        try await store.close()
    }

    /// The schema and rows of a store written by the v3 layout (envelopes
    /// in a table keyed by topic and seq, heads upserted on every append).
    private static func writeEarlierLayout(at url: URL) throws {
        let queue = try DatabaseQueue(path: url.path)
        try queue.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1'), ('v2-capabilities'), ('v3-topic-tombstones');
                    CREATE TABLE topics (name TEXT PRIMARY KEY, last_seq INTEGER NOT NULL,
                        last_control_seq INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0);
                    CREATE TABLE envelopes (topic TEXT NOT NULL, seq INTEGER NOT NULL, server_time_ms INTEGER NOT NULL,
                        payload BLOB NOT NULL, should_push BOOLEAN NOT NULL, expires_at_ms INTEGER NOT NULL,
                        idempotency_key BLOB, control BOOLEAN NOT NULL DEFAULT 0, retires_key BLOB,
                        PRIMARY KEY (topic, seq));
                    CREATE UNIQUE INDEX envelopes_idempotency ON envelopes (topic, idempotency_key);
                    CREATE INDEX envelopes_expiry ON envelopes (expires_at_ms) WHERE expires_at_ms > 0;
                    CREATE INDEX envelopes_inbox_age ON envelopes (server_time_ms) WHERE topic LIKE 'inbox/%';
                    CREATE TABLE key_bundles (inbox_id TEXT PRIMARY KEY, signing_key BLOB NOT NULL,
                        created_at_ms INTEGER NOT NULL, bundle BLOB NOT NULL, signature BLOB NOT NULL);
                    CREATE TABLE topic_keys (topic TEXT NOT NULL, access_key BLOB NOT NULL, valid_through INTEGER,
                        PRIMARY KEY (topic, access_key));
                    CREATE TABLE deleted_topics (topic TEXT PRIMARY KEY, deleted_at_ms INTEGER NOT NULL);
                    INSERT INTO topics VALUES ('group/a', 2, 0, 6), ('group/b', 5, 0, 0);
                    INSERT INTO envelopes (topic, seq, server_time_ms, payload, should_push, expires_at_ms, idempotency_key)
                    VALUES ('group/a', 2, 1, x'74776f', 0, 0, NULL), ('group/a', 1, 1, x'6f6e65', 0, 0, x'6b');
                    """)
        }
        try queue.close()
    }
}

@Suite("Envelope index")
struct EnvelopeIndexTests {
    private static func entry(_ seq: Int64, expires: Int64 = 0) -> EnvelopeIndex.Entry {
        EnvelopeIndex.Entry(seq: seq, rowID: seq * 10, expiresAtMilliseconds: expires)
    }

    private static func loaded(_ seqs: [Int64], expires: [Int64: Int64] = [:]) -> EnvelopeIndex {
        var index = EnvelopeIndex()
        for seq in seqs {
            index.load(
                topic: "t", entry: entry(seq, expires: expires[seq] ?? 0), payloadBytes: 3, control: seq == 2,
                idempotencyKey: Data([UInt8(seq)]))
        }
        index.finishLoading()
        return index
    }

    @Test(
        "entries after a seq: in seq order, readable ones only, at most the limit, also from rows loaded out of order")
    func entriesAfter() {
        let index = Self.loaded([3, 1, 2, 5, 4], expires: [3: 100])
        #expect(index.entries(of: "t", after: 0, limit: 10, nowMilliseconds: 50).map(\.seq) == [1, 2, 3, 4, 5])
        #expect(index.entries(of: "t", after: 1, limit: 2, nowMilliseconds: 200).map(\.seq) == [2, 4])
        #expect(index.entries(of: "t", after: 5, limit: 2, nowMilliseconds: 0).isEmpty)
        #expect(index.entries(of: "t", after: 0, limit: 0, nowMilliseconds: 0).isEmpty)
        #expect(index.entries(of: "none", after: 0, limit: 5, nowMilliseconds: 0).isEmpty)
        #expect(index.head(of: "t") == AppendRules.Head(lastSeq: 5, lastControlSeq: 2, bytes: 15))
    }

    @Test("a pending batch is seen by the batch and by no one else until it is applied")
    func pendingUntilApplied() {
        var index = Self.loaded([1])
        var pending = EnvelopeIndex.Pending()
        let head = pending.head(of: "t", in: index)
        pending.append(
            Self.entry(2), topic: "t", after: head, payloadBytes: 4, control: false, idempotencyKey: Data("k".utf8))
        #expect(pending.head(of: "t", in: index).lastSeq == 2)
        #expect(pending.original(topic: "t", key: Data("k".utf8), in: index) == 20)
        #expect(index.head(of: "t").lastSeq == 1)
        #expect(index.original(topic: "t", key: Data("k".utf8)) == nil)
        index.apply(pending)
        #expect(index.head(of: "t") == AppendRules.Head(lastSeq: 2, lastControlSeq: 0, bytes: 7))
        #expect(index.original(topic: "t", key: Data("k".utf8)) == 20)
        #expect(index.entries(of: "t", after: 0, limit: 5, nowMilliseconds: 0).map(\.seq) == [1, 2])
    }

    @Test("removing rows keeps the head, gives back their bytes and frees their idempotency keys")
    func removal() {
        var index = Self.loaded([1, 2, 3])
        index.remove([
            EnvelopeIndex.Removal(topic: "t", seq: 1, payloadBytes: 3, idempotencyKey: Data([1])),
            EnvelopeIndex.Removal(topic: "t", seq: 3, payloadBytes: 3, idempotencyKey: Data([3])),
        ])
        #expect(index.entries(of: "t", after: 0, limit: 5, nowMilliseconds: 0).map(\.seq) == [2])
        #expect(index.head(of: "t") == AppendRules.Head(lastSeq: 3, lastControlSeq: 2, bytes: 3))
        #expect(index.original(topic: "t", key: Data([1])) == nil)
        #expect(index.original(topic: "t", key: Data([2])) == 20)
        #expect(index.rowIDs(of: "t") == [20])
        index.removeTopic("t")
        #expect(index.head(of: "t") == AppendRules.Head())
        #expect(index.rowIDs(of: "t").isEmpty)
    }

    @Test("idempotency keys are told apart by every byte and by length, inline up to 16 bytes and beyond")
    func keys() {
        var index = EnvelopeIndex()
        let keys = [
            Data(), Data([1]), Data([1, 0]), Data(repeating: 7, count: 16), Data(repeating: 7, count: 17),
            Data(repeating: 7, count: 15) + Data([8]), Data(repeating: 9, count: 40),
        ]
        for (offset, key) in keys.enumerated() {
            index.load(
                topic: "t", entry: Self.entry(Int64(offset + 1)), payloadBytes: 1, control: false, idempotencyKey: key)
        }
        for (offset, key) in keys.enumerated() {
            #expect(index.original(topic: "t", key: key) == Int64(offset + 1) * 10, "\(Array(key))")
        }
        #expect(index.original(topic: "t", key: Data(repeating: 9, count: 41)) == nil)
        #expect(index.original(topic: "t", key: Data([0])) == nil)
        #expect(index.original(topic: "u", key: Data([1])) == nil)
    }

    @Test("a head kept in the topics table counts even when fewer rows are left")
    func seededHeads() {
        var index = EnvelopeIndex()
        index.seed(topic: "t", lastSeq: 9, lastControlSeq: 4)
        index.load(topic: "t", entry: Self.entry(3), payloadBytes: 2, control: false, idempotencyKey: nil)
        index.seed(topic: "u", lastSeq: 1, lastControlSeq: 0)
        index.load(topic: "u", entry: Self.entry(2), payloadBytes: 2, control: true, idempotencyKey: nil)
        index.finishLoading()
        #expect(index.head(of: "t") == AppendRules.Head(lastSeq: 9, lastControlSeq: 4, bytes: 2))
        #expect(index.head(of: "u") == AppendRules.Head(lastSeq: 2, lastControlSeq: 2, bytes: 2))
    }
}
