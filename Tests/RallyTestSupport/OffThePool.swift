import Dispatch

/// Runs `body` in the calling task, but on a thread of its own instead of
/// Swift's cooperative pool.
///
/// The pool has one thread per core, two on the machines these tests run
/// on. A test that computes for seconds on it (a property test over
/// generated group logs, QR codes of every version) holds a pool thread
/// the whole time; two such tests at once hold both, and every other task
/// of the test process, in-process relays included, stops until one of
/// them finishes. Stack dumps of such stalls showed exactly that (ADR
/// 0024). Since `body` stays in the same task, `#expect` and
/// `#require` inside it are reported for the calling test as usual.
public func offThePool<T, Failure: Error>(
    _ body: () async throws(Failure) -> T
) async throws(Failure) -> T {
    try await withTaskExecutorPreference(OwnQueueExecutor(), operation: body)
}

/// A task executor whose jobs run on a serial dispatch queue of its own.
/// A serial queue overcommits: it gets a thread whether or not the pool's
/// threads are busy, and it never takes one of theirs.
final class OwnQueueExecutor: TaskExecutor {
    private let queue = DispatchQueue(label: "rally.test.off-the-pool")

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
