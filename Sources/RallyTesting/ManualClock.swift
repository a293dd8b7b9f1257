public import Foundation
public import RallyCore

/// A clock that moves only when a test moves it: the connection-status
/// timers (800 ms, 10 s) run on it, so a test shows "two minutes of
/// outage" without waiting two minutes and without racing the timers.
/// Sleepers wake when ``advance(by:)`` passes their deadline, in deadline
/// order; ``sleepers()`` lets a test wait until a timer is armed before it
/// moves the clock.
///
/// `@unchecked Sendable`: every stored property is read and written only
/// while `lock` is held, and continuations are resumed after it is
/// released, so no two threads touch the state at once.
public final class ManualClock: @unchecked Sendable {
    private struct Sleeper {
        var deadline: Date
        var continuation: CheckedContinuation<Void, any Error>
    }

    private let lock = NSLock()
    private var current: Date
    private var sleeping: [UInt64: Sleeper] = [:]
    private var nextID: UInt64 = 0
    private var watchers: [CheckedContinuation<Void, Never>] = []
    private var cancelledEarly: Set<UInt64> = []

    public init(start: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        current = start
    }

    public var now: Date { lock.withLock { current } }

    /// The clock as the SDK takes one.
    public var clientClock: ClientClock {
        ClientClock(
            now: { [self] in now }, sleep: { [self] duration in try await sleep(for: duration) },
            sleepUntil: { [self] deadline in try await sleep(until: deadline) })
    }

    /// Moves time forward and wakes every sleeper whose deadline it passes.
    public func advance(by duration: Duration) {
        let due: [CheckedContinuation<Void, any Error>] = lock.withLock {
            current = current.addingTimeInterval(duration.seconds)
            let ready = sleeping.filter { $0.value.deadline <= current }.sorted {
                $0.value.deadline < $1.value.deadline
            }
            for (id, _) in ready { sleeping[id] = nil }
            return ready.map(\.value.continuation)
        }
        for continuation in due { continuation.resume() }
    }

    /// How many tasks sleep on this clock now.
    public var sleeperCount: Int { lock.withLock { sleeping.count } }

    /// Returns once at least `count` tasks sleep on this clock.
    public func sleepers(atLeast count: Int = 1) async {
        while true {
            // Woken whenever a sleeper arrives; then counted again.
            await withCheckedContinuation { (watcher: CheckedContinuation<Void, Never>) in
                let ready = lock.withLock { () -> Bool in
                    if sleeping.count >= count { return true }
                    watchers.append(watcher)
                    return false
                }
                if ready { watcher.resume() }
            }
            if sleeperCount >= count { return }
        }
    }

    private func sleep(for duration: Duration) async throws {
        try await sleep(until: nil, orFor: duration)
    }

    private func sleep(until deadline: Date) async throws {
        try await sleep(until: deadline, orFor: .zero)
    }

    /// Sleeps until `fixed`, or for `duration` from the moment the sleeper
    /// registers.
    private func sleep(until fixed: Date?, orFor duration: Duration) async throws {
        let id = lock.withLock { () -> UInt64 in
            nextID += 1
            return nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (wake, watchers) = lock.withLock { () -> (Bool?, [CheckedContinuation<Void, Never>]) in
                    // A cancellation that came before this registration
                    // found nothing to cancel: honour it here.
                    if cancelledEarly.remove(id) != nil { return (nil, []) }
                    let deadline = fixed ?? current.addingTimeInterval(duration.seconds)
                    if deadline <= current { return (true, []) }
                    sleeping[id] = Sleeper(deadline: deadline, continuation: continuation)
                    let waiting = self.watchers
                    self.watchers.removeAll()
                    return (false, waiting)
                }
                for watcher in watchers { watcher.resume() }
                switch wake {
                case nil: continuation.resume(throwing: CancellationError())
                case true?: continuation.resume()
                case false?: break
                }
            }
        } onCancel: {
            let sleeper = lock.withLock { () -> Sleeper? in
                guard let sleeper = sleeping.removeValue(forKey: id) else {
                    cancelledEarly.insert(id)
                    return nil
                }
                return sleeper
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }
}

extension Duration {
    fileprivate var seconds: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}
