public import Foundation

/// The relay's source of time, injected so tests control it.
public protocol RelayClock: Sendable {
    /// Wall-clock time: envelope timestamps, expiry, HTTP signature windows.
    var now: Date { get }
    /// Time since an arbitrary fixed origin that never goes backwards; rate
    /// limits use it so a wall-clock step cannot grant or withhold tokens.
    var monotonic: Duration { get }
    /// Returns once `monotonic` has reached `deadline` (at once if it has);
    /// throws when the task is cancelled first.
    func sleep(until deadline: Duration) async throws
}

public struct SystemRelayClock: RelayClock {
    private let origin = ContinuousClock.now

    public init() {}

    public var now: Date { Date() }
    public var monotonic: Duration { ContinuousClock.now - origin }

    public func sleep(until deadline: Duration) async throws {
        try await Task.sleep(until: origin + deadline, clock: .continuous)
    }
}

/// A clock that moves only when told to, for tests of rate limits, expiry
/// and retries: a sleeper wakes when `advance` takes the clock past its
/// deadline.
public final class ManualRelayClock: RelayClock, @unchecked Sendable {
    // NSLock rather than Synchronization.Mutex: the package still targets
    // macOS 14. Every access to the fields goes through the lock.
    private let lock = NSLock()
    private var wall: Date
    private var elapsed: Duration = .zero
    private var sleepers: [UInt64: (deadline: Duration, continuation: CheckedContinuation<Void, any Error>)] = [:]
    private var nextSleeper: UInt64 = 0

    public init(now: Date = Date(timeIntervalSince1970: 1_700_000_000)) {
        self.wall = now
    }

    public var now: Date { lock.withLock { wall } }
    public var monotonic: Duration { lock.withLock { elapsed } }

    public func advance(by duration: Duration) {
        let woken = lock.withLock { () -> [CheckedContinuation<Void, any Error>] in
            elapsed += duration
            wall += TimeInterval(duration.milliseconds) / 1000
            let due = sleepers.filter { $0.value.deadline <= elapsed }
            for key in due.keys { sleepers[key] = nil }
            return due.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume() }
    }

    /// How many tasks sleep on this clock now (for tests that must know a
    /// sleeper is waiting before they advance).
    public var sleeperCount: Int { lock.withLock { sleepers.count } }

    public func sleep(until deadline: Duration) async throws {
        let id = lock.withLock { () -> UInt64 in
            nextSleeper += 1
            return nextSleeper
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resumeNow = lock.withLock { () -> Bool in
                    if elapsed >= deadline || Task.isCancelled { return true }
                    sleepers[id] = (deadline, continuation)
                    return false
                }
                if resumeNow {
                    if Task.isCancelled {
                        continuation.resume(throwing: CancellationError())
                    } else {
                        continuation.resume()
                    }
                }
            }
        } onCancel: {
            let sleeper = lock.withLock { sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }
}

extension RelayClock {
    var nowMilliseconds: Int64 { Int64((now.timeIntervalSince1970 * 1000).rounded(.down)) }
}
