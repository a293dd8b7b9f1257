import Logging
import RallyWire

/// The single writer of envelopes. Publishes that arrive while a transaction
/// is committing wait and go into the next one together (group commit), so
/// many concurrent publishers share one fsync instead of paying one each.
/// A publish completes only after its transaction has committed.
actor PublishWriter {
    typealias Completion = @Sendable (Result<AppendResult, RelayFailure>) -> Void

    private struct Pending {
        let request: PublishRequest
        let completion: Completion
    }

    private let store: any RelayStore
    private let hub: TopicHub
    private let clock: any RelayClock
    private let metrics: RelayMetrics
    private let maxBatch: Int
    private let maxQueueBytes: Int
    private let logger: Logger
    private let push: PushDispatcher?

    private var queue: [Pending] = []
    /// Bytes of the publishes waiting in `queue`.
    private(set) var queuedBytes = 0
    private var flushTask: Task<Void, Never>?
    private var isClosed = false

    init(
        store: any RelayStore, hub: TopicHub, clock: any RelayClock, metrics: RelayMetrics, maxBatch: Int,
        maxQueueBytes: Int = RelayLimits.default.maxWriteQueueBytes, logger: Logger, push: PushDispatcher? = nil
    ) {
        self.push = push
        self.maxQueueBytes = max(1, maxQueueBytes)
        self.store = store
        self.hub = hub
        self.clock = clock
        self.metrics = metrics
        self.maxBatch = max(1, maxBatch)
        self.logger = logger
    }

    /// Queues a publish. Publishes submitted one after another by the same
    /// caller are committed in that order. `completion` runs once, after
    /// the commit (or failure), on the writer; it must not block.
    func submit(_ request: PublishRequest, completion: @escaping Completion) {
        guard !isClosed else {
            completion(.failure(RelayFailure(.shuttingDown, "the relay is shutting down")))
            return
        }
        let size = request.queuedBytes
        // Bounded by bytes, not only by count: a burst of large publishes
        // must not hold unbounded memory while a commit is slow.
        guard queue.isEmpty || queuedBytes + size <= maxQueueBytes else {
            completion(
                .failure(
                    RelayFailure(
                        .rateLimited, "the relay's write queue is full", retryAfterMilliseconds: Self.queueFullRetry)))
            return
        }
        queuedBytes += size
        queue.append(Pending(request: request, completion: completion))
        if flushTask == nil {
            // Unstructured on purpose: a publisher that goes away must not
            // cancel the transaction that carries other publishers' data.
            flushTask = Task { await self.flushLoop() }
        }
    }

    static let queueFullRetry: UInt64 = 100
    private static let inboxPrefix = "inbox/"

    func publish(_ request: PublishRequest) async -> Result<AppendResult, RelayFailure> {
        await withCheckedContinuation { continuation in
            submit(request) { continuation.resume(returning: $0) }
        }
    }

    /// Publishes waiting for the next transaction.
    var queuedCount: Int { queue.count }

    /// Refuses new publishes and waits until every queued one is committed.
    func close() async {
        isClosed = true
        await flushTask?.value
    }

    private func flushLoop() async {
        while !queue.isEmpty {
            let count = min(maxBatch, queue.count)
            let batch = Array(queue.prefix(count))
            queue.removeFirst(count)
            queuedBytes -= batch.reduce(0) { $0 + $1.request.queuedBytes }
            await commit(batch)
        }
        flushTask = nil
    }

    private func commit(_ batch: [Pending]) async {
        let started = ContinuousClock.now
        let result: Result<[Result<AppendResult, AppendRefusal>], any Error>
        do {
            result = .success(
                try await store.append(batch.map(\.request), serverTimeMilliseconds: clock.nowMilliseconds))
        } catch {
            result = .failure(error)
        }
        metrics.commitLatency.record(ContinuousClock.now - started)
        metrics.commitBatchSize.record(Double(batch.count))
        switch result {
        case .success(let results):
            let stored = results.compactMap { try? $0.get() }
            let fresh = stored.filter { !$0.duplicate }.map {
                TopicHub.Item(envelope: $0.envelope, retiredKey: $0.retiredKey)
            }
            metrics.publishes.increment(by: Int64(fresh.count))
            metrics.duplicates.increment(by: Int64(stored.count - fresh.count))
            // Live subscribers get the envelopes before publishers get acks,
            // so an ack implies the envelope is visible everywhere.
            await hub.deliver(items: fresh)
            if let push {
                // Handed over without waiting: pushing never holds a publish.
                for (pending, appended) in zip(batch, results) where pending.request.shouldPush {
                    guard case .success(let stored) = appended, !stored.duplicate,
                        pending.request.topic.hasPrefix(Self.inboxPrefix)
                    else { continue }
                    push.stored(inbox: String(pending.request.topic.dropFirst(Self.inboxPrefix.count)))
                }
            }
            for (pending, appended) in zip(batch, results) {
                pending.completion(appended.mapError { RelayFailure($0, topic: pending.request.topic) })
            }
        case .failure(let error):
            logger.error("commit failed", metadata: ["error": "\(error)", "batch": "\(batch.count)"])
            for pending in batch {
                pending.completion(.failure(RelayFailure(.internal, "could not store the envelope")))
            }
        }
    }
}
