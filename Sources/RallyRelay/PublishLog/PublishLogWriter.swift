import Foundation
import GRDB
import RallyWire

/// The decisions of the publish log: which publishes of a batch are stored
/// at which seq, which are retries and which are refused, made from what
/// memory knows of their topics, then written as one record and synced.
/// The checks are `AppendRules`, as in SQLite's own append.
///
/// `@unchecked Sendable`: `PublishLogStore` runs every call on its serial
/// writer queue, so no two threads ever touch this state at once.
final class PublishLogWriter: @unchecked Sendable {
    /// What the checks of a publish need to know of its topic.
    struct TopicState {
        var head: AppendRules.Head
        /// Held keys: nil for the current one, else the last seq it reads.
        var keys: [Data: Int64?]
        var deleted: Bool
        /// The last log record that changed it.
        var lastRecord: UInt64 = 0

        func status(of key: Data) -> AccessKeyStatus {
            if let held = keys[key] { return .held(validThrough: held) }
            if deleted { return .deleted }
            return keys.isEmpty ? .unregistered : .unknown
        }

        mutating func apply(_ entry: AppendedEntry) {
            head = entry.headAfter
            if let founding = entry.registersKey { keys.updateValue(nil, forKey: founding) }
            if let newKey = entry.rotatesTo {
                for (key, validThrough) in keys where validThrough == nil { keys.updateValue(entry.seq, forKey: key) }
                keys.updateValue(nil, forKey: newKey)
            }
        }
    }

    struct RetryKey: Hashable {
        let topic: String
        let key: Data
    }

    /// Topics cached past this many are dropped once SQLite has them.
    static let maxCachedTopics = 50_000

    private let inner: SQLiteRelayStore
    private let files: PublishLogFiles
    private let indexer: PublishLogIndexer
    private var nextNumber: UInt64
    private var isOpen = true
    private var failed = false
    private var topics: [String: TopicState] = [:]
    /// Envelopes SQLite may not hold yet, by idempotency key, and which
    /// record brought them (oldest first) so they are dropped once it has.
    private var pending: [RetryKey: WireEnvelope] = [:]
    private var pendingByRecord: [(number: UInt64, keys: [RetryKey])] = []
    private var pendingByRecordStart = 0

    init(inner: SQLiteRelayStore, files: PublishLogFiles, indexer: PublishLogIndexer, nextNumber: UInt64) {
        self.inner = inner
        self.files = files
        self.indexer = indexer
        self.nextNumber = nextNumber
    }

    func append(_ batch: [PublishRequest], serverTime: Int64) throws -> [Result<AppendResult, AppendRefusal>] {
        guard isOpen else { throw RelayFailure(.shuttingDown, "the relay is shutting down") }
        guard !failed else { throw PublishLogError.failed }
        let stored = try readMissing(for: batch)
        // Decided on copies: nothing changes in memory unless the record
        // reaches the disk.
        var touched: [String: TopicState] = [:]
        var fresh: [RetryKey: WireEnvelope] = [:]
        var entries: [AppendedEntry] = []
        var results: [Result<AppendResult, AppendRefusal>] = []
        results.reserveCapacity(batch.count)
        for request in batch {
            guard var state = touched[request.topic] ?? topics[request.topic] else {
                preconditionFailure("readMissing loads every topic of the batch")
            }
            let keyStatus = request.accessKey.map(state.status(of:))
            let retryKey =
                request.idempotencyKey.isEmpty ? nil : RetryKey(topic: request.topic, key: request.idempotencyKey)
            if let retryKey, let original = fresh[retryKey] ?? pending[retryKey] ?? stored[retryKey] {
                results.append(AppendRules.retry(of: original, keyStatus: keyStatus))
                continue
            }
            switch AppendRules.check(request, head: state.head, keyStatus: keyStatus) {
            case .failure(let refusal):
                results.append(.failure(refusal))
            case .success(let founds):
                let entry = AppendedEntry(request, after: state.head, founds: founds, serverTime: serverTime)
                state.apply(entry)
                touched[request.topic] = state
                if let retryKey { fresh[retryKey] = entry.envelope }
                entries.append(entry)
                results.append(.success(entry.result))
            }
        }
        guard !entries.isEmpty else { return results }
        let record = PublishLogRecord(number: nextNumber, entries: entries)
        do {
            try files.write(record.encoded(), number: record.number, waitUntilSynced: indexer.waitSynced(through:))
        } catch {
            // What reached the disk is unknown; a restart recovers from it.
            failed = true
            throw error
        }
        nextNumber += 1
        for (topic, var state) in touched {
            state.lastRecord = record.number
            topics[topic] = state
        }
        pending.merge(fresh) { _, new in new }
        if !fresh.isEmpty { pendingByRecord.append((record.number, Array(fresh.keys))) }
        indexer.enqueue(record)
        return results
    }

    /// Loads the topics of `batch` that memory does not hold, and looks up
    /// in SQLite the idempotency keys memory does not know, in one read.
    /// SQLite's snapshot then holds every record `pending` no longer does.
    private func readMissing(for batch: [PublishRequest]) throws -> [RetryKey: WireEnvelope] {
        forgetIndexed()
        var missingTopics: Set<String> = []
        var lookups: [RetryKey] = []
        for request in batch {
            if topics[request.topic] == nil { missingTopics.insert(request.topic) }
            if !request.idempotencyKey.isEmpty {
                let retryKey = RetryKey(topic: request.topic, key: request.idempotencyKey)
                if pending[retryKey] == nil { lookups.append(retryKey) }
            }
        }
        guard !missingTopics.isEmpty || !lookups.isEmpty else { return [:] }
        let (loaded, stored) = try inner.pool.read { db in
            var loaded: [String: TopicState] = [:]
            for topic in missingTopics {
                let read = try SQLiteRelayStore.topicState(topic, db: db)
                loaded[topic] = TopicState(head: read.head, keys: read.keys, deleted: read.deleted)
            }
            var stored: [RetryKey: WireEnvelope] = [:]
            for retryKey in lookups {
                stored[retryKey] = try SQLiteRelayStore.storedEnvelope(
                    topic: retryKey.topic, idempotencyKey: retryKey.key, db: db)
            }
            return (loaded, stored)
        }
        topics.merge(loaded) { current, _ in current }
        return stored
    }

    /// Drops what SQLite now holds from `pending`, and cached topics past
    /// the bound.
    private func forgetIndexed() {
        let indexed = indexer.lastIndexed
        while pendingByRecordStart < pendingByRecord.count, pendingByRecord[pendingByRecordStart].number <= indexed {
            for key in pendingByRecord[pendingByRecordStart].keys { pending[key] = nil }
            pendingByRecordStart += 1
        }
        if pendingByRecordStart > 1024, pendingByRecordStart * 2 > pendingByRecord.count {
            pendingByRecord.removeFirst(pendingByRecordStart)
            pendingByRecordStart = 0
        }
        if topics.count > Self.maxCachedTopics {
            topics = topics.filter { $0.value.lastRecord > indexed }
        }
    }

    /// Runs `body` in a SQLite transaction once SQLite holds every record,
    /// then lets `forgetting` drop what it changed from memory.
    func afterIndexing<T>(
        _ body: (Database) throws -> T, forgetting: (PublishLogWriter) -> Void
    ) throws -> T {
        guard isOpen else { throw RelayFailure(.shuttingDown, "the relay is shutting down") }
        guard !failed else { throw PublishLogError.failed }
        try indexer.waitIndexed(through: nextNumber - 1)
        forgetIndexed()
        let result = try inner.pool.write(body)
        forgetting(self)
        return result
    }

    func forget(topic: String) {
        topics[topic] = nil
    }

    func forgetAll() {
        topics.removeAll()
    }

    /// Lets SQLite take every record, then closes the files.
    func close() {
        guard isOpen else { return }
        isOpen = false
        indexer.close()
        files.release()
    }

    func abandon() {
        guard isOpen else { return }
        isOpen = false
        indexer.abandon()
        files.release()
    }
}
