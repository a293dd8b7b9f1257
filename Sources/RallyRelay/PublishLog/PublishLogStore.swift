public import Foundation
import GRDB
public import RallyCrypto
public import RallyWire

/// The relay's embedded store (ADR 0028): a publish is acknowledged once its
/// batch's record is in the publish log and synced, and SQLite
/// (`SQLiteRelayStore`'s tables) takes the record behind the acknowledgement
/// path. The checks of a publish read the topic's head, keys and earlier
/// idempotency keys from memory, and from SQLite only what the log no
/// longer holds. Reads wait until SQLite has everything acknowledged before
/// them, so they never miss an acknowledged envelope.
///
/// One process at a time: the log's lock refuses a second one with
/// `PublishLogError.inUse`.
public final class PublishLogStore: RelayStore {
    /// Bytes of each of the two log files; a batch larger than that grows
    /// the file it goes to.
    public static let defaultFileBytes = 4 << 20

    let inner: SQLiteRelayStore
    private let indexer: PublishLogIndexer
    private let writerQueue = DispatchQueue(label: "rally.relay.publish-log")
    /// Only touched on `writerQueue`.
    private let writer: PublishLogWriter

    public init(url: URL, fileBytes: Int = PublishLogStore.defaultFileBytes) throws {
        let inner = try SQLiteRelayStore(url: url)
        let files: PublishLogFiles
        do {
            files = try PublishLogFiles(storePath: url.path, capacity: fileBytes)
        } catch {
            try? inner.pool.close()
            throw error
        }
        do {
            let applied = try inner.pool.read { try SQLiteRelayStore.appliedLogRecord(db: $0) }
            let replayed = try files.recover(after: applied)
            if let last = replayed.last {
                try inner.pool.write { db in
                    for entry in replayed.flatMap(\.entries) { _ = try SQLiteRelayStore.write(entry, db: db) }
                    try SQLiteRelayStore.setAppliedLogRecord(last.number, db: db)
                }
            }
            let indexed = replayed.last?.number ?? applied
            indexer = PublishLogIndexer(pool: inner.pool, indexed: indexed)
            writer = PublishLogWriter(inner: inner, files: files, indexer: indexer, nextNumber: indexed + 1)
        } catch {
            files.release()
            try? inner.pool.close()
            throw error
        }
        self.inner = inner
    }

    public func append(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) async throws -> [Result<AppendResult, AppendRefusal>] {
        guard !batch.isEmpty else { return [] }
        return try await onWriter { writer in try writer.append(batch, serverTime: serverTimeMilliseconds) }
    }

    public func fetch(
        topic: String, after: UInt64, limit: Int, maxBytes: Int, nowMilliseconds: Int64
    ) async throws -> FetchResult {
        try await indexer.waitForDurable()
        return try await inner.fetch(
            topic: topic, after: after, limit: limit, maxBytes: maxBytes, nowMilliseconds: nowMilliseconds)
    }

    public func accessKeyStatus(topic: String, key: Data) async throws -> AccessKeyStatus {
        try await indexer.waitForDurable()
        return try await inner.accessKeyStatus(topic: topic, key: key)
    }

    public func headSeq(topic: String) async throws -> UInt64 {
        try await indexer.waitForDurable()
        return try await inner.headSeq(topic: topic)
    }

    public func deleteTopic(_ topic: String, accessKey: Data, nowMilliseconds: Int64) async throws -> TopicDeletion {
        try await onWriter { writer in
            try writer.afterIndexing { db in
                try SQLiteRelayStore.deleteTopic(topic, accessKey: accessKey, nowMilliseconds: nowMilliseconds, db: db)
            } forgetting: {
                $0.forget(topic: topic)
            }
        }
    }

    public func deleteExpired(nowMilliseconds: Int64, inboxCutoffMilliseconds: Int64) async throws -> Int {
        try await onWriter { writer in
            // Heads keep their seqs but give bytes back: every cached head
            // is read again.
            try writer.afterIndexing { db in
                try SQLiteRelayStore.deleteExpired(
                    nowMilliseconds: nowMilliseconds, inboxCutoffMilliseconds: inboxCutoffMilliseconds, db: db)
            } forgetting: {
                $0.forgetAll()
            }
        }
    }

    // Key bundles are not topics: the log does not hold them.
    public func putKeyBundle(
        _ bundle: WireSignedKeyBundle, inboxID: InboxID, signingPublicKey: Data, createdAtMilliseconds: Int64
    ) async throws -> KeyBundlePutResult {
        try await inner.putKeyBundle(
            bundle, inboxID: inboxID, signingPublicKey: signingPublicKey, createdAtMilliseconds: createdAtMilliseconds)
    }

    public func keyBundle(inboxID: InboxID) async throws -> WireSignedKeyBundle? {
        try await inner.keyBundle(inboxID: inboxID)
    }

    /// Waits for the publishes in flight, lets SQLite take every record,
    /// then closes the log (releasing its lock) and SQLite.
    public func close() async throws {
        try await onWriter { writer in writer.close() }
        try await inner.close()
    }

    /// Stands for a crash in tests: SQLite gets no more records, the log
    /// keeps them.
    func pauseIndexingForTesting() {
        indexer.pause()
    }

    /// Stands for a crash in tests: the process lets go of its files with
    /// the records SQLite has not taken still only in the log.
    func abandonForTesting() async throws {
        try await onWriter { writer in writer.abandon() }
        try await inner.close()
    }

    private func onWriter<T: Sendable>(_ body: @escaping @Sendable (PublishLogWriter) throws -> T) async throws -> T {
        let writer = writer
        return try await withCheckedThrowingContinuation { continuation in
            writerQueue.async { continuation.resume(with: Result { try body(writer) }) }
        }
    }
}
