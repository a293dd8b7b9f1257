import Logging
import NIOCore
import NIOPosix
import RallyWire
import Synchronization

/// A store that can append on the caller's thread: the embedded store,
/// whose commit (a segment record and its `fdatasync`, ADR 0030) a socket's
/// event loop runs itself (ADR 0028).
protocol SynchronousAppending: RelayStore {
    func appendNow(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) throws -> [Result<AppendResult, AppendRefusal>]
}

/// The single writer of envelopes. Publishes that arrive while a commit (a
/// segment record, or a PostgreSQL transaction) is under way wait and go
/// into the next one together (group commit), so many concurrent
/// publishers share one fsync instead of paying one each. A publish
/// completes only after its commit is durable.
///
/// One queue, in submission order, and one commit at a time. A publish
/// submitted on a socket's event loop to an idle writer whose last commit
/// carried one publish is committed on that loop, after the loop's reads of
/// this tick (so everything they brought shares the commit), with the
/// store's synchronous append: no hand-off between the socket, the commit
/// and the acknowledgement (ADR 0028). A loop cannot serve its other
/// sockets while it commits, so only that first commit runs there, and
/// none while publishers keep several publishes in flight (ADR 0040). What
/// queues meanwhile, and publishes submitted off a loop (HTTP, tests), are
/// committed on the writers' commit thread with the same synchronous
/// append, until the queue is empty (ADR 0029). Every
/// commit to a store without a synchronous append (PostgreSQL) is made by a
/// task.
final class PublishWriter: Sendable {
    typealias Completion = @Sendable (Result<AppendResult, RelayFailure>) -> Void

    /// Publishes in submission order, and who waits for each: two arrays,
    /// so a commit hands the store its requests without copying them.
    private struct Batch: Sendable {
        var requests: [PublishRequest] = []
        var completions: [Completion] = []

        var count: Int { requests.count }
        var isEmpty: Bool { requests.isEmpty }

        mutating func append(_ request: PublishRequest, _ completion: @escaping Completion) {
            requests.append(request)
            completions.append(completion)
        }
    }

    private struct State {
        var queue = Batch()
        /// Bytes of the publishes waiting in `queue`.
        var queuedBytes = 0
        /// A commit is scheduled or running, on a loop, the commit thread or
        /// a task; it goes on until the queue is empty.
        var isCommitting = false
        var isClosed = false
        /// How many publishes the last commit carried: more than one says
        /// other publishers are about, whose sockets a commit on a loop
        /// would hold up for its fsync.
        var lastBatchCount = 0
        /// Waiting for the queue to empty (``close()``, ``untilIdle()``).
        var drained: [CheckedContinuation<Void, Never>] = []

        mutating func take(upTo maxBatch: Int) -> Batch {
            lastBatchCount = min(queue.count, maxBatch)
            guard queue.count > maxBatch else {
                // The whole queue, moved rather than copied: the usual case.
                defer {
                    queue = Batch()
                    queuedBytes = 0
                }
                return queue
            }
            let batch = Batch(
                requests: Array(queue.requests.prefix(maxBatch)),
                completions: Array(queue.completions.prefix(maxBatch)))
            queue.requests.removeFirst(maxBatch)
            queue.completions.removeFirst(maxBatch)
            queuedBytes -= batch.requests.reduce(0) { $0 + $1.queuedBytes }
            return batch
        }

        /// After a commit: whether more waits; if not, the writer is idle
        /// and whoever waits for that is told.
        mutating func hasMoreElseIdle() -> Bool {
            guard queue.isEmpty else { return true }
            isCommitting = false
            for waiter in drained { waiter.resume() }
            drained = []
            return false
        }
    }

    private let store: any RelayStore
    private let synchronousStore: (any SynchronousAppending)?
    private let hub: TopicHub
    private let clock: any RelayClock
    private let metrics: RelayMetrics
    private let maxBatch: Int
    private let maxQueueBytes: Int
    private let logger: Logger
    private let push: PushDispatcher?
    private let state = Mutex(State())

    init(
        store: any RelayStore, hub: TopicHub, clock: any RelayClock, metrics: RelayMetrics, maxBatch: Int,
        maxQueueBytes: Int = RelayLimits.default.maxWriteQueueBytes, logger: Logger, push: PushDispatcher? = nil
    ) {
        self.push = push
        self.maxQueueBytes = max(1, maxQueueBytes)
        self.store = store
        synchronousStore = store as? any SynchronousAppending
        self.hub = hub
        self.clock = clock
        self.metrics = metrics
        self.maxBatch = max(1, maxBatch)
        self.logger = logger
    }

    /// Queues a publish. Publishes submitted one after another by the same
    /// caller are committed in that order. `completion` runs once, after
    /// the commit (or failure); it must not block. Given `loop` (the
    /// caller runs on it), an idle writer commits there.
    func submit(_ request: PublishRequest, on loop: (any EventLoop)? = nil, completion: @escaping Completion) {
        let size = request.queuedBytes
        enum Start { case none, onLoop(any EventLoop, any SynchronousAppending), elsewhere }
        let outcome: Result<Start, RelayFailure> = state.withLock { state in
            guard !state.isClosed else {
                return .failure(RelayFailure(.shuttingDown, "the relay is shutting down"))
            }
            // Bounded by bytes, not only by count: a burst of large
            // publishes must not hold unbounded memory while a commit is
            // slow.
            guard state.queue.isEmpty || state.queuedBytes + size <= maxQueueBytes else {
                return .failure(
                    RelayFailure(
                        .rateLimited, "the relay's write queue is full", retryAfterMilliseconds: Self.queueFullRetry))
            }
            state.queuedBytes += size
            state.queue.append(request, completion)
            guard !state.isCommitting else { return .success(Start.none) }
            state.isCommitting = true
            if let loop, let synchronousStore, state.lastBatchCount <= 1 {
                return .success(.onLoop(loop, synchronousStore))
            }
            return .success(.elsewhere)
        }
        switch outcome {
        case .failure(let failure): completion(.failure(failure))
        case .success(.none): break
        case .success(.onLoop(let loop, let store)): loop.execute { self.commitOnLoop(store) }
        case .success(.elsewhere): commitOffTheLoops()
        }
    }

    /// Where commits with a synchronous append run when not on a socket's
    /// loop: a thread of their own, so a commit's fsync holds no event loop
    /// and no thread of Swift's pool, and a commit reaches the store with no
    /// hop through a task (ADR 0029: 4–15% more msg/s).
    /// One per process, shared by every writer: a process runs one relay
    /// (tests run several, whose commits then take turns).
    private static let commitThread: any EventLoop = MultiThreadedEventLoopGroup(numberOfThreads: 1).next()

    private func commitOffTheLoops() {
        if let synchronousStore {
            Self.commitThread.execute { self.commitOnThread(synchronousStore) }
        } else {
            // Unstructured on purpose: a publisher that goes away must not
            // cancel the transaction that carries other publishers' data.
            Task { await self.commitOnTask() }
        }
    }

    static let queueFullRetry: UInt64 = 100
    private static let inboxPrefix = "inbox/"

    func publish(_ request: PublishRequest) async -> Result<AppendResult, RelayFailure> {
        await withCheckedContinuation { continuation in
            submit(request) { continuation.resume(returning: $0) }
        }
    }

    /// Publishes waiting for the next commit.
    var queuedCount: Int { state.withLock { $0.queue.count } }

    /// Bytes of the publishes waiting for the next commit.
    var queuedBytes: Int { state.withLock { $0.queuedBytes } }

    /// Refuses new publishes and waits until every queued one is committed.
    func close() async {
        await untilIdle(closing: true)
    }

    /// Waits until no commit is scheduled or running. A publisher's
    /// completion runs inside its commit, before the writer goes idle:
    /// what is submitted from a completion still joins that commit.
    func untilIdle() async {
        await untilIdle(closing: false)
    }

    private func untilIdle(closing: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state in
                if closing { state.isClosed = true }
                guard state.isCommitting else { return true }
                state.drained.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// One commit on this loop, blocking it for the commit's fsync as
    /// Redis's thread does; what queued meanwhile goes to the commit thread.
    private func commitOnLoop(_ synchronousStore: any SynchronousAppending) {
        commitNow(synchronousStore)
        if state.withLock({ $0.hasMoreElseIdle() }) { commitOffTheLoops() }
    }

    /// Commits until the queue is empty, on the commit thread.
    private func commitOnThread(_ synchronousStore: any SynchronousAppending) {
        repeat { commitNow(synchronousStore) } while state.withLock({ $0.hasMoreElseIdle() })
    }

    private func commitNow(_ synchronousStore: any SynchronousAppending) {
        let batch = state.withLock { $0.take(upTo: maxBatch) }
        let started = ContinuousClock.now
        let result = Result {
            try synchronousStore.appendNow(batch.requests, serverTimeMilliseconds: clock.nowMilliseconds)
        }
        settle(batch, result, started: started)
    }

    /// Commits through the store's asynchronous append until the queue is
    /// empty.
    private func commitOnTask() async {
        repeat {
            let batch = state.withLock { $0.take(upTo: maxBatch) }
            let started = ContinuousClock.now
            let result: Result<[Result<AppendResult, AppendRefusal>], any Error>
            do {
                result = .success(
                    try await store.append(batch.requests, serverTimeMilliseconds: clock.nowMilliseconds))
            } catch {
                result = .failure(error)
            }
            settle(batch, result, started: started)
        } while state.withLock({ $0.hasMoreElseIdle() })
    }

    private func settle(
        _ batch: Batch, _ result: Result<[Result<AppendResult, AppendRefusal>], any Error>,
        started: ContinuousClock.Instant
    ) {
        metrics.commitLatency.record(ContinuousClock.now - started)
        metrics.commitBatchSize.record(Double(batch.count))
        switch result {
        case .success(let results):
            var fresh: [TopicHub.Item] = []
            fresh.reserveCapacity(results.count)
            var duplicates = 0
            for case .success(let stored) in results {
                if stored.duplicate {
                    duplicates += 1
                } else {
                    fresh.append(TopicHub.Item(envelope: stored.envelope, retiredKey: stored.retiredKey))
                }
            }
            metrics.publishes.increment(by: Int64(fresh.count))
            metrics.duplicates.increment(by: Int64(duplicates))
            if let push {
                // Handed over without waiting: pushing never holds a publish.
                for (request, appended) in zip(batch.requests, results) where request.shouldPush {
                    guard case .success(let stored) = appended, !stored.duplicate,
                        request.topic.hasPrefix(Self.inboxPrefix)
                    else { continue }
                    push.stored(inbox: String(request.topic.dropFirst(Self.inboxPrefix.count)))
                }
            }
            // Acks first, then live subscribers (ADR 0034): the store has
            // the batch already, so an ack still implies that every fetch,
            // catch-up and long-poll from here on finds the envelope, and a
            // feed registered meanwhile skips what its catch-up sent. Handing
            // deliveries to other loops wakes them, which the acks no longer
            // wait for.
            for index in results.indices {
                batch.completions[index](
                    results[index].mapError { RelayFailure($0, topic: batch.requests[index].topic) })
            }
            hub.deliver(items: fresh)
        case .failure(let error):
            logger.error("commit failed", metadata: ["error": "\(error)", "batch": "\(batch.count)"])
            for completion in batch.completions {
                completion(.failure(RelayFailure(.internal, "could not store the envelope")))
            }
        }
    }
}
