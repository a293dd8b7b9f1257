import Foundation
import GRDB

/// Writes the publish log's records into SQLite behind the
/// acknowledgement path, on a thread of its own, in one transaction for
/// everything that waited (ADR 0028). Each transaction also records the last
/// record it holds, so a restart replays only what comes after it.
///
/// Its transactions commit with `synchronous = NORMAL`: no fsync, and a
/// crash may lose the last of them, which the log still holds. Only when
/// the writer is about to reuse a log file does the indexer commit with
/// `FULL`, which makes every earlier commit durable too.
///
/// It also keeps the log's progress: the last record made durable (the
/// writer's) and the last one indexed. Reads of the store wait until SQLite
/// has every record that was durable when they were called.
///
/// `@unchecked Sendable`: every stored property after `pool` is read and
/// written only while `condition` is locked, and `pool` is itself Sendable.
final class PublishLogIndexer: @unchecked Sendable {
    private let pool: DatabasePool
    private let condition = NSCondition()
    private var queue: [PublishLogRecord] = []
    private var durable: UInt64
    private var indexed: UInt64
    /// The last record SQLite holds durably.
    private var synced: UInt64
    /// The record the writer needs SQLite to hold durably.
    private var syncTarget: UInt64 = 0
    private var failure: (any Error)?
    private var closing = false
    private var paused = false
    private var stopped = false
    private var waiters: [(through: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []

    /// `indexed`: the last record SQLite already holds.
    init(pool: DatabasePool, indexed: UInt64) {
        self.pool = pool
        self.durable = indexed
        self.indexed = indexed
        self.synced = indexed
        let thread = Thread { [self] in run() }
        thread.name = "rally.relay.indexer"
        thread.start()
    }

    /// Hands over a record whose sync has returned.
    func enqueue(_ record: PublishLogRecord) {
        condition.lock()
        queue.append(record)
        durable = record.number
        condition.signal()
        condition.unlock()
    }

    /// The last durable record; what a read must wait for.
    var lastDurable: UInt64 {
        condition.lock()
        defer { condition.unlock() }
        return durable
    }

    var lastIndexed: UInt64 {
        condition.lock()
        defer { condition.unlock() }
        return indexed
    }

    /// Blocks until SQLite holds `number` (the writer's queue, before a
    /// deletion).
    func waitIndexed(through number: UInt64) throws {
        condition.lock()
        defer { condition.unlock() }
        while indexed < number, failure == nil, !stopped { condition.wait() }
        if let failure { throw failure }
        if indexed < number { throw PublishLogError.failed }
    }

    /// Blocks until SQLite holds `number` durably (the writer's queue,
    /// before it reuses the log file that holds it).
    func waitSynced(through number: UInt64) throws {
        condition.lock()
        defer { condition.unlock() }
        guard synced < number else { return }
        syncTarget = max(syncTarget, number)
        condition.broadcast()
        while synced < number, failure == nil, !stopped { condition.wait() }
        if let failure { throw failure }
        if synced < number { throw PublishLogError.failed }
    }

    /// Waits until SQLite holds every record durable now.
    func waitForDurable() async throws {
        guard try !isCaughtUp() else { return }
        try await withCheckedThrowingContinuation { waitOrResume($0) }
    }

    private func isCaughtUp() throws -> Bool {
        condition.lock()
        defer { condition.unlock() }
        if let failure { throw failure }
        return indexed >= durable
    }

    private func waitOrResume(_ continuation: CheckedContinuation<Void, any Error>) {
        condition.lock()
        defer { condition.unlock() }
        if let failure {
            continuation.resume(throwing: failure)
        } else if indexed >= durable {
            continuation.resume()
        } else if stopped {
            continuation.resume(throwing: PublishLogError.failed)
        } else {
            waiters.append((durable, continuation))
        }
    }

    /// Indexes what is queued, then ends the thread.
    func close() {
        condition.lock()
        closing = true
        condition.broadcast()
        while !stopped { condition.wait() }
        condition.unlock()
    }

    /// Stops taking records (tests use it to stand for a crash before
    /// SQLite got them).
    func pause() {
        condition.lock()
        paused = true
        condition.unlock()
    }

    /// Ends the thread without indexing what is queued, as a crash would.
    func abandon() {
        condition.lock()
        queue = []
        paused = false
        closing = true
        condition.broadcast()
        while !stopped { condition.wait() }
        condition.unlock()
    }

    private func run() {
        while let (records, durably) = next() {
            do {
                let last = records.last?.number ?? lastIndexed
                try pool.writeWithoutTransaction { db in
                    try db.execute(sql: durably ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL")
                    // Every other write on this connection stays FULL.
                    defer { try? db.execute(sql: "PRAGMA synchronous = FULL") }
                    try db.inTransaction {
                        for record in records {
                            for entry in record.entries where try !SQLiteRelayStore.write(entry, db: db) {
                                throw DatabaseError(
                                    resultCode: .SQLITE_CONSTRAINT,
                                    message: "record \(record.number) repeats an idempotency key of \(entry.topic)")
                            }
                        }
                        // Written even with no records: a FULL commit is
                        // what syncs the commits before it.
                        try SQLiteRelayStore.setAppliedLogRecord(last, db: db)
                        return .commit
                    }
                }
                advance(to: last, durably: durably)
            } catch {
                fail(error)
                return
            }
        }
    }

    /// Everything queued, and whether to commit it durably, once there is
    /// something to do and indexing is not paused; nil once closing with
    /// nothing left.
    private func next() -> (records: [PublishLogRecord], durably: Bool)? {
        condition.lock()
        defer { condition.unlock() }
        while (queue.isEmpty && syncTarget <= synced || paused) && !closing { condition.wait() }
        if closing, queue.isEmpty, synced >= indexed {
            stopped = true
            resumeWaiters(with: PublishLogError.failed)
            condition.broadcast()
            return nil
        }
        defer { queue = [] }
        return (queue, closing || syncTarget > synced)
    }

    private func advance(to number: UInt64, durably: Bool) {
        condition.lock()
        indexed = number
        if durably { synced = number }
        var waiting: [(through: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []
        for waiter in waiters {
            if waiter.through <= number { waiter.continuation.resume() } else { waiting.append(waiter) }
        }
        waiters = waiting
        condition.broadcast()
        condition.unlock()
    }

    private func fail(_ error: any Error) {
        condition.lock()
        failure = error
        stopped = true
        resumeWaiters(with: error)
        condition.broadcast()
        condition.unlock()
    }

    private func resumeWaiters(with error: any Error) {
        for waiter in waiters { waiter.continuation.resume(throwing: error) }
        waiters = []
    }
}
