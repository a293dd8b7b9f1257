public import Foundation
import GRDB
public import RallyCrypto
public import RallyWire
import Synchronization

/// The embedded store. Envelopes are records in preallocated segment
/// files: a batch is one `pwrite` and one `fdatasync`, so a returned
/// `append` has reached the disk (ADR 0030). Their heads, seq order,
/// idempotency keys and key chains are kept in memory (`EnvelopeIndex`)
/// and rebuilt from the segments at open. One SQLite file in WAL mode with
/// `synchronous=FULL` holds the rest: key bundles, tombstones, pruning
/// marks and a checkpoint of heads and key chains, written when the store
/// prunes, so that segments can be deleted. One process at a time opens a
/// store (`StoreLock`).
public final class SQLiteRelayStore: RelayStore, SynchronousAppending {
    /// Internal for the durability test, which reads its writer's pragma.
    let pool: DatabasePool
    private let index: Mutex<EnvelopeIndex>
    let segments: SegmentFiles
    /// The one writer of segments: appends, topic deletion and a pruning's
    /// compaction records take it in turn.
    private let writer: Mutex<SegmentWriter>
    private let lock: StoreLock
    /// Where the async calls run: a commit waits for `fdatasync`, which must
    /// not hold one of Swift's few cooperative threads.
    private let queue = DispatchQueue(label: "rally.relay.store")

    /// Throws `StoreInUse` when another process has the store open, and
    /// `SegmentDamaged` when a segment is damaged before its end.
    public convenience init(url: URL) throws {
        try self.init(
            url: url, firstSegmentBytes: SegmentFiles.defaultFirstSegmentBytes,
            maxSegmentBytes: SegmentFiles.defaultMaxSegmentBytes)
    }

    /// Tests give small segments, to see them fill and be deleted.
    init(url: URL, firstSegmentBytes: Int, maxSegmentBytes: Int) throws {
        pool = try OwnerOnlyFile.openPool(url, label: "rally.relay.store")
        // Before anything is read or migrated; opening the pool changes
        // nothing another process could see.
        lock = try StoreLock(beside: url)
        try Self.ownerOnlyDirectory(of: url)
        try Self.migrator.migrate(pool)
        let directory = URL(fileURLWithPath: url.path + "-segments")
        try EnvelopeLogMove.moveIfNeeded(
            pool, into: directory, firstSegmentBytes: firstSegmentBytes, maxSegmentBytes: maxSegmentBytes)
        segments = SegmentFiles(
            directory: directory, firstSegmentBytes: firstSegmentBytes, maxSegmentBytes: maxSegmentBytes,
            keepsSpare: true)
        var (loaded, checkpoint) = try pool.read { db in try Self.loadCheckpoint(db) }
        let tail = try segments.scanAll { logged, location in
            guard !loaded.isDeleted(logged.topic) else { return }
            loaded.replay(
                logged, at: location, checkpointedSeq: checkpoint.heads[logged.topic] ?? 0,
                pruned: checkpoint.pruned.contains(location.marked))
        }
        loaded.finishLoading()
        index = Mutex(loaded)
        writer = Mutex(SegmentWriter(files: segments, tail: tail))
        let present = Set(segments.ids)
        if checkpoint.pruned.contains(where: { !present.contains($0.segment) }) {
            // Marks of a segment whose deletion was cut short.
            try pool.write { db in
                try db.execute(sql: "DELETE FROM envelope_removals WHERE segment NOT IN \(Self.sqlList(present))")
            }
        }
    }

    /// An existing data directory that holds nothing but this store's
    /// files is made owner-only too; a directory with other files keeps its
    /// mode (the operator may share it on purpose).
    private static func ownerOnlyDirectory(of url: URL) throws {
        let directory = url.deletingLastPathComponent()
        let contents = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        if contents.allSatisfy({ $0.hasPrefix(url.lastPathComponent) }) {
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory.path)
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "topics") { table in
                table.primaryKey("name", .text)
                table.column("last_seq", .integer).notNull()
            }
            try db.create(table: "envelopes") { table in
                table.column("topic", .text).notNull()
                table.column("seq", .integer).notNull()
                table.column("server_time_ms", .integer).notNull()
                table.column("payload", .blob).notNull()
                table.column("should_push", .boolean).notNull()
                table.column("expires_at_ms", .integer).notNull()
                // NULL when the client sent no key: NULLs never collide in a
                // unique index.
                table.column("idempotency_key", .blob)
                table.primaryKey(["topic", "seq"])
            }
            try db.create(
                index: "envelopes_idempotency", on: "envelopes", columns: ["topic", "idempotency_key"],
                unique: true)
            try db.create(
                index: "envelopes_expiry", on: "envelopes", columns: ["expires_at_ms"],
                condition: Column("expires_at_ms") > 0)
            try db.create(table: "key_bundles") { table in
                table.primaryKey("inbox_id", .text)
                table.column("signing_key", .blob).notNull()
                table.column("created_at_ms", .integer).notNull()
                table.column("bundle", .blob).notNull()
                table.column("signature", .blob).notNull()
            }
        }
        migrator.registerMigration("v2-capabilities") { db in
            // Control entries, key rotations and per-topic byte accounting
            // (docs/adr/0008).
            try db.alter(table: "topics") { table in
                table.add(column: "last_control_seq", .integer).notNull().defaults(to: 0)
                table.add(column: "bytes", .integer).notNull().defaults(to: 0)
            }
            try db.alter(table: "envelopes") { table in
                table.add(column: "control", .boolean).notNull().defaults(to: false)
                // The access key this entry retired (a rotation).
                table.add(column: "retires_key", .blob)
            }
            try db.execute(
                sql:
                    "UPDATE topics SET bytes = (SELECT COALESCE(SUM(length(payload)), 0) FROM envelopes WHERE topic = name)"
            )
            try db.create(table: "topic_keys") { table in
                table.column("topic", .text).notNull()
                table.column("access_key", .blob).notNull()
                // NULL for the current key; for a retired one the last seq
                // it may read.
                table.column("valid_through", .integer)
                table.primaryKey(["topic", "access_key"])
            }
            try db.create(
                index: "envelopes_inbox_age", on: "envelopes", columns: ["server_time_ms"],
                condition: Column("topic").like("inbox/%"))
        }
        migrator.registerMigration("v3-topic-tombstones") { db in
            // A deleted topic leaves only its name and when (docs/adr/0017),
            // so it can never be founded or written again.
            try db.create(table: "deleted_topics") { table in
                table.primaryKey("topic", .text)
                table.column("deleted_at_ms", .integer).notNull()
            }
        }
        migrator.registerMigration("v4-envelope-log") { db in
            // One table the appends only add rows to: no primary key but the
            // row id and no index that every append would update at a random
            // page (ADR 0029). Heads kept in `topics` stay there: they are
            // read at open and outlive the rows they counted.
            try db.create(table: "envelope_log") { table in
                table.primaryKey("id", .integer)
                table.column("topic", .text).notNull()
                table.column("seq", .integer).notNull()
                table.column("server_time_ms", .integer).notNull()
                table.column("payload", .blob).notNull()
                table.column("should_push", .boolean).notNull()
                table.column("expires_at_ms", .integer).notNull()
                table.column("idempotency_key", .blob)
                table.column("control", .boolean).notNull().defaults(to: false)
                table.column("retires_key", .blob)
            }
            // The columns as of this migration, spelled out: a later column
            // must not change what it copies.
            let columns =
                "topic, seq, server_time_ms, payload, should_push, expires_at_ms, idempotency_key, control, retires_key"
            try db.execute(
                sql: "INSERT INTO envelope_log (\(columns)) SELECT \(columns) FROM envelopes ORDER BY topic, seq")
            try db.drop(table: "envelopes")
            // Both keys grow with time, so an append adds to their last page.
            try db.create(
                index: "envelope_log_expiry", on: "envelope_log", columns: ["expires_at_ms"],
                condition: Column("expires_at_ms") > 0)
            try db.create(
                index: "envelope_log_inbox_age", on: "envelope_log", columns: ["server_time_ms"],
                condition: Column("topic").like("inbox/%"))
        }
        migrator.registerMigration("v5-envelope-segments") { db in
            // Envelopes move to segment files (ADR 0030; `EnvelopeLogMove`
            // moves the rows of `envelope_log` and drops it). A pruned entry
            // stays in its segment until the whole segment is dead: its
            // mark keeps it from being replayed.
            try db.execute(
                sql: """
                    CREATE TABLE envelope_removals (
                        segment INTEGER NOT NULL, "offset" INTEGER NOT NULL, PRIMARY KEY (segment, "offset")
                    ) WITHOUT ROWID
                    """)
        }
        return migrator
    }

    /// What SQLite holds of the envelopes: the checkpointed heads (the seq
    /// each topic's `topic_keys` rows are current through) and the marks
    /// of pruned entries.
    private struct Checkpoint {
        var heads: [String: Int64] = [:]
        var pruned: Set<SegmentLocation.Mark> = []
    }

    private static func loadCheckpoint(_ db: Database) throws -> (EnvelopeIndex, Checkpoint) {
        var index = EnvelopeIndex()
        var checkpoint = Checkpoint()
        let heads = try Row.fetchCursor(db, sql: "SELECT name, last_seq, last_control_seq FROM topics")
        while let row = try heads.next() {
            index.seed(topic: row["name"], lastSeq: row["last_seq"], lastControlSeq: row["last_control_seq"])
            checkpoint.heads[row["name"]] = row["last_seq"]
        }
        let keys = try Row.fetchCursor(db, sql: "SELECT topic, access_key, valid_through FROM topic_keys")
        while let row = try keys.next() {
            index.loadKey(topic: row["topic"], key: row["access_key"], validThrough: row["valid_through"])
        }
        let tombstones = try String.fetchCursor(db, sql: "SELECT topic FROM deleted_topics")
        while let topic = try tombstones.next() { index.loadTombstone(topic) }
        let marks = try Row.fetchCursor(db, sql: #"SELECT segment, "offset" FROM envelope_removals"#)
        while let row = try marks.next() {
            checkpoint.pruned.insert(SegmentLocation.Mark(segment: row["segment"], offset: row["offset"]))
        }
        return (index, checkpoint)
    }

    public func append(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) async throws -> [Result<AppendResult, AppendRefusal>] {
        try await onQueue { try self.appendNow(batch, serverTimeMilliseconds: serverTimeMilliseconds) }
    }

    /// The same append on the caller's thread: a socket's event loop
    /// commits with it and waits for the sync there, as Redis's one thread
    /// does (ADR 0028).
    ///
    /// The batch is one record. The index learns of its entries only after
    /// the record is synced, so no reader sees them before they are on disk;
    /// a batch whose record fails takes no seq and no key.
    func appendNow(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) throws -> [Result<AppendResult, AppendRefusal>] {
        guard !batch.isEmpty else { return [] }
        return try writer.withLock { writer in
            var pending = EnvelopeIndex.Pending(reservingCapacity: batch.count)
            let results = try batch.map { try append($0, serverTime: serverTimeMilliseconds, pending: &pending) }
            guard !pending.isEmpty else { return results }
            let placed = try writer.append(SegmentRecord.encode(pending.logged))
            index.withLock { $0.apply(pending, segment: placed.segment, recordOffset: placed.offset) }
            return results
        }
    }

    private func append(
        _ request: PublishRequest, serverTime: Int64, pending: inout EnvelopeIndex.Pending
    ) throws -> Result<AppendResult, AppendRefusal> {
        let key: Data? = request.idempotencyKey.isEmpty ? nil : request.idempotencyKey
        // A stored original's segment file is taken with the index, as a
        // fetch takes it.
        let (look, originalFile) = index.withLock { index in
            let look = pending.look(
                topic: request.topic, idempotencyKey: key, accessKey: request.accessKey, in: index)
            return (look, look.original?.location.flatMap { segments.file($0.segment) })
        }
        let head = look.head
        let keyStatus = look.keyStatus
        // A retry is answered before any other check, with what its
        // original stored.
        switch look.original {
        case .inBatch(let logged)?: return AppendRules.retry(of: logged.envelope, keyStatus: keyStatus)
        case .stored(let location)?:
            return AppendRules.retry(of: try read(location, in: originalFile).envelope, keyStatus: keyStatus)
        case nil: break
        }
        let founds: Bool
        switch AppendRules.check(request, head: head, keyStatus: keyStatus) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let founding): founds = founding
        }
        let retired = AppendRules.retiredKey(by: request)
        let logged = LoggedEntry(
            topic: request.topic, seq: head.lastSeq + 1, serverTime: serverTime,
            expiresAt: request.expiresAtMilliseconds, payload: request.payload, shouldPush: request.shouldPush,
            control: request.control, idempotencyKey: key, retiresKey: retired,
            registersKey: founds ? request.accessKey : nil, rotatesTo: retired == nil ? nil : request.rotateAccessKey)
        index.withLock { pending.append(logged, after: head, in: $0) }
        return .success(AppendResult(envelope: logged.envelope, duplicate: false, retiredKey: retired))
    }

    /// The entry at `location`, in the segment file taken with it from the
    /// index. Every entry the index names is in a segment it holds: pruned
    /// and moved entries leave the index before their segment is deleted.
    private func read(_ location: SegmentLocation, in file: SegmentFile?) throws -> LoggedEntry {
        guard let file else {
            throw SegmentDamaged(
                path: segments.directory.appendingPathComponent(SegmentFiles.name(of: location.segment)).path,
                offset: Int(location.offset), reason: "the index names a segment that is gone")
        }
        return try file.read(at: location).withUnsafeBytes { try SegmentRecord.decodeEntry($0) }
    }

    public func accessKeyStatus(topic: String, key: Data) async throws -> AccessKeyStatus {
        index.withLock { $0.keyStatus(topic: topic, key: key) }
    }

    public func deleteTopic(_ topic: String, accessKey: Data, nowMilliseconds: Int64) async throws -> TopicDeletion {
        try await onQueue {
            try self.writer.withLock { _ in
                let (status, count) = self.index.withLock {
                    ($0.keyStatus(topic: topic, key: accessKey), $0.entryCount(of: topic))
                }
                switch status {
                case .deleted: return .alreadyDeleted
                case .current: break
                case let other: return .refused(other)
                }
                // Its entries stay in their segments, dead: no replay reads
                // a tombstoned topic's.
                try self.pool.write { db in
                    try db.execute(sql: "DELETE FROM topic_keys WHERE topic = ?", arguments: [topic])
                    try db.execute(sql: "DELETE FROM topics WHERE name = ?", arguments: [topic])
                    try db.execute(
                        sql: "INSERT INTO deleted_topics (topic, deleted_at_ms) VALUES (?, ?)",
                        arguments: [topic, nowMilliseconds])
                }
                self.index.withLock { $0.removeTopic(topic) }
                return .deleted(envelopes: count)
            }
        }
    }

    public func fetch(
        topic: String, after: UInt64, limit: Int, maxBytes: Int, nowMilliseconds: Int64
    ) async throws -> FetchResult {
        // Each entry's segment file is taken with the index: a compaction
        // may move an entry and delete its segment before it is read, and
        // the file taken here is then read unlinked.
        let (entries, head) = index.withLock { index in
            (
                index.entries(
                    of: topic, after: Int64(clamping: after), limit: max(0, limit), nowMilliseconds: nowMilliseconds
                ).map { (entry: $0, file: segments.file($0.location.segment)) },
                index.head(of: topic).lastSeq
            )
        }
        var envelopes: [WireEnvelope] = []
        var retiredKeys: [UInt64: Data] = [:]
        var bytes = 0
        for (entry, file) in entries {
            let logged = try read(entry.location, in: file)
            // Byte-bounded pages: always at least one envelope.
            if maxBytes > 0, !envelopes.isEmpty, bytes + logged.payload.count > maxBytes { break }
            bytes += logged.payload.count
            if let retired = logged.retiresKey { retiredKeys[UInt64(logged.seq)] = retired }
            envelopes.append(logged.envelope)
        }
        return FetchResult(envelopes: envelopes, headSeq: UInt64(max(0, head)), retiredKeys: retiredKeys)
    }

    public func headSeq(topic: String) async throws -> UInt64 {
        UInt64(max(0, index.withLock { $0.head(of: topic).lastSeq }))
    }

    public func putKeyBundle(
        _ bundle: WireSignedKeyBundle, inboxID: InboxID, signingPublicKey: Data, createdAtMilliseconds: Int64
    ) async throws -> KeyBundlePutResult {
        try await pool.write { db in
            if let row = try Row.fetchOne(
                db, sql: "SELECT signing_key, created_at_ms, bundle, signature FROM key_bundles WHERE inbox_id = ?",
                arguments: [inboxID.rawValue])
            {
                let storedKey: Data = row["signing_key"]
                guard storedKey == signingPublicKey else { throw RelayStoreError.signingKeyMismatch }
                let storedCreatedAt: Int64 = row["created_at_ms"]
                if createdAtMilliseconds < storedCreatedAt {
                    var current = WireSignedKeyBundle()
                    current.bundle = row["bundle"]
                    current.signature = row["signature"]
                    return .stale(current: current)
                }
            }
            try db.execute(
                sql: """
                    INSERT INTO key_bundles (inbox_id, signing_key, created_at_ms, bundle, signature)
                    VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (inbox_id) DO UPDATE SET
                    created_at_ms = excluded.created_at_ms, bundle = excluded.bundle, signature = excluded.signature
                    """,
                arguments: [inboxID.rawValue, signingPublicKey, createdAtMilliseconds, bundle.bundle, bundle.signature])
            return .stored
        }
    }

    public func keyBundle(inboxID: InboxID) async throws -> WireSignedKeyBundle? {
        try await pool.read { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT bundle, signature FROM key_bundles WHERE inbox_id = ?",
                    arguments: [inboxID.rawValue])
            else { return nil }
            var bundle = WireSignedKeyBundle()
            bundle.bundle = row["bundle"]
            bundle.signature = row["signature"]
            return bundle
        }
    }

    /// Prunes in memory and marks what it pruned in SQLite, then writes the
    /// checkpoint of every head and key chain that changed since the last;
    /// then compacts segments that are mostly dead
    /// and deletes the segments left with no live entry (never the one
    /// being written).
    ///
    /// Appends go on meanwhile: only reading the newest segment with the
    /// checkpoint, writing a compaction's records and choosing the segments
    /// to delete take the writer's lock. Pruning, topic deletion and the
    /// async calls run one at a time on the store's queue.
    public func deleteExpired(nowMilliseconds: Int64, inboxCutoffMilliseconds: Int64) async throws -> Int {
        try await onQueue {
            let removals = self.scanIndex {
                $0.expired(
                    among: $1, nowMilliseconds: nowMilliseconds, inboxCutoffMilliseconds: inboxCutoffMilliseconds)
            }
            // Every entry of a segment older than the newest one now is in
            // this checkpoint: a compaction may copy it without its key
            // changes.
            let (checkpoint, newest) = self.writer.withLock { writer in
                self.index.withLock { ($0.takeCheckpoint(), writer.activeSegment) }
            }
            do {
                // Marks in transactions of their own, a few thousand at a
                // time, so that the SQLite writer (key bundles, topic
                // deletion) never waits for a pruning of millions: a mark
                // written for an entry the index still holds is of one that
                // has expired anyway.
                for start in stride(from: 0, to: removals.count, by: Self.marksPerTransaction) {
                    let chunk = removals[start..<min(removals.count, start + Self.marksPerTransaction)]
                    try self.pool.write { db in
                        let mark = try db.cachedStatement(
                            sql: #"INSERT OR IGNORE INTO envelope_removals (segment, "offset") VALUES (?, ?)"#)
                        for removal in chunk {
                            try mark.execute(arguments: [removal.entry.location.segment, removal.entry.location.offset])
                        }
                    }
                }
                try self.pool.write { db in try Self.write(checkpoint, db: db) }
            } catch {
                self.index.withLock { $0.restore(checkpoint) }
                throw error
            }
            self.index.withLock { $0.remove(removals) }
            if let newest { try self.compact(olderThan: newest) }
            try self.deleteDeadSegments()
            return removals.count
        }
    }

    /// A segment whose live entries fill less than a quarter of it is
    /// compacted: they are copied to the newest segment, and it is deleted.
    /// An envelope that never expires no longer keeps the rest of its
    /// segment on disk.
    static let compactBelowLiveFraction = 4
    /// Pruning marks per SQLite transaction: each a few tens of
    /// milliseconds, where 900,000 in one held SQLite's writer for seconds.
    static let marksPerTransaction = 4096
    /// What one pruning copies at most, so that it holds the writer's lock
    /// for short turns (one record of about `compactionRecordBytes` each).
    static let maxCompactionBytes = 32 << 20
    static let compactionRecordBytes = 1 << 20

    private func compact(olderThan newest: UInt32) throws {
        let chosen: Set<UInt32> = index.withLock { index in
            var budget = Self.maxCompactionBytes
            var chosen: Set<UInt32> = []
            for id in segments.ids where id < newest {
                guard let file = segments.file(id), let use = index.live[id], use.entries > 0,
                    use.bytes * Self.compactBelowLiveFraction < file.capacity, use.bytes <= budget
                else { continue }
                chosen.insert(id)
                budget -= use.bytes
            }
            return chosen
        }
        guard !chosen.isEmpty else { return }
        let moving = scanIndex { $0.entries(in: chosen, of: $1) }.sorted { $0.entry.location < $1.entry.location }
        var batch: [(topic: String, entry: EnvelopeIndex.Entry, logged: LoggedEntry)] = []
        var bytes = 0
        for (topic, entry) in moving {
            var logged = try read(entry.location, in: segments.file(entry.location.segment))
            // The checkpoint holds them (see deleteExpired).
            logged.registersKey = nil
            logged.rotatesTo = nil
            batch.append((topic, entry, logged))
            bytes += SegmentRecord.encodedSize(of: logged)
            if bytes >= Self.compactionRecordBytes {
                try writeCopies(batch)
                batch = []
                bytes = 0
            }
        }
        if !batch.isEmpty { try writeCopies(batch) }
    }

    /// One record of copied entries; the index reads them there once it is
    /// synced.
    private func writeCopies(_ batch: [(topic: String, entry: EnvelopeIndex.Entry, logged: LoggedEntry)]) throws {
        let record = try SegmentRecord.encode(batch.map(\.logged))
        try writer.withLock { writer in
            let placed = try writer.append(record)
            var offset = placed.offset + SegmentRecord.firstEntryOffset
            index.withLock { index in
                for copy in batch {
                    let size = SegmentRecord.encodedSize(of: copy.logged)
                    index.move(
                        copy.topic, seq: copy.entry.seq, from: copy.entry.location,
                        to: SegmentLocation(segment: placed.segment, offset: UInt32(offset), size: UInt32(size)))
                    offset += size
                }
            }
        }
    }

    /// Topics the index's scans take per turn at its lock.
    static let topicsPerScan = 256

    /// A scan of the whole index in turns of `topicsPerScan` topics, so
    /// that an append never waits for more than one turn. Only pruning
    /// scans, and it runs on the store's queue, one at a time.
    private func scanIndex<Found>(_ body: (EnvelopeIndex, ArraySlice<String>) -> [Found]) -> [Found] {
        let names = index.withLock { $0.topicNames }
        var found: [Found] = []
        for start in stride(from: 0, to: names.count, by: Self.topicsPerScan) {
            let slice = names[start..<min(names.count, start + Self.topicsPerScan)]
            found += index.withLock { body($0, slice) }
        }
        return found
    }

    /// Deletes every segment but the newest that holds nothing live; the
    /// directory is synced before their marks go.
    private func deleteDeadSegments() throws {
        // A segment that is not the newest takes no more entries, so once
        // it holds none live it stays that way.
        let dead = writer.withLock { writer in
            let candidates = segments.ids.filter { $0 != writer.activeSegment }
            return index.withLock { $0.deadSegments(among: candidates) }
        }
        guard !dead.isEmpty else { return }
        try segments.delete(dead)
        try pool.write { db in
            try db.execute(
                sql: "DELETE FROM envelope_removals WHERE segment IN \(Self.sqlList(dead))")
        }
        index.withLock { $0.forgetSegments(dead) }
    }

    /// Segment ids as an SQL list: numbers, nothing a caller chose.
    private static func sqlList(_ ids: some Sequence<UInt32>) -> String {
        "(" + ids.map(String.init).joined(separator: ",") + ")"
    }

    /// Heads, and whole key chains where they changed.
    private static func write(_ checkpoint: [EnvelopeIndex.Checkpoint], db: Database) throws {
        let head = try db.cachedStatement(
            sql: """
                INSERT INTO topics (name, last_seq, last_control_seq) VALUES (?, ?, ?)
                ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq,
                last_control_seq = excluded.last_control_seq
                """)
        let clearKeys = try db.cachedStatement(sql: "DELETE FROM topic_keys WHERE topic = ?")
        let key = try db.cachedStatement(
            sql: "INSERT INTO topic_keys (topic, access_key, valid_through) VALUES (?, ?, ?)")
        for topic in checkpoint {
            try head.execute(arguments: [topic.topic, topic.head.lastSeq, topic.head.lastControlSeq])
            guard let accessKeys = topic.accessKeys else { continue }
            try clearKeys.execute(arguments: [topic.topic])
            for (accessKey, status) in accessKeys {
                let validThrough: Int64? =
                    switch status {
                    case .retired(let through): Int64(clamping: through)
                    default: nil
                    }
                try key.execute(arguments: [topic.topic, accessKey, validThrough])
            }
        }
    }

    public func close() async throws {
        try pool.close()
        lock.release()
    }

    private func onQueue<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }
}

extension SegmentLocation {
    /// What a pruning mark names.
    struct Mark: Hashable, Sendable {
        var segment: UInt32
        var offset: UInt32
    }

    var marked: Mark { Mark(segment: segment, offset: offset) }
}
