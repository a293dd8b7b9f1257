import Foundation
import GRDB
import RallyCrypto
import Testing

@testable import RallyRelay

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The embedded store's envelope segments (ADR 0030): records synced in
/// preallocated files, the index rebuilt from them at open, pruning marks
/// and checkpoints in SQLite, one process per store, and stores written
/// before them carried over.
@Suite("Envelope segments", .timeLimit(.minutes(1)))
struct EnvelopeSegmentTests {
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

    @Test(
        "a lock released while an open waits for it (a spawning child's copy of the descriptor, until its exec) is taken instead of failing with StoreInUse"
    )
    func lockReleasedWhileWaiting() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        // Another open file on the lock: `flock` conflicts between them as
        // between processes.
        let holder = open(directory.storeURL.path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(holder >= 0 && flock(holder, LOCK_EX | LOCK_NB) == 0)
        var contended = 0
        let lock = try StoreLock(beside: directory.storeURL) {
            contended += 1
            if contended == 1 { close(holder) }
        }
        #expect(contended == 1)
        lock.release()
    }

    @Test(
        "a batch whose record cannot be written takes no seq and no idempotency key: the next publish gets them")
    func failedBatchLeavesTheIndex() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try Self.smallSegments(directory)
        _ = try await store.appendAll([request("group/a", "first")], serverTimeMilliseconds: 1)
        // The batch does not fit in the first segment, and the next one's
        // name is taken, as a full or broken disk would refuse it.
        let blocker = directory.url.appendingPathComponent("relay.sqlite-segments/00000001.segment")
        try FileManager.default.createDirectory(at: blocker, withIntermediateDirectories: false)
        let big = String(repeating: "b", count: 3000)
        await #expect(throws: (any Error).self) {
            try await store.append(
                [request("group/a", big, key: "k"), request("group/b", big)], serverTimeMilliseconds: 2)
        }
        #expect(try await store.headSeq(topic: "group/a") == 1)
        #expect(try await store.headSeq(topic: "group/b") == 0)
        try FileManager.default.removeItem(at: blocker)

        let retried = try await store.appendAll(
            [request("group/a", big, key: "k"), request("group/b", big)], serverTimeMilliseconds: 3)
        #expect(retried.map(\.envelope.seq) == [2, 1])
        #expect(retried.map(\.duplicate) == [false, false])
        let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 3)
        #expect(page.envelopes.map(\.payload) == [Data("first".utf8), Data(big.utf8)])
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
        // Pruning checkpoints the chain into SQLite; the rotation after it
        // is in the segments only, and a reopen needs both.
        _ = try await store.deleteExpired(nowMilliseconds: 3)
        _ = try await store.appendAll([publish(first, expected: 3, rotate: stranger)], serverTimeMilliseconds: 4)
        try await store.close()

        let reopened = try SQLiteRelayStore(url: directory.storeURL)
        #expect(try await reopened.accessKeyStatus(topic: topic, key: first.publicKey) == .retired(validThrough: 4))
        #expect(try await reopened.accessKeyStatus(topic: topic, key: second.publicKey) == .retired(validThrough: 3))
        #expect(try await reopened.accessKeyStatus(topic: topic, key: stranger.publicKey) == .current)
        #expect(
            try await reopened.deleteTopic(topic, accessKey: stranger.publicKey, nowMilliseconds: 5)
                == .deleted(envelopes: 4))
        #expect(try await reopened.accessKeyStatus(topic: topic, key: stranger.publicKey) == .deleted)
        try await reopened.close()

        // The tombstone holds across a reopen, and the deleted topic's
        // entries, still in their segment, are never read again.
        let afterDeletion = try SQLiteRelayStore(url: directory.storeURL)
        #expect(try await afterDeletion.accessKeyStatus(topic: topic, key: stranger.publicKey) == .deleted)
        #expect(try await afterDeletion.fetch(topic: topic, after: 0, limit: 10, nowMilliseconds: 5).envelopes.isEmpty)
        #expect(try await afterDeletion.headSeq(topic: topic) == 0)
        #expect(
            try await afterDeletion.append([publish(stranger, expected: 4)], serverTimeMilliseconds: 6) == [
                .failure(.topicDeleted)
            ])
        try await afterDeletion.close()
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
        #expect(!tables.contains("envelope_log") && !tables.contains("envelopes"))
        try await store.close()
    }

    @Test(
        "a move cut short after SQLite dropped the table and before the segments were renamed into place is finished at the next open"
    )
    func finishesAnInterruptedMove() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Self.writeEarlierLayout(at: directory.storeURL)
        try await SQLiteRelayStore(url: directory.storeURL).close()
        let segments = directory.url.appendingPathComponent("relay.sqlite-segments")
        try FileManager.default.moveItem(at: segments, to: segments.appendingPathExtension("moving"))

        let store = try SQLiteRelayStore(url: directory.storeURL)
        let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 0)
        #expect(page.envelopes.map(\.payload) == [Data("one".utf8), Data("two".utf8)])
        #expect(!FileManager.default.fileExists(atPath: segments.appendingPathExtension("moving").path))
        try await store.close()
    }

    @Test(
        "a move cut short before SQLite dropped the table is written again: a staging copy left behind is replaced, nothing doubles"
    )
    func redoesAMoveBeforeItsCommit() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Self.writeEarlierLayout(at: directory.storeURL)
        let staging = directory.url.appendingPathComponent("relay.sqlite-segments.moving")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: false)
        try Data([1, 2, 3]).write(to: staging.appendingPathComponent("00000000.segment"))

        let store = try SQLiteRelayStore(url: directory.storeURL)
        let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 0)
        #expect(page.envelopes.map(\.seq) == [1, 2])
        try await store.close()
    }

    @Test(
        "a torn write after the newest segment's last record is cut at open: every whole record is read, the next append goes there, and a later reopen reads past it"
    )
    func tornTail() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        do {
            let store = try SQLiteRelayStore(url: directory.storeURL)
            _ = try await store.appendAll(
                [request("group/a", "one"), request("group/a", "two")], serverTimeMilliseconds: 1)
            _ = try await store.appendAll([request("group/a", "three", key: "k")], serverTimeMilliseconds: 2)
            try await store.close()
        }
        let segment = directory.url.appendingPathComponent("relay.sqlite-segments/00000000.segment")
        let tail = try Self.endOfRecords(segment)
        // A record's header announcing 4000 bytes, and the first of them.
        var torn = [UInt8]()
        withUnsafeBytes(of: SegmentLimits.magic.littleEndian) { torn.append(contentsOf: $0) }
        withUnsafeBytes(of: UInt32(4000).littleEndian) { torn.append(contentsOf: $0) }
        torn += [9, 9, 9, 9] + [UInt8](repeating: 0xAB, count: 700)
        try Self.write(torn, to: segment, at: tail)

        do {
            let store = try SQLiteRelayStore(url: directory.storeURL)
            let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 2)
            #expect(page.envelopes.map(\.payload) == ["one", "two", "three"].map { Data($0.utf8) })
            let next = try await store.appendAll(
                [request("group/a", "four"), request("group/a", "three", key: "k")], serverTimeMilliseconds: 3)
            #expect(next.map(\.envelope.seq) == [4, 3])
            #expect(next.map(\.duplicate) == [false, true])
            try await store.close()
        }
        #expect(try Self.endOfRecords(segment) > tail)
        let store = try SQLiteRelayStore(url: directory.storeURL)
        #expect(try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 3).envelopes.count == 4)
        try await store.close()
    }

    @Test(
        "a damaged record in a segment that is not the newest stops the open with SegmentDamaged naming the file and offset"
    )
    func damageBeforeTheEnd() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        do {
            let store = try Self.smallSegments(directory)
            for round in 0..<3 {
                _ = try await store.appendAll(
                    [request("group/a", String(repeating: "x", count: 3000))], serverTimeMilliseconds: Int64(round))
            }
            try await store.close()
        }
        let first = directory.url.appendingPathComponent("relay.sqlite-segments/00000000.segment")
        try Self.write([0xFF], to: first, at: 100)
        #expect {
            try Self.smallSegments(directory)
        } throws: { error in
            guard let damaged = error as? SegmentDamaged else { return false }
            return damaged.path == first.path && damaged.offset == 0
                && damaged.description.hasPrefix("the relay's envelope segment \(first.path) is damaged at byte 0")
        }
    }

    @Test(
        "pruned entries stay pruned across a reopen, their bytes and keys freed; a segment left with no live entry is deleted with its marks, and the heads it held survive"
    )
    func pruningAcrossReopen() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let access = testAccess(51)
        let topic = "group/" + access.foundedTopicID
        let big = String(repeating: "p", count: 3000)
        do {
            let store = try Self.smallSegments(directory)
            // The founding entry expires with the rest: the key it
            // registered must outlive its segment.
            try await Self.foundExpiring(topic, with: access, payload: big, on: store)
            for seq in 2...4 {
                _ = try await store.appendAll(
                    [request("group/b", big, key: "k\(seq)", expiresAt: seq == 4 ? 0 : 10)],
                    serverTimeMilliseconds: Int64(seq))
            }
            #expect(try Self.segmentNames(directory).count == 4)
            #expect(try await store.deleteExpired(nowMilliseconds: 20) == 3)
            // Segments 0-2 held only what expired; 3, being written, stays.
            #expect(try Self.segmentNames(directory) == ["00000003.segment"])
            try await store.close()
        }
        let store = try Self.smallSegments(directory)
        #expect(try await store.headSeq(topic: topic) == 1)
        #expect(try await store.accessKeyStatus(topic: topic, key: access.publicKey) == .current)
        let page = try await store.fetch(topic: "group/b", after: 0, limit: 10, nowMilliseconds: 20)
        #expect(page.envelopes.map(\.seq) == [3])
        #expect(page.headSeq == 3)
        let retried = try await store.appendAll([request("group/b", "again", key: "k2")], serverTimeMilliseconds: 21)
        #expect(retried.map(\.envelope.seq) == [4])
        #expect(retried.map(\.duplicate) == [false])
        let marks = try await store.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM envelope_removals")
        }
        #expect(marks == 0)
        try await store.close()
    }

    @Test(
        "a pruning whose SQLite transaction fails gives its checkpoint back: the next one writes it, and the founding key outlives its segment's deletion and a reopen"
    )
    func failedPruningKeepsTheCheckpoint() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let access = testAccess(52)
        let topic = "group/" + access.foundedTopicID
        let big = String(repeating: "q", count: 3000)
        do {
            let store = try Self.smallSegments(directory)
            try await Self.foundExpiring(topic, with: access, payload: big, on: store)
            _ = try await store.appendAll([request("group/b", big)], serverTimeMilliseconds: 2)
            // Another connection holds SQLite's write lock: the pruning's
            // transaction fails at once.
            var holding = Configuration()
            holding.allowsUnsafeTransactions = true
            let other = try DatabaseQueue(path: directory.storeURL.path, configuration: holding)
            try await other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
            await #expect(throws: DatabaseError.self) { try await store.deleteExpired(nowMilliseconds: 20) }
            try await other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }
            try other.close()
            #expect(try Self.segmentNames(directory) == ["00000000.segment", "00000001.segment"])

            #expect(try await store.deleteExpired(nowMilliseconds: 20) == 1)
            #expect(try Self.segmentNames(directory) == ["00000001.segment"])
            try await store.close()
        }
        let store = try Self.smallSegments(directory)
        #expect(try await store.accessKeyStatus(topic: topic, key: access.publicKey) == .current)
        #expect(try await store.headSeq(topic: topic) == 1)
        try await store.close()
    }

    @Test(
        "a segment whose live entries fill less than a quarter of it is compacted: they are copied with their payloads, retired keys and idempotency keys, it is deleted, and a reopen reads the copies and the key chain"
    )
    func compaction() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (first, second) = (testAccess(61), testAccess(62))
        let topic = "group/" + first.foundedTopicID
        let big = String(repeating: "i", count: 3000)
        do {
            let store = try Self.eightKiBSegments(directory)
            // Segment 0: a founding, a rotation and a keyed entry that stay,
            // and two inbox entries that expire.
            _ = try await store.appendAll(
                [
                    PublishRequest(
                        topic: topic, payload: Data("founded".utf8), accessKey: first.publicKey, control: true),
                    PublishRequest(
                        topic: topic, payload: Data("rotated".utf8), accessKey: first.publicKey, control: true,
                        expectedControlSeq: 1, rotateAccessKey: second.publicKey),
                    request("group/keep", "kept", key: "k"),
                    request("inbox/a", big, expiresAt: 10), request("inbox/a", big, expiresAt: 10),
                ],
                serverTimeMilliseconds: 1)
            _ = try await store.appendAll([request("group/other", big)], serverTimeMilliseconds: 2)
            #expect(try Self.segmentNames(directory) == ["00000000.segment", "00000001.segment"])
            #expect(try await store.deleteExpired(nowMilliseconds: 20) == 2)
            #expect(try Self.segmentNames(directory) == ["00000001.segment"])
            try await Self.expectCompacted(store, topic: topic, retired: first.publicKey)
            try await store.close()
        }
        let store = try Self.eightKiBSegments(directory)
        try await Self.expectCompacted(store, topic: topic, retired: first.publicKey)
        #expect(try await store.accessKeyStatus(topic: topic, key: first.publicKey) == .retired(validThrough: 2))
        #expect(try await store.accessKeyStatus(topic: topic, key: second.publicKey) == .current)
        try await store.close()
    }

    @Test(
        "after a crash between a compaction's copies and the deletion of their segment, each entry is read once (the copy) and a pruned copy keeps its original out"
    )
    func compactionCutShort() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let big = String(repeating: "j", count: 3000)
        let oldSegment = directory.url.appendingPathComponent("relay.sqlite-segments/00000000.segment")
        let saved: Data
        do {
            let store = try Self.eightKiBSegments(directory)
            _ = try await store.appendAll(
                [
                    request("group/keep", "kept", key: "k"), request("group/later", "goes at 30", expiresAt: 30),
                    request("inbox/a", big, expiresAt: 10), request("inbox/a", big, expiresAt: 10),
                ],
                serverTimeMilliseconds: 1)
            _ = try await store.appendAll([request("group/other", big)], serverTimeMilliseconds: 2)
            saved = try Data(contentsOf: oldSegment)
            #expect(try await store.deleteExpired(nowMilliseconds: 20) == 2)
            // The copy of "goes at 30" is pruned where it was copied to.
            #expect(try await store.deleteExpired(nowMilliseconds: 40) == 1)
            try await store.close()
        }
        // As if the crash came before the old segment was deleted.
        try saved.write(to: oldSegment)
        let store = try Self.eightKiBSegments(directory)
        let kept = try await store.fetch(topic: "group/keep", after: 0, limit: 10, nowMilliseconds: 25)
        #expect(kept.envelopes.map(\.payload) == [Data("kept".utf8)])
        // Read at 25, before its expiry: only the copy's mark keeps it out.
        #expect(try await store.fetch(topic: "group/later", after: 0, limit: 10, nowMilliseconds: 25).envelopes.isEmpty)
        let retried = try await store.appendAll([request("group/keep", "kept", key: "k")], serverTimeMilliseconds: 50)
        #expect(retried.map(\.duplicate) == [true])
        // Nothing in the old segment is live: the next pruning deletes it.
        _ = try await store.deleteExpired(nowMilliseconds: 50)
        #expect(try !Self.segmentNames(directory).contains("00000000.segment"))
        try await store.close()
    }

    /// What `compaction` expects of its store, before and after a reopen.
    private static func expectCompacted(_ store: SQLiteRelayStore, topic: String, retired: Data) async throws {
        let page = try await store.fetch(topic: topic, after: 0, limit: 10, nowMilliseconds: 20)
        #expect(page.envelopes.map(\.payload) == [Data("founded".utf8), Data("rotated".utf8)])
        #expect(page.retiredKeys == [2: retired])
        let kept = try await store.fetch(topic: "group/keep", after: 0, limit: 10, nowMilliseconds: 20)
        #expect(kept.envelopes.map(\.payload) == [Data("kept".utf8)])
        let retried = try await store.appendAll([request("group/keep", "again", key: "k")], serverTimeMilliseconds: 21)
        #expect(retried.map(\.envelope.seq) == [1])
        #expect(retried.map(\.duplicate) == [true])
        #expect(try await store.fetch(topic: "inbox/a", after: 0, limit: 10, nowMilliseconds: 0).envelopes.isEmpty)
    }

    /// Segments of 8 KiB: a few small entries and two 3,000-byte ones fill
    /// one, and what stays of the small ones is under a quarter of it.
    private static func eightKiBSegments(_ directory: TemporaryDirectory) throws -> SQLiteRelayStore {
        try SQLiteRelayStore(url: directory.storeURL, firstSegmentBytes: 8192, maxSegmentBytes: 8192)
    }

    @Test(
        "a segment file taken before its segment is deleted still reads its entries: what a fetch racing a compaction relies on"
    )
    func readAfterDeletion() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = SegmentFiles(directory: directory.url, firstSegmentBytes: 4096, maxSegmentBytes: 4096)
        var writer = SegmentWriter(files: files, tail: SegmentFiles.Tail(segment: nil, offset: 0))
        let entry = LoggedEntry(
            topic: "group/a", seq: 1, serverTime: 1, expiresAt: 0, payload: Data("kept".utf8), shouldPush: false,
            control: false)
        let placed = try writer.append(SegmentRecord.encode([entry]))
        let taken = try #require(files.file(placed.segment))
        try files.delete([placed.segment])
        #expect(files.file(placed.segment) == nil)
        #expect(!FileManager.default.fileExists(atPath: taken.path))
        let location = SegmentLocation(
            segment: placed.segment, offset: UInt32(placed.offset + SegmentRecord.firstEntryOffset),
            size: UInt32(SegmentRecord.encodedSize(of: entry)))
        #expect(try taken.read(at: location).withUnsafeBytes { try SegmentRecord.decodeEntry($0) } == entry)
    }

    @Test("a pruned entry in a segment that stays is marked, and is not read again after a reopen")
    func prunedEntryInALiveSegment() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        do {
            let store = try SQLiteRelayStore(url: directory.storeURL)
            _ = try await store.appendAll(
                [request("group/a", "gone", key: "g", expiresAt: 10), request("group/a", "kept")],
                serverTimeMilliseconds: 1)
            #expect(try await store.deleteExpired(nowMilliseconds: 20) == 1)
            try await store.close()
        }
        let store = try SQLiteRelayStore(url: directory.storeURL)
        // Read at a time before its expiry: only its mark keeps it out.
        let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 5)
        #expect(page.envelopes.map(\.payload) == [Data("kept".utf8)])
        let again = try await store.appendAll([request("group/a", "new", key: "g")], serverTimeMilliseconds: 30)
        #expect(again.map(\.envelope.seq) == [3])
        try await store.close()
    }

    /// A store whose segments are 4 KiB: each holds one 3,000-byte envelope.
    private static func smallSegments(_ directory: TemporaryDirectory) throws -> SQLiteRelayStore {
        try SQLiteRelayStore(url: directory.storeURL, firstSegmentBytes: 4096, maxSegmentBytes: 4096)
    }

    /// Founds `topic` with an envelope that expires at 10 ms.
    private static func foundExpiring(
        _ topic: String, with access: TopicAccess, payload: String, on store: SQLiteRelayStore
    ) async throws {
        _ = try await store.appendAll(
            [
                PublishRequest(
                    topic: topic, payload: Data(payload.utf8), expiresAtMilliseconds: 10, accessKey: access.publicKey)
            ],
            serverTimeMilliseconds: 1)
    }

    /// The segments, without the spare written ahead of them (ADR 0031).
    private static func segmentNames(_ directory: TemporaryDirectory) throws -> [String] {
        try FileManager.default.contentsOfDirectory(
            atPath: directory.url.appendingPathComponent("relay.sqlite-segments").path
        ).filter { $0.hasSuffix(".segment") }.sorted()
    }

    /// Where the records of a segment end: decoded one after another.
    private static func endOfRecords(_ segment: URL) throws -> Int {
        let bytes = try [UInt8](Data(contentsOf: segment))
        var offset = 0
        while let size = bytes.withUnsafeBytes({ buffer in
            try? SegmentRecord.decode(UnsafeRawBufferPointer(rebasing: buffer[offset...])).size
        }) {
            offset += size
        }
        return offset
    }

    private static func write(_ bytes: [UInt8], to file: URL, at offset: Int) throws {
        let handle = try FileHandle(forWritingTo: file)
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: Data(bytes))
        try handle.close()
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
    private static func logged(
        _ seq: Int64, topic: String = "t", expires: Int64 = 0, key: Data? = nil, control: Bool = false
    ) -> LoggedEntry {
        LoggedEntry(
            topic: topic, seq: seq, serverTime: seq * 100, expiresAt: expires, payload: Data("abc".utf8),
            shouldPush: false, control: control, idempotencyKey: key)
    }

    private static func location(_ seq: Int64, segment: UInt32 = 0) -> SegmentLocation {
        SegmentLocation(segment: segment, offset: UInt32(seq * 10), size: 40)
    }

    private static func loaded(_ seqs: [Int64], expires: [Int64: Int64] = [:]) -> EnvelopeIndex {
        var index = EnvelopeIndex()
        for seq in seqs {
            index.replay(
                logged(seq, expires: expires[seq] ?? 0, key: Data([UInt8(seq)]), control: seq == 2),
                at: location(seq), checkpointedSeq: 0, pruned: false)
        }
        index.finishLoading()
        return index
    }

    @Test(
        "entries after a seq: in seq order, readable ones only, at most the limit, also from entries replayed out of order"
    )
    func entriesAfter() {
        let index = Self.loaded([3, 1, 2, 5, 4], expires: [3: 100])
        #expect(index.entries(of: "t", after: 0, limit: 10, nowMilliseconds: 50).map(\.seq) == [1, 2, 3, 4, 5])
        #expect(index.entries(of: "t", after: 1, limit: 2, nowMilliseconds: 200).map(\.seq) == [2, 4])
        #expect(index.entries(of: "t", after: 5, limit: 2, nowMilliseconds: 0).isEmpty)
        #expect(index.entries(of: "t", after: 0, limit: 0, nowMilliseconds: 0).isEmpty)
        #expect(index.entries(of: "none", after: 0, limit: 5, nowMilliseconds: 0).isEmpty)
        #expect(index.head(of: "t") == AppendRules.Head(lastSeq: 5, lastControlSeq: 2, bytes: 15))
        #expect(index.live.mapValues(\.entries) == [0: 5])
    }

    @Test(
        "a pending batch is seen by the batch and by no one else until it is applied, then placed where its record went"
    )
    func pendingUntilApplied() {
        var index = Self.loaded([1])
        var pending = EnvelopeIndex.Pending()
        let head = pending.look(topic: "t", idempotencyKey: nil, accessKey: nil, in: index).head
        let second = Self.logged(2, key: Data("k".utf8))
        pending.append(second, after: head, in: index)
        let look = pending.look(topic: "t", idempotencyKey: Data("k".utf8), accessKey: nil, in: index)
        #expect(look.head.lastSeq == 2)
        guard case .inBatch(let original) = look.original else {
            Issue.record("the batch does not see its own key")
            return
        }
        #expect(original == second)
        #expect(index.head(of: "t").lastSeq == 1)
        #expect(index.original(topic: "t", key: Data("k".utf8)) == nil)
        index.apply(pending, segment: 7, recordOffset: 1000)
        #expect(index.head(of: "t") == AppendRules.Head(lastSeq: 2, lastControlSeq: 0, bytes: 6))
        let placed = SegmentLocation(
            segment: 7, offset: UInt32(1000 + SegmentRecord.firstEntryOffset),
            size: UInt32(SegmentRecord.encodedSize(of: second)))
        #expect(index.original(topic: "t", key: Data("k".utf8))?.location == placed)
        #expect(index.entries(of: "t", after: 0, limit: 5, nowMilliseconds: 0).map(\.seq) == [1, 2])
        #expect(index.live.mapValues(\.entries) == [0: 1, 7: 1])
        // What a segment's live entries take decides its compaction.
        #expect(index.live.mapValues(\.bytes) == [0: 40, 7: Int(placed.size)])
    }

    @Test(
        "pruning keeps the head, gives back bytes, frees idempotency keys and empties segments; a removed topic leaves a tombstone"
    )
    func removal() {
        var index = Self.loaded([1, 2, 3], expires: [1: 10, 3: 10])
        let expired = index.expired(among: index.topicNames, nowMilliseconds: 20, inboxCutoffMilliseconds: 0)
        #expect(expired.map(\.entry.seq).sorted() == [1, 3])
        index.remove(expired)
        #expect(index.entries(of: "t", after: 0, limit: 5, nowMilliseconds: 0).map(\.seq) == [2])
        #expect(index.head(of: "t") == AppendRules.Head(lastSeq: 3, lastControlSeq: 2, bytes: 3))
        #expect(index.original(topic: "t", key: Data([1])) == nil)
        #expect(index.original(topic: "t", key: Data([2]))?.seq == 2)
        #expect(index.deadSegments(among: [0]).isEmpty)
        index.removeTopic("t")
        #expect(index.head(of: "t") == AppendRules.Head())
        #expect(index.entryCount(of: "t") == 0)
        #expect(index.isDeleted("t"))
        #expect(index.deadSegments(among: [0, 1]) == [0, 1])
    }

    @Test("a compaction's move reaches an entry only where it was, and the segments' live counts follow it")
    func moves() {
        var index = Self.loaded([1, 2])
        let copy = SegmentLocation(segment: 3, offset: 16, size: 44)
        index.move("t", seq: 2, from: Self.location(2), to: copy)
        #expect(index.original(topic: "t", key: Data([2]))?.location == copy)
        #expect(index.live == [0: .init(entries: 1, bytes: 40), 3: .init(entries: 1, bytes: 44)])
        // From where it no longer is, and an entry that is gone: nothing.
        index.move("t", seq: 2, from: Self.location(2), to: SegmentLocation(segment: 4, offset: 0, size: 44))
        index.move("t", seq: 9, from: Self.location(9), to: SegmentLocation(segment: 4, offset: 0, size: 44))
        #expect(index.original(topic: "t", key: Data([2]))?.location == copy)
        #expect(index.live == [0: .init(entries: 1, bytes: 40), 3: .init(entries: 1, bytes: 44)])
    }

    @Test("inbox entries stored before the cutoff are pruned; other topics' are not")
    func inboxCutoff() {
        var index = EnvelopeIndex()
        for seq: Int64 in 1...3 {
            index.replay(Self.logged(seq, topic: "inbox/a"), at: Self.location(seq), checkpointedSeq: 0, pruned: false)
            index.replay(Self.logged(seq, topic: "group/a"), at: Self.location(seq), checkpointedSeq: 0, pruned: false)
        }
        let expired = index.expired(among: index.topicNames, nowMilliseconds: 0, inboxCutoffMilliseconds: 250)
        #expect(expired.map(\.topic) == ["inbox/a", "inbox/a"])
        #expect(expired.map(\.entry.seq).sorted() == [1, 2])
    }

    @Test("idempotency keys are told apart by every byte and by length, inline up to 16 bytes and beyond")
    func keys() {
        var index = EnvelopeIndex()
        let keys = [
            Data(), Data([1]), Data([1, 0]), Data(repeating: 7, count: 16), Data(repeating: 7, count: 17),
            Data(repeating: 7, count: 15) + Data([8]), Data(repeating: 9, count: 40),
        ]
        for (offset, key) in keys.enumerated() {
            let seq = Int64(offset + 1)
            index.replay(Self.logged(seq, key: key), at: Self.location(seq), checkpointedSeq: 0, pruned: false)
        }
        for (offset, key) in keys.enumerated() {
            #expect(index.original(topic: "t", key: key)?.seq == Int64(offset + 1), "\(Array(key))")
        }
        #expect(index.original(topic: "t", key: Data(repeating: 9, count: 41)) == nil)
        #expect(index.original(topic: "t", key: Data([0])) == nil)
        #expect(index.original(topic: "u", key: Data([1])) == nil)
    }

    @Test(
        "replay: a checkpointed head counts even with fewer entries left; key changes apply only past the checkpoint; a pruned entry moves the head only; a checkpoint is taken once, or given back"
    )
    func replayAgainstACheckpoint() {
        var index = EnvelopeIndex()
        index.seed(topic: "t", lastSeq: 9, lastControlSeq: 4)
        index.loadKey(topic: "t", key: Data("current".utf8), validThrough: nil)
        var founding = Self.logged(3)
        founding.registersKey = Data("stale".utf8)
        index.replay(founding, at: Self.location(3), checkpointedSeq: 9, pruned: false)
        var rotation = Self.logged(10, control: true)
        rotation.rotatesTo = Data("next".utf8)
        index.replay(rotation, at: Self.location(10), checkpointedSeq: 9, pruned: false)
        index.replay(Self.logged(11, key: Data([11])), at: Self.location(11), checkpointedSeq: 9, pruned: true)
        index.finishLoading()
        #expect(index.head(of: "t") == AppendRules.Head(lastSeq: 11, lastControlSeq: 10, bytes: 6))
        #expect(index.keyStatus(topic: "t", key: Data("stale".utf8)) == .unknown)
        #expect(index.keyStatus(topic: "t", key: Data("current".utf8)) == .retired(validThrough: 10))
        #expect(index.keyStatus(topic: "t", key: Data("next".utf8)) == .current)
        #expect(index.original(topic: "t", key: Data([11])) == nil)
        let checkpoint = index.takeCheckpoint()
        #expect(checkpoint.map(\.topic) == ["t"])
        #expect(checkpoint.first?.accessKeys?.count == 2)
        // Taken, it is the next one's no more; given back when it could not
        // be written, it is taken again whole.
        #expect(index.takeCheckpoint().isEmpty)
        index.restore(checkpoint)
        #expect(index.takeCheckpoint() == checkpoint)
    }
}
