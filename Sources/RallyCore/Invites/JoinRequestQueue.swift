import RallyWire

/// Join requests read from an invite inbox and not yet answered. The
/// reader adds them as they arrive; the answerer takes every one waiting
/// (up to a batch) at once, so requests that arrive while a commit is on
/// its way are answered together by the next commit. Until the reader
/// has read the inbox's backlog, the answerer waits for a full batch: a
/// backlog is answered in as few commits as it can be.
actor JoinRequestQueue {
    /// Most requests taken at once: one commit's worth.
    let batchLimit: Int
    /// Past this many waiting, the reader waits for the answerer.
    let capacity: Int
    private var waiting: [WireEnvelope] = []
    /// The highest seq ever queued: a subscription that starts again from
    /// the stored cursor delivers requests still waiting or in hand again.
    private var highestQueued: UInt64 = 0
    private var finished = false
    private var caughtUp = false
    private var taker: CheckedContinuation<[WireEnvelope], Never>?
    private var readers: [CheckedContinuation<Void, Never>] = []

    init(batchLimit: Int = GroupRules.maxAdmissionBatch, capacity: Int? = nil) {
        self.batchLimit = batchLimit
        self.capacity = capacity ?? batchLimit * 4
    }

    /// Queues one request; waits while the queue is full.
    func add(_ envelope: WireEnvelope) async {
        guard envelope.seq > highestQueued, !finished else { return }
        highestQueued = envelope.seq
        waiting.append(envelope)
        handOver()
        while waiting.count >= capacity, !finished {
            await withCheckedContinuation { readers.append($0) }
        }
    }

    /// The requests waiting, oldest first and at most a batch; waits for
    /// one when none is. Empty once the queue is finished and drained.
    func take() async -> [WireEnvelope] {
        if isReady { return takeBatch() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { taker = $0 }
        } onCancel: {
            Task { await self.finish() }
        }
    }

    /// The reader has read the backlog: from now on a request is answered
    /// as soon as the answerer is free.
    func markCaughtUp() {
        caughtUp = true
        handOver()
    }

    /// No more requests will be added: the answerer drains what waits.
    func finish() {
        finished = true
        handOver()
        wakeReaders()
    }

    private var isReady: Bool {
        finished || (!waiting.isEmpty && (caughtUp || waiting.count >= batchLimit))
    }

    private func handOver() {
        guard isReady, let taker else { return }
        self.taker = nil
        taker.resume(returning: takeBatch())
    }

    /// Readers waiting for room (for tests).
    var readersWaiting: Int { readers.count }

    private func takeBatch() -> [WireEnvelope] {
        let batch = Array(waiting.prefix(batchLimit))
        waiting.removeFirst(batch.count)
        wakeReaders()
        return batch
    }

    private func wakeReaders() {
        let woken = readers
        readers = []
        for reader in woken { reader.resume() }
    }
}
